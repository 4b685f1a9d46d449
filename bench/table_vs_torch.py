#!/usr/bin/env python3
"""Side by side, in one run: building an (L, D) float32 sinusoidal table with
tokpos (exact, correctly rounded) and with PyTorch's vectorized float32
construction (the usual exp/arange/sin/cos code), at the same thread counts.

    python3 bench/table_vs_torch.py [--lib build/lib/libtokpos.so] [--L 8192] [--D 4096] [--reps 9]

Both are called from this one process: tokpos through ctypes on its C API,
torch directly. Each figure is the median of --reps runs after one warm-up;
both allocate a fresh output each run. Also prints each one's largest error
at a few far positions, against tokpos's own correctly rounded values (which
tests/precision_test.cc checks against quad precision).
"""
import argparse
import ctypes
import math
import os
import platform
import statistics
import subprocess
import time

import numpy as np
import torch


def cpu_line():
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        for line in out.splitlines():
            if line.startswith("Model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def torch_table(L, D, start=0, base=10000.0):
    pe = torch.zeros(L, D)
    position = torch.arange(start, start + L, dtype=torch.float32).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, D, 2, dtype=torch.float32) * (-math.log(base) / D))
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)[:, : D // 2]
    return pe


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default=os.path.join(here, "..", "build", "lib", "libtokpos.so"))
    ap.add_argument("--L", type=int, default=8192)
    ap.add_argument("--D", type=int, default=4096)
    ap.add_argument("--reps", type=int, default=9)
    args = ap.parse_args()

    lib = ctypes.CDLL(os.path.abspath(args.lib))
    lib.tokpos_sinusoidal_table_ex.restype = ctypes.c_int
    lib.tokpos_sinusoidal_table_ex.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int64, ctypes.c_int64,
                                              ctypes.c_int64, ctypes.c_int, ctypes.c_double, ctypes.c_double,
                                              ctypes.c_int64]
    lib.tokpos_set_num_threads.argtypes = [ctypes.c_int]
    lib.tokpos_last_error.restype = ctypes.c_char_p

    def tokpos_table(L, D, start=0):
        out = np.empty((L, D), dtype=np.float32)
        st = lib.tokpos_sinusoidal_table_ex(out.ctypes.data, 0, L, D, start, 0, 10000.0, 1.0, -1)
        if st != 0:
            raise RuntimeError(lib.tokpos_last_error().decode())
        return out

    def median_ms(fn):
        fn()  # warm-up
        times = []
        for _ in range(args.reps):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return statistics.median(times) * 1e3

    L, D = args.L, args.D
    print(f"sinusoidal table (L = {L}, D = {D}) float32, interleaved; median of {args.reps}")
    print(f"CPU: {cpu_line()}; torch {torch.__version__}; numpy {np.__version__}")
    print(f"{'threads':>7}  {'tokpos ms':>10}  {'torch ms':>10}  {'torch / tokpos':>14}")
    for threads in (1, 2):
        torch.set_num_threads(threads)
        lib.tokpos_set_num_threads(threads)
        t_ours = median_ms(lambda: tokpos_table(L, D))
        t_torch = median_ms(lambda: torch_table(L, D))
        print(f"{threads:>7}  {t_ours:>10.1f}  {t_torch:>10.1f}  {t_torch / t_ours:>13.2f}x")

    print("largest |value - exact| over a 64-row window, D = 512:")
    for start in (0, 1 << 20, (1 << 24) - 64):
        exact = tokpos_table(64, 512, start).astype(np.float64)
        ref = torch_table(64, 512, start).numpy().astype(np.float64)
        print(f"  positions {start:>9}..{start + 63:<9} torch float32 {np.abs(ref - exact).max():.3g}   "
              f"tokpos correctly rounded (<= 2^-25 = {2.0 ** -25:.3g})")


if __name__ == "__main__":
    main()
