#!/usr/bin/env python3
"""The input stage side by side, in ONE run, at the same thread counts:

  tokpos        fused forward (tokpos_compose_forward) and deterministic backward (tokpos_compose_backward), timed in C
                (bench/peers.cc, libtokpos_peers.so: no Python call overhead in the figures)
  loop          the plain llm.c-style loop (bench/peers.cc, built -O3 -march=native -fopenmp): forward OpenMP over B*T,
                out[b,t,:] = wte[ids[b,t],:] + wpe[t,:]; backward serial and channel-sliced (each thread a slice
                of D, every element summed in (b, t) order); its bits are checked against tokpos's in the run
  isel          torch eager index_select(wte, 0, ids, out=out) + out.add_(wpe[:T]); backward index_add_ into the
                token gradient and a sum over B into the position gradient
  ebag          F.embedding_bag over the concatenated table [wte; wpe] with bags {token, V + position}, mode sum;
                backward through autograd
  gather        the non-temporal gather of the same token rows alone (no position add), timed in C: the line to aim at
  ggml          get_rows + add, where an installed package provides ggml (otherwise the run says why not)
  torch eager   wte(ids) + wpe(arange(T)) with nn.Embedding, and its backward (out.backward(g))
  compile       torch.compile (inductor) of that eager module: forward (no_grad) and forward+backward
  numpy         np.take(wte, ids, axis=0) + wpe[:T]   (forward only)
  copy          a parallel copy of the output's bytes (torch Tensor.copy_), the bandwidth line
  npcopy        the same copy with numpy (np.copyto, one thread); the best copy is the faster of the two

for GPT-2 small, a decode step (16 sequences, one token each, at Llama-2-7B's width), a Llama-2-7B-like shape
and a hot-row case.
Each (implementation, shape) runs in its own process, at each thread count in turn on the same inputs, so
its peak RSS is its own. Each figure is a median over as many calls as fit in --budget seconds, then over
--rounds rounds. Prints medians and ratios, checks the speed targets (docs/benchmarks.md), and writes
bench/results.json. `make bench` runs one round (about 4 minutes on 2 cores); `make bench FULL=1` three
rounds with four times the budget.

    python3 bench/side_by_side.py [--lib build/lib/libtokpos.so] [--peers build/lib/libtokpos_peers.so] [--quick]
        [--rounds 1] [--budget 0.25] [--shapes gpt2,llama2-7b] [--no-compile] [--impls tokpos,loop,...]
"""
import argparse
import ctypes
import importlib.util
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
    "decode": dict(V=32000, D=4096, L=4096, B=16, T=1, hot=False),
    "llama2-7b": dict(V=32000, D=4096, L=4096, B=1, T=2048, hot=False),
    "hot-row": dict(V=50257, D=768, L=1024, B=8, T=1024, hot=True),
}
IMPLS = ["tokpos", "loop", "isel", "ebag", "gather", "torch", "compile", "numpy", "copy", "npcopy"]
PEERS = ["loop", "isel", "ebag"]  # the peers tokpos must beat (ratios peer / tokpos); gather is the line to aim at
TIE = 0.97  # a peer within 3% of tokpos counts as a tie on a noisy machine

# bench/peers.cc's kinds (peer_call, peer_median_seconds)
K_TOKPOS_FWD, K_TOKPOS_BWD, K_LOOP_FWD, K_LOOP_BWD_SERIAL, K_LOOP_BWD_SLICES, K_GATHER = range(6)


class PeerArgs(ctypes.Structure):
    _fields_ = [("out", ctypes.c_void_p), ("ids", ctypes.c_void_p)] + \
        [(n, ctypes.c_int64) for n in ("B", "T", "V", "L", "D")] + \
        [(n, ctypes.c_void_p) for n in ("wte", "wpe", "d_wte", "d_wpe", "d_out")] + [("threads", ctypes.c_int)]


def load_peers(path):
    if not os.path.exists(path):
        raise SystemExit(f"{path} is missing; build it with: cmake --build build --target tokpos_peers")
    lib = ctypes.CDLL(path)
    lib.peer_call.argtypes = [ctypes.c_int, ctypes.POINTER(PeerArgs)]
    lib.peer_call.restype = ctypes.c_int
    lib.peer_median_seconds.argtypes = [ctypes.c_int, ctypes.POINTER(PeerArgs), ctypes.c_int]
    lib.peer_median_seconds.restype = ctypes.c_double
    return lib


def peer_args(threads, s, out=None, ids=None, wte=None, wpe=None, d_wte=None, d_wpe=None, d_out=None):
    ptr = lambda a: None if a is None else a.ctypes.data
    return PeerArgs(ptr(out), ptr(ids), s["B"], s["T"], s["V"], s["L"], s["D"], ptr(wte), ptr(wpe), ptr(d_wte),
                    ptr(d_wpe), ptr(d_out), threads)


def call(peers, kind, args):
    if peers.peer_call(kind, ctypes.byref(args)) != 0:
        raise SystemExit(f"peer kind {kind} failed")


def c_median_ms(peers, kind, args, most):
    """As median_ms, timed in C (peer_median_seconds: one untimed call, then the median)."""
    one = peers.peer_median_seconds(kind, ctypes.byref(args), 1)
    t = one if one < 0 else peers.peer_median_seconds(kind, ctypes.byref(args), reps_for(one, most))
    if t < 0:
        raise SystemExit(f"peer kind {kind} failed")
    return t * 1e3


def ggml_status():
    """Why ggml's get_rows + add is or is not in the run: an installed
    package that ships ggml (llama-cpp-python, ggml-python), looked up
    offline; nothing is built or downloaded here."""
    found = [m for m in ("llama_cpp", "ggml") if importlib.util.find_spec(m) is not None]
    if found:
        return (f"ggml: the package {found[0]!r} is installed, but this script has no driver for it yet, so ggml is "
                "not in the table")
    return ("ggml: not available: no package providing ggml (llama-cpp-python, ggml-python) is installed in this "
            "environment; the Python registry offers both only as source distributions (no wheel for this "
            "platform), the build does not compile them, and nothing is downloaded at run time")


def rss_now_kb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


# Each figure is the median of repeated calls: as many as fit in BUDGET_S
# seconds (after one warm-up call, which sizes the count), at least 3 and at
# most the shape's cap. A dense 0.6 GB gradient thus gets a few calls and a
# decode step hundreds, in about the same time. --full lengthens it.
BUDGET_S = 0.25


def reps_for(seconds_per_call, most):
    return max(3, min(most, int(BUDGET_S / max(seconds_per_call, 1e-9))))


def median_ms(fn, most):
    """Median of fn's calls in ms, fn timed alone (warm-up call first)."""
    t0 = time.perf_counter()
    fn()
    times = []
    for _ in range(reps_for(time.perf_counter() - t0, most)):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def median_timed_ms(once, most):
    """Median in ms of once(), which times its own part and returns seconds (warm-up call first)."""
    first = once()
    return statistics.median(once() for _ in range(reps_for(first, most))) * 1e3


_MADE = {}


def made(key, make):
    """One copy per process of a large input, kept for every thread count the worker runs."""
    if key not in _MADE:
        _MADE[key] = make()
    return _MADE[key]


def worker(impl, shape_name, threads, lib_path, quick, peers_path):
    import numpy as np
    s = SHAPES[shape_name]
    V, D, L, B, T = s["V"], s["D"], s["L"], s["B"], s["T"]
    N = B * T
    reps = 200 if N <= 64 else (5 if quick else 15)
    c_reps = 2000 if N <= 64 else reps  # timed in C: cheap at decode size, where the spread is widest
    rng = np.random.default_rng(0)
    ids = np.full((B, T), 42, dtype=np.int64) if s["hot"] else rng.integers(0, V, size=(B, T), dtype=np.int64)
    result = dict(impl=impl, shape=shape_name, threads=threads, fwd_ms=None, bwd_ms=None, fwdbwd_ms=None)
    if impl in ("torch", "copy", "compile", "isel", "ebag"):
        import torch
        torch.set_num_threads(threads)
    if impl in ("tokpos", "loop", "gather"):
        # The libtokpos.so asked for, loaded before peers.cc's own link to it.
        ctypes.CDLL(lib_path, mode=ctypes.RTLD_GLOBAL).tokpos_set_num_threads(threads)
        peers = load_peers(peers_path)
        wte = made(("np", V, D), lambda: rng.standard_normal((V, D), dtype=np.float32))
        wpe = made(("np", L, D), lambda: rng.standard_normal((L, D), dtype=np.float32))
        out = np.empty((B, T, D), dtype=np.float32)
        d_out = rng.standard_normal((B, T, D), dtype=np.float32)
        g_wte = np.zeros((V, D), dtype=np.float32)
        g_wpe = np.zeros((L, D), dtype=np.float32)
        args = peer_args(threads, s, out, ids, wte, wpe, g_wte, g_wpe, d_out)
    if impl == "tokpos":
        base = rss_now_kb()
        result["fwd_ms"] = c_median_ms(peers, K_TOKPOS_FWD, args, c_reps)
        result["bwd_ms"] = c_median_ms(peers, K_TOKPOS_BWD, args, max(3, c_reps // 2))
    elif impl == "gather":
        base = rss_now_kb()
        result["fwd_ms"] = c_median_ms(peers, K_GATHER, args, c_reps)
    elif impl == "loop":
        # Bits first: tokpos and the loop from the same inputs, into zeroed
        # gradients (both backwards accumulate), compared as bit patterns.
        ref_out = np.empty_like(out)
        ref_wte, ref_wpe = np.zeros_like(g_wte), np.zeros_like(g_wpe)
        ref = peer_args(threads, s, ref_out, ids, wte, wpe, ref_wte, ref_wpe, d_out)
        call(peers, K_TOKPOS_FWD, ref)
        call(peers, K_TOKPOS_BWD, ref)
        same = lambda a, b: bool(np.array_equal(a.view(np.uint32), b.view(np.uint32)))
        bits = {}
        call(peers, K_LOOP_FWD, args)
        bits["forward"] = same(out, ref_out)
        for name, kind in (("backward serial", K_LOOP_BWD_SERIAL), ("backward channel slices", K_LOOP_BWD_SLICES)):
            g_wte.fill(0)
            g_wpe.fill(0)
            call(peers, kind, args)
            bits[name] = same(g_wte, ref_wte) and same(g_wpe, ref_wpe)
        result["bitwise"] = bits
        del ref_out, ref_wte, ref_wpe
        base = rss_now_kb()
        result["fwd_ms"] = c_median_ms(peers, K_LOOP_FWD, args, c_reps)
        bwd_reps = max(3, c_reps // 2)
        result["bwd_serial_ms"] = c_median_ms(peers, K_LOOP_BWD_SERIAL, args, bwd_reps)
        result["bwd_slices_ms"] = c_median_ms(peers, K_LOOP_BWD_SLICES, args, bwd_reps)
        # The loop's backward is the faster of its two variants at this thread count.
        result["bwd_ms"] = min(result["bwd_serial_ms"], result["bwd_slices_ms"])
    elif impl == "isel":
        import torch
        wte = made(("torch", V, D), lambda: torch.randn(V, D))
        wpe = made(("torch", L, D), lambda: torch.randn(L, D))
        flat = torch.from_numpy(ids).reshape(-1)
        out = torch.empty(N, D)
        out3 = out.view(B, T, D)
        pos = wpe[:T]
        g = torch.randn(N, D)
        g_wte, g_wpe, g_sum = torch.zeros(V, D), torch.zeros(L, D), torch.empty(T, D)

        def fwd():
            torch.index_select(wte, 0, flat, out=out)
            out3.add_(pos)

        def bwd():
            g_wte.index_add_(0, flat, g)
            torch.sum(g.view(B, T, D), 0, out=g_sum)
            g_wpe[:T].add_(g_sum)
        base = rss_now_kb()
        result["fwd_ms"] = median_ms(fwd, reps)
        result["bwd_ms"] = median_ms(bwd, max(3, reps // 2))
    elif impl == "ebag":
        import torch
        import torch.nn.functional as F
        table = made(("cat", V + L, D), lambda: torch.cat([torch.randn(V, D), torch.randn(L, D)]).requires_grad_())
        flat = torch.from_numpy(ids).reshape(-1)
        bags = torch.stack([flat, V + torch.arange(T).repeat(B)], 1)  # (N, 2): {token, V + position}
        g = torch.randn(N, D)
        base = rss_now_kb()
        with torch.no_grad():
            result["fwd_ms"] = median_ms(lambda: F.embedding_bag(bags, table, mode="sum"), reps)

        def bwd_once():
            table.grad = None
            out = F.embedding_bag(bags, table, mode="sum")
            t0 = time.perf_counter()
            out.backward(g)
            return time.perf_counter() - t0
        result["bwd_ms"] = median_timed_ms(bwd_once, max(3, reps // 2))
    elif impl == "torch":
        import torch
        wte = made(("emb", V, D), lambda: torch.nn.Embedding(V, D))
        wpe = made(("emb", L, D), lambda: torch.nn.Embedding(L, D))
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
        result["bwd_ms"] = median_timed_ms(bwd_once, max(3, reps // 2))
    elif impl == "compile":
        import torch
        torch.manual_seed(0)
        wte = made(("emb", V, D), lambda: torch.nn.Embedding(V, D))
        wpe = made(("emb", L, D), lambda: torch.nn.Embedding(L, D))
        torch._dynamo.reset()  # compiled anew for this thread count (inductor fixes it in the code it writes)

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
        result["fwdbwd_ms"] = median_timed_ms(fwdbwd_once, max(3, reps // 2))
    elif impl == "numpy":
        wte = made(("np", V, D), lambda: rng.standard_normal((V, D), dtype=np.float32))
        wpe = made(("np", L, D), lambda: rng.standard_normal((L, D), dtype=np.float32))
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
    global BUDGET_S
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default=os.path.join(HERE, "..", "build", "lib", "libtokpos.so"))
    ap.add_argument("--peers", default=os.path.join(HERE, "..", "build", "lib", "libtokpos_peers.so"),
                    help="bench/peers.cc's library (cmake --build build --target tokpos_peers)")
    ap.add_argument("--quick", action="store_true", help="fewer repetitions")
    ap.add_argument("--rounds", type=int, default=1, help="times each run is repeated (median taken)")
    ap.add_argument("--budget", type=float, default=BUDGET_S,
                    help="seconds of timed calls per figure (at least 3 calls each)")
    ap.add_argument("--worker", nargs=3, metavar=("IMPL", "SHAPE", "THREADS"))
    ap.add_argument("--shapes", default=",".join(SHAPES), help="comma-separated subset of " + ",".join(SHAPES))
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    ap.add_argument("--impls", default=",".join(IMPLS), help="comma-separated subset of " + ",".join(IMPLS) +
                    " (tokpos always runs: the ratios are to it)")
    ap.add_argument("--no-compile", action="store_true", help="leave torch.compile out")
    args = ap.parse_args()
    lib = os.path.abspath(args.lib)
    peers = os.path.abspath(args.peers)
    if not args.budget > 0:
        raise SystemExit(f"--budget must be > 0 seconds, not {args.budget}")
    if args.rounds < 1:
        raise SystemExit(f"--rounds must be >= 1, not {args.rounds}")
    BUDGET_S = args.budget
    if args.worker:
        for threads in args.worker[2].split(","):
            worker(args.worker[0], args.worker[1], int(threads), lib, args.quick, peers)
        return

    import numpy
    import torch
    # Rounds: every (shape, threads, impl) once per round, in the same order,
    # so a slow minute on a shared machine hits all implementations alike;
    # each figure below is the median over rounds of the per-process medians.
    shapes = [x for x in args.shapes.split(",") if x]
    for x in shapes:
        if x not in SHAPES:
            raise SystemExit(f"unknown shape {x!r}; one of {', '.join(SHAPES)}")
    thread_counts = [int(x) for x in args.threads.split(",") if x]
    asked = {x for x in args.impls.split(",") if x} | {"tokpos"}
    for x in asked:
        if x not in IMPLS:
            raise SystemExit(f"unknown implementation {x!r}; one of {', '.join(IMPLS)}")
    impls = [i for i in IMPLS if i in asked and not (args.no_compile and i == "compile")]
    if any(i in impls for i in ("tokpos", "loop", "gather")):
        load_peers(peers)  # says how to build it when missing, before any run
    print(f"CPU: {cpu_line()}; {load_line()} at the start", file=sys.stderr)
    runs = []
    total = args.rounds * len(shapes) * len(impls)
    threads_arg = ",".join(str(t) for t in thread_counts)
    print(f"side by side: {total} runs ({args.rounds} rounds, {args.budget:g} s per figure), each in its own "
          f"process at threads {threads_arg} (progress below)", file=sys.stderr)
    t_start = time.monotonic()
    done = 0
    for rnd in range(args.rounds):
        for shape in shapes:
            for impl in impls:
                cmd = [sys.executable, __file__, "--lib", lib, "--peers", peers, "--budget", repr(args.budget),
                       "--worker", impl, shape, threads_arg]
                if args.quick:
                    cmd.append("--quick")
                t0 = time.monotonic()
                out = subprocess.run(cmd, capture_output=True, text=True)
                if out.returncode != 0:
                    raise SystemExit(f"{impl} {shape} threads {threads_arg}: {out.stderr}")
                lines = [x for x in out.stdout.splitlines() if x.startswith("{")]
                if len(lines) != len(thread_counts):
                    raise SystemExit(f"{impl} {shape}: {len(lines)} results for {len(thread_counts)} thread counts")
                runs.extend(json.loads(x) for x in lines)
                done += 1
                print(f"  [{done}/{total}] round {rnd + 1} {shape} {impl} done ({time.monotonic() - t0:.0f} s)",
                      file=sys.stderr)
    rows = []
    for shape in shapes:
        for threads in thread_counts:
            for impl in impls:
                mine = [r for r in runs if r["shape"] == shape and r["threads"] == threads and r["impl"] == impl]
                row = dict(mine[0])
                for key in ("fwd_ms", "bwd_ms", "fwdbwd_ms", "bwd_serial_ms", "bwd_slices_ms"):
                    if key not in row:
                        continue
                    row[key] = statistics.median(r[key] for r in mine) if mine[0][key] is not None else None
                    row[key + "_rounds"] = [r[key] for r in mine]
                if "bitwise" in row:
                    row["bitwise"] = {k: all(r["bitwise"][k] for r in mine) for k in row["bitwise"]}
                for key in ("peak_rss_mb", "peak_above_setup_mb"):
                    row[key] = max(r[key] for r in mine)
                rows.append(row)

    def get(shape, threads, impl):
        return next((r for r in rows if r["shape"] == shape and r["threads"] == threads and r["impl"] == impl), None)

    print(f"\nCPU: {cpu_line()}; torch {torch.__version__}; numpy {numpy.__version__}; {load_line()} at the end")
    print(f"side by side took {time.monotonic() - t_start:.0f} s")
    print("bwd ms: backward alone (tokpos: into existing gradients; torch: out.backward(g)); "
          "fwd+bwd ms: torch.compile's forward and backward; ratios: other / tokpos, above 1 = tokpos faster")
    print(f"{'shape':<10} {'thr':>3}  {'impl':<7} {'fwd ms':>9} {'bwd ms':>9} {'fwd+bwd ms':>10} {'fwd/tokpos':>10} "
          f"{'bwd/tokpos':>10} {'peak RSS MB':>11} {'above setup':>11}")
    for shape in shapes:
        for threads in thread_counts:
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

    # The peers beside tokpos, one line per shape and thread count.
    peers_in = [p for p in PEERS if p in impls]
    print(f"\n{ggml_status()}")
    if peers_in or "gather" in impls:
        print("\npeers, medians (ms; us at decode), ratio = peer / tokpos: above 1 = tokpos faster; "
              f"'<' marks a loss of tokpos (ratio below {TIE}: more than 3% slower than the peer)")
        print("  loop bwd: the faster of serial and channel slices (which one in brackets); gather: the "
              "non-temporal gather of the token rows alone, no position add (a line, not a peer)")
        for what in ("fwd", "bwd"):
            head = f"  {what:<3} {'shape':<10} {'thr':>3} {'tokpos':>9}"
            for p in peers_in:
                head += f" {p:>9} {'ratio':>7}"
            if what == "fwd" and "gather" in impls:
                head += f" {'gather':>9}"
            print(head)
            for shape in shapes:
                unit = 1000.0 if SHAPES[shape]["B"] * SHAPES[shape]["T"] <= 64 else 1.0
                for threads in thread_counts:
                    t = get(shape, threads, "tokpos")[what + "_ms"]
                    line = f"  {what:<3} {shape:<10} {threads:>3} {t * unit:>9.3f}"
                    for p in peers_in:
                        v = get(shape, threads, p)[what + "_ms"]
                        mark = "<" if v / t < TIE else " "
                        line += f" {v * unit:>9.3f} {v / t:>6.2f}{mark}"
                    if what == "fwd" and "gather" in impls:
                        line += f" {get(shape, threads, 'gather')['fwd_ms'] * unit:>9.3f}"
                    if what == "bwd" and "loop" in peers_in:
                        lp = get(shape, threads, "loop")
                        line += "  (loop: serial)" if lp["bwd_serial_ms"] <= lp["bwd_slices_ms"] else \
                            "  (loop: slices)"
                    print(line)
    if "loop" in impls:
        print("\nplain loop against tokpos, bit for bit (every round):")
        for shape in shapes:
            for threads in thread_counts:
                bits = get(shape, threads, "loop")["bitwise"]
                print(f"  {shape:<10} t={threads}: " + ", ".join(
                    f"{k} {'bitwise equal' if v else 'DIFFERENT'}" for k, v in bits.items()))

    floors = {}
    for shape, s in ((k, SHAPES[k]) for k in shapes):
        N = s["B"] * s["T"]
        if N >= 1024:
            distinct = 1 if s["hot"] else s["V"] * (1 - (1 - 1 / s["V"]) ** N)  # expected distinct random ids
            floors[shape] = ((distinct + s["T"] + N) / (2 * N), distinct)
    print("\nspeed targets, per shape with B*T >= 1024 and each thread count (peers: every shape):")
    checks = []
    for shape, s in ((k, SHAPES[k]) for k in shapes):
        for threads in thread_counts:
            t, cm = get(shape, threads, "tokpos"), get(shape, threads, "compile")
            copies = [get(shape, threads, c)["fwd_ms"] for c in ("copy", "npcopy") if c in impls]
            if s["B"] * s["T"] >= 1024:
                if copies:
                    checks.append((f"{shape} t={threads} forward <= 1.15x the best copy "
                                   f"(floor {floors[shape][0]:.2f}x)", t["fwd_ms"] / min(copies), 1.15, "<="))
                if cm is not None:
                    checks.append((f"{shape} t={threads} forward >= 1.5x faster than torch.compile's",
                                   cm["fwd_ms"] / t["fwd_ms"], 1.5, ">="))
                    checks.append((f"{shape} t={threads} backward >= 10x faster than torch.compile's fwd+bwd",
                                   cm["fwdbwd_ms"] / t["bwd_ms"], 10.0, ">="))
            for p in peers_in:
                for what in ("fwd", "bwd"):
                    checks.append((f"{shape} t={threads} {what} at least as fast as {p} (within 3%)",
                                   get(shape, threads, p)[what + "_ms"] / t[what + "_ms"], TIE, ">="))
            lp, g = get(shape, threads, "loop"), get(shape, threads, "gather")
            if lp is not None and g is not None and shape in ("gpt2", "decode") and lp["fwd_ms"] > 1.2 * g["fwd_ms"]:
                checks.append((f"{shape} t={threads} forward >= 1.2x faster than the loop (the loop is "
                               f"{lp['fwd_ms'] / g['fwd_ms']:.2f}x the gather line)",
                               lp["fwd_ms"] / t["fwd_ms"], 1.2, ">="))
    for name, value, bound, op in checks:
        ok = value >= bound if op == ">=" else value <= bound
        print(f"  {'met    ' if ok else 'NOT met'}  {name}: {value:.2f} (target {op} {bound})")
    print("\nthe forward's own memory floor, as a multiple of the copy's traffic (copy: read + write the output;\n"
          "forward: read each distinct token row and position row once, write the output; both streamed):")
    for shape, (floor, distinct) in floors.items():
        s = SHAPES[shape]
        print(f"  {shape:<10} {floor:.2f}x  (token rows {distinct:.0f}, position rows {s['T']}, "
              f"output rows {s['B'] * s['T']})")
    for threads in thread_counts if "decode" in shapes else ():
        d = get("decode", threads, "tokpos")
        print(f"  decode (B = 16, T = 1, D = 4096) forward, {threads} thread(s): {d['fwd_ms'] * 1000:.2f} us per "
              f"call, timed in C (no Python call overhead)")
    if (args.shapes != ",".join(SHAPES) or args.no_compile or thread_counts != [1, 2]
            or len(impls) != len(IMPLS)):
        return  # a partial run leaves results.json as it is
    with open(os.path.join(HERE, "results.json"), "w") as f:
        json.dump(dict(cpu=cpu_line(), torch=torch.__version__, numpy=numpy.__version__, ggml=ggml_status(),
                       rows=rows, targets=[dict(name=n, value=v, bound=b, op=o,
                                                met=(v >= b if o == ">=" else v <= b))
                                           for n, v, b, o in checks]), f, indent=1)
    print(f"\nwrote {os.path.relpath(os.path.join(HERE, 'results.json'))}")


if __name__ == "__main__":
    main()
