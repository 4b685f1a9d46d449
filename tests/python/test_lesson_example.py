"""examples/lesson.py, the first lesson's demo on tokpos.torch, run as a
learner runs it: its figures are checked against the lesson's own formulas."""

import math
import pathlib
import re
import subprocess
import sys

import pytest

from conftest import tokpos_torch

tokpos_torch()  # examples/lesson.py needs tokpos.torch: or a skip saying why (torch missing or too old)

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "examples" / "lesson.py"


def run(*args):
    proc = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def section(text, dim):
    start = text.index(f"=== D = {dim} ")
    end = text.find("=== D = ", start + 1)
    return text[start:] if end < 0 else text[start:end]


def adjacent_cosine_sinusoidal(dim, base=10000.0):
    # Each sin/cos pair has norm 1, so cos(P[p], P[p+1]) = mean over pairs of cos(w_k).
    pairs = dim // 2
    return sum(math.cos(base ** (-2 * k / dim)) for k in range(pairs)) / pairs


def test_lesson_prints_shapes_parameters_cosine_and_bands_for_64_and_32():
    vocab, context, batch, time = 1000, 128, 2, 16
    out = run("--vocab", str(vocab), "--context", str(context), "--batch", str(batch), "--time", str(time))
    for dim in (64, 32):
        s = section(out, dim)
        assert f"output ({batch}, {time}, {dim})" in s
        learned = re.search(r"learned\s+([\d,]+)\s+([\d,]+)\s+([\d,]+)", s)
        sinusoidal = re.search(r"sinusoidal\s+([\d,]+)\s+([\d,]+)\s+([\d,]+)", s)
        as_int = lambda m: [int(g.replace(",", "")) for g in m.groups()]
        assert as_int(learned) == [vocab * dim, context * dim, vocab * dim + context * dim]
        assert as_int(sinusoidal) == [vocab * dim, 0, vocab * dim]
        first = float(re.search(r"sinusoidal\s+first ([+-][\d.]+)", s).group(1))
        assert first == pytest.approx(adjacent_cosine_sinusoidal(dim), abs=6e-4)
        bands = [int(n) for n in re.findall(r"\)\s+#+ (\d+)", s)]
        assert sum(bands) == dim // 2
    # The exercise: halving D halves the pairs in every band, give or take one.
    b64 = [int(n) for n in re.findall(r"\)\s+#+ (\d+)", section(out, 64))]
    b32 = [int(n) for n in re.findall(r"\)\s+#+ (\d+)", section(out, 32))]
    assert len(b64) == len(b32)
    assert all(abs(a - 2 * b) <= 1 for a, b in zip(b64, b32))
