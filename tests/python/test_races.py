"""tokpos ops called while another Python thread changes their index inputs
(the ops release the GIL, so this is an ordinary multi-threaded program):
compose with position_ids, compose_backward with d_pos_table, and
packed_position_ids. A racing caller may get garbage values, but never an
access outside the arrays it passed: the tables and the gradient sit inside
larger arrays whose margins hold a sentinel (or zeros that must stay zero),
so a row read or written past them shows, and every output must be a value
the passed tables can make. Each case runs in a child process, bounded in
time, so a crash fails the test instead of ending the pytest run."""

import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import tokpos

D, L, V = 16, 64, 256
B, T = 32, 512
MARGIN = 512  # rows of sentinel (or zeros) on each side of a table
SECONDS = 1.0
SENTINEL = 1.0e30


# Rows just outside a table of `rows` rows, all inside the margins.
def _bad_rows(rows):
    return [rows, rows + 1, rows + 7, rows + 100, rows + MARGIN - 1, -1, -2, -9, -100, -MARGIN]


def _mutate(a, slots, bad, stop):
    """Until stop: each slot of a to each bad value in turn and back."""
    good = [int(a[s]) for s in slots]
    k = 0
    while not stop.is_set():
        for s, g in zip(slots, good):
            a[s] = bad[k % len(bad)]
            a[s] = g
            k += 1
    for s, g in zip(slots, good):
        a[s] = g


def _race(a, slots, bad, call):
    """call() over and over while another thread changes a; returns how
    many calls ran without an error (a check that sees a bad value refuses
    the call, which is fine)."""
    stop = threading.Event()
    other = threading.Thread(target=_mutate, args=(a, slots, bad, stop))
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    other.start()
    ran = 0
    try:
        deadline = time.monotonic() + SECONDS
        for _ in range(100000):
            if time.monotonic() > deadline:
                break
            try:
                call()
                ran += 1
            except (IndexError, ValueError):
                pass
    finally:
        stop.set()
        other.join()
        sys.setswitchinterval(interval)
    return ran


def _guarded(rows, fill):
    """A (rows, D) float32 view inside a larger array whose margins hold fill."""
    big = np.full((MARGIN + rows + MARGIN, D), fill, dtype=np.float32)
    return big, big[MARGIN:MARGIN + rows]


def _tables():
    tok = np.repeat(np.arange(1, V + 1, dtype=np.float32)[:, None], D, axis=1)
    big, pos = _guarded(L, SENTINEL)
    pos[:] = 1024.0 * np.arange(1, L + 1, dtype=np.float32)[:, None]
    return tok, big, pos


def _inputs():
    n = np.arange(B * T, dtype=np.int64)
    ids = ((n * 37 + 11) % V).reshape(B, T)
    p = ((n * 5 + n // T) % L).reshape(B, T)
    return ids, p


def _slots(n):
    return [n - 1, n // 2]


def case_forward():
    tok, _, pos = _tables()
    ids, p = _inputs()
    flat = p.reshape(-1)

    def call():
        out = tokpos.compose(ids, tok, pos, position_ids=p)
        r = out - 1024.0 * np.floor(out / 1024.0)  # the token row's value
        q = np.floor(out / 1024.0)  # the position row's
        ok = (out == np.floor(out)) & (r >= 1) & (r <= V) & (q >= 1) & (q <= L)
        assert ok.all(), f"output {out[~ok][:4]} is no sum of rows of the tables passed"

    return _race(flat, _slots(flat.size), _bad_rows(L), call)


def case_backward():
    ids, p = _inputs()
    flat = p.reshape(-1)
    d_out = np.ones((B, T, D), dtype=np.float32)
    big, g = _guarded(L, 0.0)

    def call():
        big[:] = 0.0
        tokpos.compose_backward(d_out, ids, d_pos_table=g, position_ids=p)
        assert not big[:MARGIN].any() and not big[MARGIN + L:].any(), "a gradient row outside d_pos_table changed"
        assert np.isfinite(g).all() and (g >= 0).all() and (g <= B * T).all()

    return _race(flat, _slots(flat.size), _bad_rows(L), call)


def case_packed():
    docs, length = 64, 64
    n = docs * length
    cu = np.arange(0, n + 1, length, dtype=np.int64)

    def call():
        out = tokpos.packed_position_ids(cu, start=3)
        assert out.shape == (n,) and ((out >= 3) & (out < 3 + n)).all(), f"positions {out.min()} .. {out.max()}"

    return _race(cu, [docs - 1, docs // 2, 1], [n + 1, n + 100000, 3 * n, -1, -100000, 7], call)


CASES = {"forward": case_forward, "backward": case_backward, "packed": case_packed}


@pytest.mark.parametrize("case", sorted(CASES))
def test_ops_survive_changing_index_inputs(case):
    child = subprocess.run([sys.executable, __file__, case], capture_output=True, text=True, timeout=120)
    assert child.returncode == 0, f"{case}: exit {child.returncode}\n{child.stdout}\n{child.stderr}"
    assert child.stdout.startswith("ran "), child.stdout
    assert int(child.stdout.split()[1]) > 0, f"{case}: every call was refused"


if __name__ == "__main__":
    tokpos.set_num_threads(1)  # a core for the other thread
    print(f"ran {CASES[sys.argv[1]]()}")
