"""Runs a snippet of Python as the ranks of a torch.distributed gloo group
(a file store and the loopback interface, nothing else), each rank a fresh
process, all bounded by one deadline: a hang (a blocking open, a collective
that never completes) fails the calling test instead of stopping the suite.

The snippet sees RANK, WORLD, DIR (a directory every rank shares), numpy as
np, torch, dist, tokpos, the tokpos.torch modules, and two helpers:
result(**values) reports JSON values back to the test, and attempt(fn)
returns None or [exception type name, message]."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

_PRELUDE = '''
import json, os, pathlib, stat, sys
import numpy as np
import torch
import torch.distributed as dist
import tokpos
from tokpos.torch import LearnedPositionalEmbedding, TokenEmbedding, VocabParallelEmbedding

RANK, WORLD, DIR = int(sys.argv[1]), int(sys.argv[2]), pathlib.Path(sys.argv[4])
dist.init_process_group("gloo", init_method="file://" + sys.argv[3], rank=RANK, world_size=WORLD)


def result(**values):
    print("RESULT " + json.dumps(values), flush=True)


def attempt(fn):
    try:
        fn()
    except Exception as e:  # noqa: BLE001
        return [type(e).__name__, str(e)]
    return None

'''


def run(body: str, directory: pathlib.Path, *, world: int = 1, timeout: float = 120.0) -> list:
    """Runs body on `world` ranks with DIR = directory; returns each rank's
    list of result() dicts. Fails the test if a rank exits non-zero or the
    ranks are not all done within timeout seconds (then every rank is killed)."""
    runner = directory.parent / f".{directory.name}-runner"
    runner.mkdir(exist_ok=True)
    script = runner / "snippet.py"
    script.write_text(_PRELUDE + textwrap.dedent(body) + "\ndist.destroy_process_group()\n")
    store = runner / f"store-{len(list(runner.iterdir()))}"
    env = dict(os.environ, OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo", PYTHONUNBUFFERED="1")
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(r), str(world), str(store), str(directory)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )
        for r in range(world)
    ]
    outputs = []
    try:
        for p in procs:
            outputs.append(p.communicate(timeout=timeout)[0])
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
        for p in procs:
            p.communicate()
        pytest.fail(f"the {world} rank(s) did not finish within {timeout} s (a hang?)")
    for r, (p, out) in enumerate(zip(procs, outputs)):
        assert p.returncode == 0, f"rank {r} exited {p.returncode}:\n{out[-4000:]}"
    return [[json.loads(line[len("RESULT "):]) for line in out.splitlines() if line.startswith("RESULT ")]
            for out in outputs]
