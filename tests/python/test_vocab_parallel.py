"""tokpos.torch.VocabParallelEmbedding and VocabParallelComposer over
torch.distributed (gloo): dist_vocab_parallel_worker.py runs under torchrun
at world sizes 1, 2 and 4 (4 ranks oversubscribe a 2-core machine) and
compares every rank's forward, gradients, initial table and safetensors
files with the one-process modules, bit for bit."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

from conftest import tokpos_torch

tt = tokpos_torch()  # or a skip saying why (torch missing or too old)
torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")


HERE = pathlib.Path(__file__).resolve().parent
WORKER = HERE / "dist_vocab_parallel_worker.py"
TIMEOUT_S = 120


def _gloo() -> bool:
    return dist.is_available() and dist.is_gloo_available()


def test_exported():
    assert "VocabParallelEmbedding" in tt.__all__ and "VocabParallelComposer" in tt.__all__
    assert tt.VocabParallelEmbedding.__module__ == "tokpos._parallel"


@pytest.mark.skipif(not _gloo(), reason="torch.distributed with gloo is not available in this torch build")
def test_needs_an_initialised_process_group():
    if dist.is_initialized():
        pytest.skip("a process group is already initialised in this process")
    with pytest.raises(RuntimeError, match="not initialised"):
        tt.VocabParallelEmbedding(10, 4)


@pytest.mark.skipif(not _gloo(), reason="torch.distributed with gloo is not available in this torch build")
@pytest.mark.parametrize("world", [1, 2, 4])
def test_vocab_parallel_matches_one_process(world, tmp_path):
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={world}",
        str(WORKER),
        str(tmp_path),
    ]
    try:
        run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        pytest.fail(f"{world} ranks did not finish within {TIMEOUT_S} s (a hang?); output so far:\n{out[-6000:]}")
    out = run.stdout + run.stderr
    failures = [line for line in out.splitlines() if ": FAIL" in line]
    assert run.returncode == 0 and not failures, f"world {world}: exit {run.returncode}\n" + (
        "\n".join(failures) if failures else out[-6000:]
    )
    for r in range(world):
        assert f"rank {r}: all " in out, f"rank {r} did not report its checks:\n{out[-4000:]}"
        # A bad id fails on every rank, before any communication, with the
        # IndexError naming it; the run goes on (no rank waits in a collective).
        assert f"rank {r}: bad id 42 (V=37) raised IndexError" in out, out[-4000:]
        assert f"rank {r}: bad id 11 (V=6) raised IndexError" in out, out[-4000:]
