"""bench/python_side_by_side.py runs: a quick decode-only pass exits 0 and
finds the implementations' outputs in agreement."""

import os
import subprocess
import sys

import pytest

pytest.importorskip("torch", reason="the side-by-side benchmark compares against torch")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "bench", "python_side_by_side.py")


def test_quick_decode_run_agrees():
    proc = subprocess.run(
        [sys.executable, SCRIPT, "--quick", "--no-compile", "--shapes", "decode", "--threads", "1"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    assert "outputs agree" in proc.stdout, output
    assert "targets:" in proc.stdout, output
