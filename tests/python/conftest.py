"""Shared helpers for the tokpos Python tests: the repository root, the C++
command-line tool, and float64 references for the sinusoidal layouts."""

from __future__ import annotations

import math
import os
import pathlib

import numpy as np
import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]


def cli_path() -> pathlib.Path | None:
    """The C++ tool: $TOKPOS_CLI, else <repo>/build/bin/tokpos; None if neither exists."""
    env = os.environ.get("TOKPOS_CLI")
    candidates = [pathlib.Path(env)] if env else []
    candidates.append(REPO / "build" / "bin" / "tokpos")
    for c in candidates:
        if c.is_file() and os.access(c, os.X_OK):
            return c
    return None


@pytest.fixture
def cli():
    path = cli_path()
    if path is None:
        pytest.skip("the C++ tool is not built: set TOKPOS_CLI or run `make build` (build/bin/tokpos)")
    return path


@pytest.fixture
def threads():
    """Restores the kernel thread count after a test that changes it."""
    import tokpos

    before = tokpos.get_num_threads()
    yield
    tokpos.set_num_threads(before)


# float64 references of every layout (docs/layouts.md). Positions are rows
# start .. start + L - 1; each returns an (L, D) float64 array.


def _positions(L: int, start: int) -> np.ndarray:
    return np.arange(start, start + L, dtype=np.float64)[:, None]


def ref_interleaved(L: int, D: int, base: float = 10000.0, start: int = 0) -> np.ndarray:
    p = _positions(L, start)
    i = np.arange(D)
    angle = p / np.power(base, 2.0 * (i // 2) / D)
    return np.where(i % 2 == 0, np.sin(angle), np.cos(angle))


def ref_halves(L: int, D: int, base: float = 10000.0, start: int = 0) -> np.ndarray:
    p = _positions(L, start)
    n_sin, n_cos = (D + 1) // 2, D // 2
    w_sin = np.power(base, -2.0 * np.arange(n_sin) / D)
    w_cos = np.power(base, -2.0 * np.arange(n_cos) / D)
    return np.concatenate([np.sin(p * w_sin), np.cos(p * w_cos)], axis=1)


def _pad_column(t: np.ndarray, D: int) -> np.ndarray:
    return np.concatenate([t, np.zeros((t.shape[0], D - t.shape[1]))], axis=1)


def ref_fairseq(L: int, D: int, base: float = 10000.0, start: int = 0, padding_idx: int | None = None):
    p = _positions(L, start)
    h = D // 2
    k = np.arange(h)
    w = np.exp(-k * math.log(base) / (h - 1)) if h > 1 else np.ones(h)
    t = _pad_column(np.concatenate([np.sin(p * w), np.cos(p * w)], axis=1), D)
    if padding_idx is not None and start <= padding_idx < start + L:
        t[padding_idx - start] = 0.0
    return t


def ref_t2t(L: int, D: int, base: float = 10000.0, start: int = 0, min_timescale: float = 1.0):
    p = _positions(L, start)
    n = D // 2
    k = np.arange(n)
    w = min_timescale * np.exp(-k * math.log(base / min_timescale) / max(n - 1, 1))
    return _pad_column(np.concatenate([np.sin(p * w), np.cos(p * w)], axis=1), D)


def ref_ggml(L: int, D: int, base: float = 10000.0, start: int = 0):
    p = _positions(L, start)
    h = D // 2
    w = np.exp(-math.log(base) * np.arange(h) / h)
    return _pad_column(np.concatenate([np.cos(p * w), np.sin(p * w)], axis=1), D)


REFERENCES = {
    "interleaved": ref_interleaved,
    "halves": ref_halves,
    "fairseq": ref_fairseq,
    "t2t": ref_t2t,
    "ggml": ref_ggml,
}


def ambiguous(ref64: np.ndarray, dtype, positions: np.ndarray) -> np.ndarray:
    """Entries whose float64 reference lies so close to a rounding midpoint
    of dtype that the float64 formula's own error could flip the rounding.
    The bound covers the angle's error (a few float64 ulps of p, angles
    being at most p) and sin's own (a few ulps of the value)."""
    ref64 = np.asarray(ref64, dtype=np.float64)
    r = ref64.astype(dtype).astype(np.float64)
    ulp = np.spacing(np.abs(r).astype(dtype)).astype(np.float64)
    frac = np.abs(ref64 - r) / ulp  # in [0, 0.5]
    err = 8 * np.finfo(np.float64).eps * (np.abs(positions) + np.abs(ref64))
    return np.abs(frac - 0.5) * ulp < err


def tokpos_torch():
    """tokpos.torch, or a skip of the calling test module with tokpos.torch's
    own ImportError as the reason (torch missing, or older than tokpos.torch
    needs), so a suite run with such a torch skips these files, saying why
    (-rs), instead of failing at collection. Any other ImportError (tokpos
    itself not built) is raised."""
    try:
        import tokpos.torch as tt
    except ImportError as e:
        if (e.name or "").partition(".")[0] != "torch":
            raise
        pytest.skip(f"tokpos.torch cannot be imported: {e}", allow_module_level=True)
    return tt
