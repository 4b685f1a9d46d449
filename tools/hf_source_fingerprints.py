#!/usr/bin/env python3
"""The fingerprints of the transformers functions tokpos.hf's fused patches
mirror (python/tokpos/hf/_sources.py), for the installed transformers.

    python tools/hf_source_fingerprints.py           # each function's fingerprint, and whether it is recorded
    python tools/hf_source_fingerprints.py --write   # add the installed ones to _sources.RECORDED

Without --write it prints, per family, each mirrored function's
fingerprint and "recorded" or "CHANGED" (or "missing": the installed
transformers has no such function), and exits 1 when one is not recorded.
--write rewrites the RECORDED table in python/tokpos/hf/_sources.py with
the installed fingerprints added (the version appended to a fingerprint
already there). Run --write only for a transformers version the fused
patches were checked against: diff each CHANGED function with the recorded
version's source, bring the fused patch up to date where the code it
mirrors changed, run tests/python/test_hf*.py under that version, then
record it.

Run it with the Python that has the transformers to fingerprint, e.g.
    PYTHONPATH=/tmp/hf-x build/venv/bin/python tools/hf_source_fingerprints.py
(_sources.py is loaded from this checkout, not from an installed tokpos).
"""

from __future__ import annotations

import argparse
import importlib.util
import pathlib
import sys

SOURCES = pathlib.Path(__file__).resolve().parents[1] / "python" / "tokpos" / "hf" / "_sources.py"
BEGIN, END = "# BEGIN RECORDED\n", "# END RECORDED\n"


def load_sources():
    spec = importlib.util.spec_from_file_location("tokpos_hf_sources", SOURCES)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def table_text(recorded: dict) -> str:
    lines = ["RECORDED: dict = {"]
    for family, table in recorded.items():
        lines.append(f"    {family!r}: {{".replace("'", '"'))
        for path, prints in table.items():
            items = ", ".join(f'"{fp}": "{versions}"' for fp, versions in prints.items())
            lines.append(f'        "{path}": {{{items}}},')
        lines.append("    },")
    lines.append("}")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="add the installed fingerprints to _sources.RECORDED")
    args = parser.parse_args()
    sources = load_sources()
    version = sources.installed_version()
    print(f"transformers {version}")
    recorded = {family: {p: dict(v) for p, v in table.items()} for family, table in sources.RECORDED.items()}
    unrecorded = 0
    for family, paths in sources.MIRRORED.items():
        print(f"{family}:")
        for path in paths:
            fp = sources.fingerprint(sources.resolve(path))
            known = recorded.get(family, {}).get(path, {})
            state = "missing" if fp is None else ("recorded" if fp in known else "CHANGED")
            unrecorded += state != "recorded"
            print(f"  {fp or '-':16}  {state:8}  {path}")
            if fp is not None and args.write:
                listed = [v for v in known.get(fp, "").split(", ") if v]
                if version not in listed:
                    listed.append(version)
                recorded.setdefault(family, {}).setdefault(path, {})[fp] = ", ".join(listed)
    if args.write:
        text = SOURCES.read_text()
        head, rest = text.split(BEGIN, 1)
        _, tail = rest.split(END, 1)
        SOURCES.write_text(head + BEGIN + table_text(recorded) + END + tail)
        print(f"recorded transformers {version} in {SOURCES}")
        return 0
    return 1 if unrecorded else 0


if __name__ == "__main__":
    sys.exit(main())
