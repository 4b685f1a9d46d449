"""The benchmark scripts run: a quick pass of each exits 0, finds the
implementations' outputs in agreement and prints the targets."""

import json
import os
import subprocess
import sys

import pytest

from conftest import tokpos_torch

tokpos_torch()  # the side-by-side benchmarks run tokpos.torch against torch: or a skip saying why

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_bench(script, *args):
    """Runs bench/<script> quickly; returns its stdout after checking that it
    exits 0, finds the outputs in agreement and prints the targets."""
    proc = subprocess.run(
        [sys.executable, os.path.join(ROOT, "bench", script), "--quick", "--no-compile", "--threads", "1", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    assert "outputs agree" in proc.stdout, output
    assert "targets:" in proc.stdout, output
    return proc.stdout


def test_quick_decode_run_agrees():
    run_bench("python_side_by_side.py", "--shapes", "decode")


def test_quick_rope_run_agrees(tmp_path):
    # tokpos within 1e-6 of the float64-angle reference, and one row per dtype.
    report = tmp_path / "rope.json"
    run_bench("rope_side_by_side.py", "--json", str(report))
    doc = json.loads(report.read_text())
    assert {(r["dtype"], r["threads"]) for r in doc["rows"]} == {("float32", 1), ("bfloat16", 1)}
    for row in doc["rows"]:
        for impl in ("tokpos", "tokpos_out", "eager", "copy"):
            assert row[impl] > 0, (impl, row)
        assert "compile" not in row


def test_side_by_side_peers_run_and_match_bits():
    # The plain loop, the torch peers and the gather line run beside tokpos at
    # the decode shape, each process at both thread counts on the same inputs;
    # the loop's forward and both backwards are checked bit for bit against
    # tokpos's at each, and ggml's status is said.
    peers = os.path.join(ROOT, "build", "lib", "libtokpos_peers.so")
    if not os.path.exists(peers):
        pytest.skip(f"{peers} is not built (cmake --build build --target tokpos_peers)")
    proc = subprocess.run(
        [sys.executable, os.path.join(ROOT, "bench", "side_by_side.py"), "--quick", "--no-compile", "--rounds", "1",
         "--budget", "0.02", "--threads", "1,2", "--shapes", "decode", "--impls", "tokpos,loop,isel,ebag,gather"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    bits = [line for line in proc.stdout.splitlines() if line.strip().startswith("decode     t=")]
    assert bits == [f"  decode     t={t}: forward bitwise equal, backward serial bitwise equal, "
                    "backward channel slices bitwise equal" for t in (1, 2)], output
    assert "\nggml: " in proc.stdout, output
    for peer in ("loop", "isel", "ebag"):
        assert f"decode t=2 fwd at least as fast as {peer}" in proc.stdout, output
        assert f"decode t=2 bwd at least as fast as {peer}" in proc.stdout, output
