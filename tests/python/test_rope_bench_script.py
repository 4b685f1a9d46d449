"""bench/rope_side_by_side.py runs: a quick pass without torch.compile exits
0, finds tokpos within 1e-6 of the float64-angle reference, prints the table
and the targets."""

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("torch", reason="the RoPE benchmark compares against torch")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "bench", "rope_side_by_side.py")


def test_quick_run_agrees(tmp_path):
    report = tmp_path / "rope.json"
    proc = subprocess.run(
        [sys.executable, SCRIPT, "--quick", "--no-compile", "--threads", "1", "--json", str(report)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    assert "outputs agree" in proc.stdout, output
    assert "targets:" in proc.stdout, output
    doc = json.loads(report.read_text())
    assert {(r["dtype"], r["threads"]) for r in doc["rows"]} == {("float32", 1), ("bfloat16", 1)}
    for row in doc["rows"]:
        for impl in ("tokpos", "tokpos_out", "eager", "copy"):
            assert row[impl] > 0, (impl, row)
        assert "compile" not in row
