"""The docs say what the build does: counts and lists that the build defines.

Each sentence checked here names a number of things the build has (the
libFuzzer targets); the test reads the number from the build files, so a
target added without the docs (or the docs without the target) fails here.
"""

from __future__ import annotations

import re

from conftest import REPO

NUMBERS = {"six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10}


def _fuzz_targets() -> set[str]:
    make = (REPO / "Makefile").read_text()
    listed = set(re.search(r"^FUZZ_TARGETS\s*=\s*(.*)$", make, re.M).group(1).split())
    sources = {p.stem.removeprefix("fuzz_") for p in (REPO / "tests" / "fuzz").glob("fuzz_*.cc")}
    cmake = (REPO / "tests" / "fuzz" / "CMakeLists.txt").read_text()
    built = set(re.findall(r"\bfuzz_(\w+)", re.search(r"add_custom_target\(fuzz_targets([^)]*)\)", cmake).group(1)))
    assert listed == sources == built, (listed, sources, built)
    return listed


def test_fuzz_target_count_in_docs():
    n = len(_fuzz_targets())
    for doc, pattern in [
        ("docs/design.md", r"`make fuzz` runs (\w+) libFuzzer targets"),
        ("docs/dependencies.md", r"\| (\w+) libFuzzer targets with clang"),
    ]:
        m = re.search(pattern, (REPO / doc).read_text())
        assert m, f"{doc}: no sentence matching {pattern!r}"
        assert NUMBERS.get(m.group(1)) == n, f"{doc} says {m.group(1)} libFuzzer targets; the build has {n}"
