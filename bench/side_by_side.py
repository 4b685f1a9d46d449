#!/usr/bin/env python3
"""The input stage side by side, in ONE run, at the same thread counts:

  tokpos        fused forward (tokpos_compose_forward) and deterministic backward (tokpos_compose_backward), via ctypes
  torch eager   wte(ids) + wpe(arange(T)) with nn.Embedding, and its backward (out.backward(g))
  compile       torch.compile (inductor) of that eager module: forward (no_grad) and forward+backward
  numpy         np.take(wte, ids, axis=0) + wpe[:T]   (forward only)
  copy          a parallel copy of the output's bytes (torch Tensor.copy_), the bandwidth line
  npcopy        the same copy with numpy (np.copyto, one thread); the best copy is the faster of the two

for GPT-2 small, a decode step, a Llama-2-7B-like shape and a hot-row case.
Each (implementation, shape, threads) runs in its own process, so its peak RSS
is its own. Prints medians and ratios, checks the speed targets
(docs/benchmarks.md), and writes bench/results.json.

    python3 bench/side_by_side.py [--lib build/lib/libtokpos.so] [--quick] [--rounds 3]
        [--shapes gpt2,llama2-7b] [--no-compile]
"""
import argparse
import ctypes
import json
import os
import resource
import statistics
import subprocess
import sys
import time

from machine import cpu_details, cpu_model

HERE = os.path.dirname(os.path.abspath(__file__))
SHAPES = {
    "gpt2": dict(V=50257, D=768, L=1024, B=8, T=1024, hot=False),
    "decode": dict(V=32000, D=4096, L=4096, B=1, T=1, hot=False),
    "llama2-7b": dict(V=32000, D=4096, L=4096, B=1, T=2048, hot=False),
    "hot-row": dict(V=50257, D=768, L=1024, B=8, T=1024, hot=True),
}
IMPLS = ["tokpos", "torch", "compile", "numpy", "copy", "npcopy"]


def rss_now_kb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


def median_ms(fn, reps):
    fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def worker(impl, shape_name, threads, lib_path, quick):
    import numpy as np
    s = SHAPES[shape_name]
    V, D, L, B, T = s["V"], s["D"], s["L"], s["B"], s["T"]
    N = B * T
    reps = 200 if N == 1 else (5 if quick else 15)
    rng = np.random.default_rng(0)
    ids = np.full((B, T), 42, dtype=np.int64) if s["hot"] else rng.integers(0, V, size=(B, T), dtype=np.int64)
    result = dict(impl=impl, shape=shape_name, threads=threads, fwd_ms=None, bwd_ms=None, fwdbwd_ms=None)
    if impl in ("torch", "copy", "compile"):
        import torch
        torch.set_num_threads(threads)
    if impl == "tokpos":
        lib = ctypes.CDLL(lib_path)
        lib.tokpos_set_num_threads(threads)
        wte = rng.standard_normal((V, D), dtype=np.float32)
        wpe = rng.standard_normal((L, D), dtype=np.float32)
        out = np.empty((B, T, D), dtype=np.float32)
        d_out = rng.standard_normal((B, T, D), dtype=np.float32)
        g_wte = np.zeros((V, D), dtype=np.float32)
        g_wpe = np.zeros((L, D), dtype=np.float32)
        p = lambda a: ctypes.c_void_p(a.ctypes.data)
        i64 = ctypes.c_int64
        base = rss_now_kb()
        fwd = lambda: lib.tokpos_compose_forward(p(out), p(ids), i64(B), i64(T), p(wte), i64(V), p(wpe), i64(L), i64(D))
        bwd = lambda: lib.tokpos_compose_backward(p(g_wte), p(g_wpe), p(d_out), p(ids), i64(B), i64(T), i64(V), i64(L),
                                                  i64(D))
        assert fwd() == 0 and bwd() == 0
        result["fwd_ms"] = median_ms(fwd, reps)
        result["bwd_ms"] = median_ms(bwd, max(3, reps // 2))
    elif impl == "torch":
        import torch
        wte = torch.nn.Embedding(V, D)
        wpe = torch.nn.Embedding(L, D)
        tids = torch.from_numpy(ids)
        pos = torch.arange(T)
        g = torch.randn(B, T, D)
        base = rss_now_kb()
        with torch.no_grad():
            result["fwd_ms"] = median_ms(lambda: wte(tids) + wpe(pos), reps)

        def bwd_once():
            wte.weight.grad = None
            wpe.weight.grad = None
            out = wte(tids) + wpe(pos)
            t0 = time.perf_counter()
            out.backward(g)
            return time.perf_counter() - t0
        bwd_once()
        result["bwd_ms"] = statistics.median(bwd_once() for _ in range(max(3, reps // 2))) * 1e3
    elif impl == "compile":
        import torch
        torch.manual_seed(0)
        wte = torch.nn.Embedding(V, D)
        wpe = torch.nn.Embedding(L, D)

        class Input(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.wte, self.wpe = wte, wpe

            def forward(self, x):
                return self.wte(x) + self.wpe(torch.arange(x.shape[1], device=x.device))

        compiled = torch.compile(Input())
        tids = torch.from_numpy(ids)
        g = torch.randn(B, T, D)
        with torch.no_grad():
            compiled(tids)  # compiles the inference graph
        compiled(tids).backward(g)  # and the training graph
        base = rss_now_kb()
        with torch.no_grad():
            result["fwd_ms"] = median_ms(lambda: compiled(tids), reps)

        def fwdbwd_once():
            wte.weight.grad = None
            wpe.weight.grad = None
            t0 = time.perf_counter()
            compiled(tids).backward(g)
            return time.perf_counter() - t0
        fwdbwd_once()
        result["fwdbwd_ms"] = statistics.median(fwdbwd_once() for _ in range(max(3, reps // 2))) * 1e3
    elif impl == "numpy":
        wte = rng.standard_normal((V, D), dtype=np.float32)
        wpe = rng.standard_normal((L, D), dtype=np.float32)
        base = rss_now_kb()
        result["fwd_ms"] = median_ms(lambda: np.take(wte, ids, axis=0) + wpe[:T], reps)
    elif impl == "npcopy":
        src = rng.standard_normal((B, T, D), dtype=np.float32)
        dst = np.empty((B, T, D), dtype=np.float32)
        base = rss_now_kb()
        result["fwd_ms"] = median_ms(lambda: np.copyto(dst, src), reps)
    else:  # copy
        import torch
        src = torch.randn(B, T, D)
        dst = torch.empty(B, T, D)
        base = rss_now_kb()
        result["fwd_ms"] = median_ms(lambda: dst.copy_(src), reps)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    result["peak_rss_mb"] = peak / 1024
    result["peak_above_setup_mb"] = max(0, peak - base) / 1024
    print(json.dumps(result))


def cpu_line():
    return f"{cpu_model()} ({cpu_details()}, {os.cpu_count()} logical CPUs)"


def load_line():
    try:
        return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "load average unknown"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default=os.path.join(HERE, "..", "build", "lib", "libtokpos.so"))
    ap.add_argument("--quick", action="store_true", help="fewer repetitions")
    ap.add_argument("--rounds", type=int, default=3, help="times each run is repeated (median taken)")
    ap.add_argument("--worker", nargs=3, metavar=("IMPL", "SHAPE", "THREADS"))
    ap.add_argument("--shapes", default=",".join(SHAPES), help="comma-separated subset of " + ",".join(SHAPES))
    ap.add_argument("--no-compile", action="store_true", help="leave torch.compile out")
    args = ap.parse_args()
    lib = os.path.abspath(args.lib)
    if args.worker:
        return worker(args.worker[0], args.worker[1], int(args.worker[2]), lib, args.quick)

    import numpy
    import torch
    # Rounds: every (shape, threads, impl) once per round, in the same order,
    # so a slow minute on a shared machine hits all implementations alike;
    # each figure below is the median over rounds of the per-process medians.
    shapes = [x for x in args.shapes.split(",") if x]
    for x in shapes:
        if x not in SHAPES:
            raise SystemExit(f"unknown shape {x!r}; one of {', '.join(SHAPES)}")
    impls = [i for i in IMPLS if not (args.no_compile and i == "compile")]
    print(f"CPU: {cpu_line()}; {load_line()} at the start", file=sys.stderr)
    runs = []
    total = args.rounds * len(shapes) * 2 * len(impls)
    print(f"side by side: {total} runs ({args.rounds} rounds), each in its own process (progress below)",
          file=sys.stderr)
    for rnd in range(args.rounds):
        for shape in shapes:
            for threads in (1, 2):
                for impl in impls:
                    cmd = [sys.executable, __file__, "--lib", lib, "--worker", impl, shape, str(threads)]
                    if args.quick:
                        cmd.append("--quick")
                    out = subprocess.run(cmd, capture_output=True, text=True)
                    if out.returncode != 0:
                        raise SystemExit(f"{impl} {shape} {threads}: {out.stderr}")
                    runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
                    print(f"  [{len(runs)}/{total}] round {rnd + 1} {shape} threads={threads} {impl} done",
                          file=sys.stderr)
    rows = []
    for shape in shapes:
        for threads in (1, 2):
            for impl in impls:
                mine = [r for r in runs if r["shape"] == shape and r["threads"] == threads and r["impl"] == impl]
                row = dict(mine[0])
                for key in ("fwd_ms", "bwd_ms", "fwdbwd_ms"):
                    row[key] = statistics.median(r[key] for r in mine) if mine[0][key] is not None else None
                    row[key + "_rounds"] = [r[key] for r in mine]
                for key in ("peak_rss_mb", "peak_above_setup_mb"):
                    row[key] = max(r[key] for r in mine)
                rows.append(row)

    def get(shape, threads, impl):
        return next((r for r in rows if r["shape"] == shape and r["threads"] == threads and r["impl"] == impl), None)

    print(f"\nCPU: {cpu_line()}; torch {torch.__version__}; numpy {numpy.__version__}; {load_line()} at the end")
    print("bwd ms: backward alone (tokpos: into existing gradients; torch: out.backward(g)); "
          "fwd+bwd ms: torch.compile's forward and backward; ratios: other / tokpos, above 1 = tokpos faster")
    print(f"{'shape':<10} {'thr':>3}  {'impl':<7} {'fwd ms':>9} {'bwd ms':>9} {'fwd+bwd ms':>10} {'fwd/tokpos':>10} "
          f"{'bwd/tokpos':>10} {'peak RSS MB':>11} {'above setup':>11}")
    for shape in shapes:
        for threads in (1, 2):
            t = get(shape, threads, "tokpos")
            for impl in impls:
                r = get(shape, threads, impl)
                fr = f"{r['fwd_ms'] / t['fwd_ms']:.2f}x" if r["fwd_ms"] else "-"
                b = r["bwd_ms"] if r["bwd_ms"] is not None else r.get("fwdbwd_ms")
                br = f"{b / t['bwd_ms']:.2f}x" if b else "-"
                bwd = f"{r['bwd_ms']:.3f}" if r["bwd_ms"] is not None else "-"
                fb = f"{r['fwdbwd_ms']:.3f}" if r.get("fwdbwd_ms") is not None else "-"
                print(f"{shape:<10} {threads:>3}  {impl:<7} {r['fwd_ms']:>9.3f} {bwd:>9} {fb:>10} {fr:>10} {br:>10} "
                      f"{r['peak_rss_mb']:>11.0f} {r['peak_above_setup_mb']:>11.0f}")

    floors = {}
    for shape, s in ((k, SHAPES[k]) for k in shapes):
        N = s["B"] * s["T"]
        if N >= 1024:
            distinct = 1 if s["hot"] else s["V"] * (1 - (1 - 1 / s["V"]) ** N)  # expected distinct random ids
            floors[shape] = ((distinct + s["T"] + N) / (2 * N), distinct)
    print("\nspeed targets, per shape with B*T >= 1024 and each thread count:")
    checks = []
    for shape, s in ((k, SHAPES[k]) for k in shapes):
        for threads in (1, 2):
            t, cm = get(shape, threads, "tokpos"), get(shape, threads, "compile")
            best = min(get(shape, threads, c)["fwd_ms"] for c in ("copy", "npcopy"))
            if s["B"] * s["T"] >= 1024:
                checks.append((f"{shape} t={threads} forward <= 1.15x the best copy (floor {floors[shape][0]:.2f}x)",
                               t["fwd_ms"] / best, 1.15, "<="))
                if cm is not None:
                    checks.append((f"{shape} t={threads} forward >= 1.5x faster than torch.compile's",
                                   cm["fwd_ms"] / t["fwd_ms"], 1.5, ">="))
                    checks.append((f"{shape} t={threads} backward >= 10x faster than torch.compile's fwd+bwd",
                                   cm["fwdbwd_ms"] / t["bwd_ms"], 10.0, ">="))
    for name, value, bound, op in checks:
        ok = value >= bound if op == ">=" else value <= bound
        print(f"  {'met    ' if ok else 'NOT met'}  {name}: {value:.2f} (target {op} {bound})")
    print("\nthe forward's own memory floor, as a multiple of the copy's traffic (copy: read + write the output;\n"
          "forward: read each distinct token row and position row once, write the output; both streamed):")
    for shape, (floor, distinct) in floors.items():
        s = SHAPES[shape]
        print(f"  {shape:<10} {floor:.2f}x  (token rows {distinct:.0f}, position rows {s['T']}, "
              f"output rows {s['B'] * s['T']})")
    for threads in (1, 2) if "decode" in shapes else ():
        d = get("decode", threads, "tokpos")
        print(f"  decode (B = T = 1, D = 4096) forward, {threads} thread(s): {d['fwd_ms'] * 1000:.2f} us per call "
              f"through ctypes (the call overhead of Python is included)")
    if args.shapes != ",".join(SHAPES) or args.no_compile:
        return  # a partial run leaves results.json as it is
    with open(os.path.join(HERE, "results.json"), "w") as f:
        json.dump(dict(cpu=cpu_line(), torch=torch.__version__, numpy=numpy.__version__, rows=rows,
                       targets=[dict(name=n, value=v, bound=b, op=o, met=(v >= b if o == ">=" else v <= b))
                                for n, v, b, o in checks]), f, indent=1)
    print(f"\nwrote {os.path.relpath(os.path.join(HERE, 'results.json'))}")


if __name__ == "__main__":
    main()
