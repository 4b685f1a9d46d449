"""Vocab-parallel embedding timings over torch.distributed (gloo, CPU).

    python bench/vocab_parallel.py [--worlds 1 2 4] [--B 4 --T 256 --D 768 --V 50257] [--reps 10]

launches `python -m torch.distributed.run --standalone --nproc_per_node=N`
for each N, and prints one markdown table: per world size the median of

  forward      VocabParallelComposer(ids) with autograd recording (all_reduce)
  fwd+bwd      forward, then backward of a fixed (B, T, D) upstream gradient
  SP fwd+bwd   the same with sequence_parallel=True (reduce_scatter / all_gather)
  all_reduce   dist.all_reduce of one (B, T, D) float32 tensor alone
  reduce_scat  dist.reduce_scatter_tensor of the same tensor over T alone

Each repetition starts after a barrier; its time is the slowest rank's (an
all_reduce MAX of the ranks' times), and the table gives the median over the
repetitions. Every rank runs --threads kernel threads (default 1, so the
world sizes compare like with like); N ranks above the core count
oversubscribe the machine (say so when quoting the numbers). The first line
of the table is the one-process tokpos.torch.EmbeddingComposer over the
whole table, without torch.distributed, timed the same way.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from machine import cpu_model, fmt_time  # noqa: E402


def _timed(fn, reps, warmup, dist):
    import torch

    times = []
    for i in range(warmup + reps):
        dist.barrier()
        t0 = time.perf_counter()
        fn()
        dt = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
        dist.all_reduce(dt, op=dist.ReduceOp.MAX)
        if i >= warmup:
            times.append(float(dt))
    return statistics.median(times)


def worker(args) -> None:
    import torch
    import torch.distributed as dist

    import tokpos
    from tokpos.torch import LearnedPositionalEmbedding, VocabParallelComposer, VocabParallelEmbedding

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    threads = args.threads
    tokpos.set_num_threads(threads)
    torch.set_num_threads(threads)
    B, T, D, V = args.B, args.T, args.D, args.V
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(V, (B, T), generator=g)
    grad = torch.randn((B, T, D), generator=g)
    vpe = VocabParallelEmbedding(V, D, seed=0, pad_vocab_to_multiple_of=128)
    pos = LearnedPositionalEmbedding(max(T, 1024), D, seed=1)
    comp = VocabParallelComposer(vpe, pos)
    comp_sp = VocabParallelComposer(vpe, pos, sequence_parallel=True) if T % world == 0 else None

    def forward():
        comp(ids)

    def fwd_bwd(c=comp, g_local=grad):
        vpe.weight.grad = None
        pos.weight.grad = None
        c(ids).backward(g_local)

    chunk = T // world
    g_sp = grad[:, rank * chunk : (rank + 1) * chunk].contiguous()
    buf = torch.randn((B, T, D), generator=g)
    tbd = torch.randn((T, B, D), generator=g)
    rs_out = torch.empty((chunk, B, D))

    res = {
        "forward": _timed(forward, args.reps, args.warmup, dist),
        "fwd+bwd": _timed(fwd_bwd, args.reps, args.warmup, dist),
        "SP fwd+bwd": _timed(lambda: fwd_bwd(comp_sp, g_sp), args.reps, args.warmup, dist) if comp_sp else None,
        "all_reduce": _timed(lambda: dist.all_reduce(buf), args.reps, args.warmup, dist),
        "reduce_scat": _timed(lambda: dist.reduce_scatter_tensor(rs_out, tbd), args.reps, args.warmup, dist)
        if T % world == 0
        else None,
    }
    if rank == 0:
        shard_mb = vpe.weight.numel() * 4 / 1e6
        cells = " | ".join(fmt_time(res[k]) for k in COLUMNS)
        print(f"ROW | {world} | {vpe.shard_rows} ({shard_mb:.0f} MB) | {threads} | {cells} |", flush=True)
    dist.destroy_process_group()


def baseline(args) -> str:
    """The table's first row: the one-process composer over the whole table."""
    import torch

    import tokpos
    from tokpos.torch import EmbeddingComposer, LearnedPositionalEmbedding, TokenEmbedding

    tokpos.set_num_threads(args.threads)
    torch.set_num_threads(args.threads)
    B, T, D, V = args.B, args.T, args.D, args.V
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(V, (B, T), generator=g)
    grad = torch.randn((B, T, D), generator=g)
    tok = TokenEmbedding(V, D, seed=0)
    pos = LearnedPositionalEmbedding(max(T, 1024), D, seed=1)
    comp = EmbeddingComposer(tok, pos)

    def fwd_bwd():
        tok.weight.grad = None
        pos.weight.grad = None
        comp(ids).backward(grad)

    def median(fn):
        times = []
        for i in range(args.warmup + args.reps):
            t0 = time.perf_counter()
            fn()
            if i >= args.warmup:
                times.append(time.perf_counter() - t0)
        return statistics.median(times)

    f, fb = median(lambda: comp(ids)), median(fwd_bwd)
    mb = V * D * 4 / 1e6
    return f"| one process (EmbeddingComposer) | {V} ({mb:.0f} MB) | {args.threads} | {fmt_time(f)} | {fmt_time(fb)} | - | - | - |"


COLUMNS = ("forward", "fwd+bwd", "SP fwd+bwd", "all_reduce", "reduce_scat")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--worlds", type=int, nargs="+", default=[1, 2, 4])
    p.add_argument("--B", type=int, default=4)
    p.add_argument("--T", type=int, default=256)
    p.add_argument("--D", type=int, default=768)
    p.add_argument("--V", type=int, default=50257)
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--threads", type=int, default=1, help="kernel threads per rank")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        worker(args)
        return 0
    import torch

    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"CPU: {cpu_model()} ({os.cpu_count()} cores visible, load average {load}); torch {torch.__version__}, gloo")
    print(
        f"B={args.B} T={args.T} D={args.D} V={args.V} (padded to a multiple of 128); "
        f"output {args.B * args.T * args.D * 4 / 1e6:.2f} MB float32; median of {args.reps} (slowest rank each)"
    )
    print()
    print("| ranks | shard rows | threads/rank | " + " | ".join(COLUMNS) + " |")
    print("|---|---|---|" + "---|" * len(COLUMNS))
    env = dict(os.environ, OMP_NUM_THREADS="1")
    passthrough = ["--B", str(args.B), "--T", str(args.T), "--D", str(args.D), "--V", str(args.V)]
    passthrough += ["--reps", str(args.reps), "--warmup", str(args.warmup), "--threads", str(args.threads)]
    passthrough += ["--worker"]
    print(baseline(args))
    status = 0
    for n in args.worlds:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={n}"]
        run = subprocess.run(cmd + [os.path.abspath(__file__), *passthrough], env=env, capture_output=True, text=True)
        rows = [line[4:] for line in run.stdout.splitlines() if line.startswith("ROW | ")]
        if run.returncode != 0 or not rows:
            print(f"| {n} | failed (exit {run.returncode}) |")
            print((run.stdout + run.stderr)[-3000:], file=sys.stderr)
            status = 1
            continue
        print(rows[0])
    return status


if __name__ == "__main__":
    sys.exit(main())
