#!/usr/bin/env python3
"""tokpos.torch against PyTorch's own input stage, in ONE process and side by side:

  tokpos    tokpos.torch.EmbeddingComposer(TokenEmbedding, LearnedPositionalEmbedding)
  eager     the lesson's modules: nn.Embedding(V, D)(ids) + nn.Embedding(L, D)(arange(T)), broadcast
  compile   torch.compile (inductor, default mode) of that eager module
  copy      (forward rows only) dst.copy_(src) of the output's bytes into a
            buffer that exists: the bandwidth line; tokpos/copy is printed

for two modes,

  fwd       forward under torch.no_grad() (inference)
  fwd+bwd   forward, then out.backward(g) with a fixed random g: dense gradients
            into the token and the position weights (grads set to None between
            iterations, outside the timed region)

and three shapes (GPT-2 small, a Llama-2-7B-sized table, a decode step) at each
thread count: torch.set_num_threads(n) and tokpos.set_num_threads(n) before
each group. The implementations run round-robin inside every repeat, so they
see the same machine state; the table gives medians and the speedups
eager/tokpos and compile/tokpos (above 1: tokpos is faster). Once per shape the
three forwards must be bitwise equal (same weights) and the gradients close,
or the script exits with status 1. The speed targets are printed as met / NOT
met, never asserted.

    python3 bench/python_side_by_side.py [--quick] [--shapes gpt2,llama2-7b,decode]
        [--threads 1,2] [--repeats N] [--no-compile] [--json PATH]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

from machine import cpu_details, cpu_model, fmt_ratio, fmt_time  # bench/machine.py

SHAPES = {
    "gpt2": dict(V=50257, D=768, L=1024, B=8, T=1024, label="GPT-2 small"),
    "llama2-7b": dict(V=32000, D=4096, L=4096, B=1, T=2048, label="Llama-2-7B table sizes"),
    "decode": dict(V=50257, D=768, L=1024, B=1, T=1, label="decode step (GPT-2 table)"),
}
IMPLS = ("tokpos", "eager", "compile", "copy")
MODES = ("fwd", "fwd+bwd")
# Timed repeats per row: (every row but the decode forward, the decode forward).
DEFAULT_REPEATS = (15, 400)
QUICK_REPEATS = (3, 20)
TARGET_FWD_VS_COMPILE = 1.5
TARGET_BWD_VS_EAGER = 10.0
TARGET_DECODE_VS_EAGER = 1.0



def parse_list(text: str, allowed=None, kind=str):
    items = [kind(x.strip()) for x in text.split(",") if x.strip()]
    if not items:
        raise argparse.ArgumentTypeError("empty list")
    if allowed is not None:
        for x in items:
            if x not in allowed:
                raise argparse.ArgumentTypeError(f"{x!r} is not one of {', '.join(allowed)}")
    return items


def make_eager_module(torch, V, D, L):
    """The lesson's input stage in plain PyTorch."""
    nn = torch.nn

    class EagerInput(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(V, D)
            self.wpe = nn.Embedding(L, D)

        def forward(self, ids):
            pos = torch.arange(ids.shape[1], device=ids.device)
            return self.wte(ids) + self.wpe(pos)

    return EagerInput()


def make_tokpos_module(torch, tpt, eager):
    """tokpos.torch's composer over the eager module's weights: the token
    table shares its memory (from_pretrained), the position table is a copy."""
    V, D = eager.wte.weight.shape
    L = eager.wpe.weight.shape[0]
    tok = tpt.TokenEmbedding.from_pretrained(eager.wte.weight.detach(), freeze=False)
    tok.weight.requires_grad_(True)
    pos = tpt.LearnedPositionalEmbedding(L, D)
    with torch.no_grad():
        pos.weight.copy_(eager.wpe.weight)
    pos.weight.requires_grad_(True)
    assert tuple(tok.weight.shape) == (V, D)
    return tpt.EmbeddingComposer(tok, pos), (tok.weight, pos.weight)


def clear_grads(*modules):
    for m in modules:
        m.zero_grad(set_to_none=True)


def time_round_robin(calls, repeats, warmup):
    """calls: name -> (prepare, run). prepare runs outside the timed region.
    Every repeat runs each implementation once, starting from a rotating
    position, so none is always first. Returns name -> median seconds."""
    names = list(calls)
    for _ in range(warmup):
        for name in names:
            prepare, run = calls[name]
            prepare()
            run()
    samples = {name: [] for name in names}
    clock = time.perf_counter
    for r in range(repeats):
        for k in range(len(names)):
            name = names[(r + k) % len(names)]
            prepare, run = calls[name]
            prepare()
            t0 = clock()
            result = run()
            t1 = clock()
            del result
            samples[name].append(t1 - t0)
    return {name: statistics.median(s) for name, s in samples.items()}


def fwd_bwd_step(module, ids, g):
    def run():
        out = module(ids)
        out.backward(g)

    return run


def check_agreement(torch, shape_name, tokpos_mod, tokpos_params, eager, compiled, ids, g):
    """The three forwards bitwise equal; the gradients close. Exits on failure."""
    failures = []
    with torch.no_grad():
        ref = eager(ids)
        got = tokpos_mod(ids)
        if got.dtype != torch.float32 or tuple(got.shape) != tuple(ref.shape):
            failures.append(f"tokpos forward is {got.dtype} {tuple(got.shape)}, eager {ref.dtype} {tuple(ref.shape)}")
        elif not torch.equal(got, ref):
            failures.append(f"tokpos forward != eager forward (max |diff| {(got - ref).abs().max().item():.3g})")
        if compiled is not None:
            comp = compiled(ids)
            if not torch.equal(comp, ref):
                failures.append(f"compile forward != eager forward (max |diff| {(comp - ref).abs().max().item():.3g})")

    def grads(module, params):
        clear_grads(module)
        module(ids).backward(g)
        out = [p.grad for p in params]
        for p, name in zip(out, ("token", "position")):
            if p is None:
                failures.append(f"{type(module).__name__}: no {name} gradient")
        return out

    ref_g = grads(eager, (eager.wte.weight, eager.wpe.weight))
    tok_g = grads(tokpos_mod, tokpos_params)
    pairs = [("tokpos", tok_g)]
    if compiled is not None:
        pairs.append(("compile", grads(compiled, (eager.wte.weight, eager.wpe.weight))))
    worst = 0.0
    for name, gs in pairs:
        for got, ref, which in zip(gs, ref_g, ("token", "position")):
            if got is None or ref is None:
                continue
            if got.layout != torch.strided:
                got = got.to_dense()
            if tuple(got.shape) != tuple(ref.shape):
                failures.append(f"{name} {which} gradient shape {tuple(got.shape)} != {tuple(ref.shape)}")
                continue
            diff = (got - ref).abs().max().item()
            worst = max(worst, diff)
            if not torch.allclose(got, ref, rtol=1e-5, atol=1e-4):
                failures.append(f"{name} {which} gradient differs from eager's (max |diff| {diff:.3g})")
    clear_grads(eager, tokpos_mod)
    impls = "tokpos, eager" + (", compile" if compiled is not None else "")
    if failures:
        print(f"  {shape_name}: OUTPUTS DISAGREE ({impls}):", flush=True)
        for f in failures:
            print(f"    {f}", flush=True)
        sys.exit(1)
    print(f"  {shape_name}: outputs agree ({impls}): forward bitwise equal, "
          f"gradients max |diff| {worst:.3g}", flush=True)


def run_shape(torch, tokpos, tpt, shape_name, args, rows):
    s = SHAPES[shape_name]
    V, D, L, B, T = s["V"], s["D"], s["L"], s["B"], s["T"]
    big_reps, small_reps = QUICK_REPEATS if args.quick else DEFAULT_REPEATS
    if args.repeats is not None:
        big_reps = small_reps = args.repeats
    # A decode forward takes microseconds: it gets the larger repeat count.
    # Its fwd+bwd still writes a dense (V, D) gradient, so it gets the smaller.
    fwd_reps = small_reps if B * T == 1 else big_reps
    bwd_reps = big_reps
    fwd_warm = 1 if args.quick else (20 if B * T == 1 else 3)
    bwd_warm = 1 if args.quick else 3
    print(f"\n{shape_name}: {s['label']}: V={V} D={D} L={L} B={B} T={T}; "
          f"repeats {fwd_reps} (fwd), {bwd_reps} (fwd+bwd)", flush=True)

    torch.manual_seed(0)
    eager = make_eager_module(torch, V, D, L)
    tokpos_mod, tokpos_params = make_tokpos_module(torch, tpt, eager)
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(0, V, (B, T), dtype=torch.int64, generator=gen)
    g = torch.randn(B, T, D, dtype=torch.float32, generator=gen)

    checked = False
    for n in args.threads:
        torch.set_num_threads(n)
        tokpos.set_num_threads(n)
        compiled = None
        if not args.no_compile:
            # Inductor's CPU kernels bake in the thread count at compile time,
            # so each (shape, threads) group compiles afresh.
            torch._dynamo.reset()
            compiled = torch.compile(eager)
            try:
                t0 = time.perf_counter()
                with torch.no_grad():
                    compiled(ids)
                t1 = time.perf_counter()
                clear_grads(eager)
                compiled(ids).backward(g)
                t2 = time.perf_counter()
                clear_grads(eager)
                print(f"  threads={n}: torch.compile took {t1 - t0:.1f} s (fwd), {t2 - t1:.1f} s (fwd+bwd)",
                      flush=True)
            except Exception as e:  # a missing C++ compiler and the like
                print(f"  threads={n}: torch.compile FAILED ({type(e).__name__}: {e}); compile column left out",
                      flush=True)
                compiled = None
        if not checked:
            check_agreement(torch, shape_name, tokpos_mod, tokpos_params, eager, compiled, ids, g)
            checked = True

        nothing = lambda: None  # noqa: E731
        with torch.no_grad():
            calls = {"tokpos": (nothing, lambda: tokpos_mod(ids)), "eager": (nothing, lambda: eager(ids))}
            if compiled is not None:
                calls["compile"] = (nothing, lambda: compiled(ids))
            copy_src = torch.randn(B, T, D, generator=gen)
            copy_dst = torch.empty(B, T, D)
            calls["copy"] = (nothing, lambda: copy_dst.copy_(copy_src))
            fwd = time_round_robin(calls, fwd_reps, fwd_warm)
        rows.append(make_row(shape_name, "fwd", n, fwd))
        print_row(rows[-1])

        zero_eager = lambda: clear_grads(eager)  # noqa: E731
        calls = {
            "tokpos": (lambda: clear_grads(tokpos_mod), fwd_bwd_step(tokpos_mod, ids, g)),
            "eager": (zero_eager, fwd_bwd_step(eager, ids, g)),
        }
        if compiled is not None:
            calls["compile"] = (zero_eager, fwd_bwd_step(compiled, ids, g))
        bwd = time_round_robin(calls, bwd_reps, bwd_warm)
        clear_grads(eager, tokpos_mod)
        rows.append(make_row(shape_name, "fwd+bwd", n, bwd))
        print_row(rows[-1])
    del compiled, eager, tokpos_mod
    if not args.no_compile:
        torch._dynamo.reset()


def make_row(shape, mode, threads, medians):
    t = medians.get("tokpos")
    row = dict(shape=shape, mode=mode, threads=threads)
    for impl in IMPLS:
        row[f"{impl}_s"] = medians.get(impl)
    row["eager_over_tokpos"] = medians["eager"] / t if t else None
    row["compile_over_tokpos"] = medians["compile"] / t if t and medians.get("compile") else None
    row["tokpos_over_copy"] = t / medians["copy"] if t and medians.get("copy") else None
    return row


HEADER = (f"{'shape':<10} {'mode':<8} {'thr':>3} {'tokpos':>11} {'eager':>11} {'compile':>11} {'copy':>11} "
          f"{'eager/tokpos':>13} {'compile/tokpos':>15} {'tokpos/copy':>12}")


def row_line(r):
    return (f"{r['shape']:<10} {r['mode']:<8} {r['threads']:>3} {fmt_time(r['tokpos_s']):>11} "
            f"{fmt_time(r['eager_s']):>11} {fmt_time(r['compile_s']):>11} {fmt_time(r['copy_s']):>11} "
            f"{fmt_ratio(r['eager_over_tokpos']):>13} {fmt_ratio(r['compile_over_tokpos']):>15} "
            f"{fmt_ratio(r['tokpos_over_copy']):>12}")


def print_row(r):
    print("  " + row_line(r), flush=True)


def targets(rows):
    """(description, row, value, bound, met) for each target and each row it covers."""
    out = []
    for r in rows:
        where = f"{r['shape']}, {r['threads']} thread{'s' if r['threads'] != 1 else ''}"
        if r["mode"] == "fwd" and r["shape"] != "decode":
            out.append((f"forward >= {TARGET_FWD_VS_COMPILE}x torch.compile's ({where})",
                        r["compile_over_tokpos"], TARGET_FWD_VS_COMPILE))
        if r["mode"] == "fwd+bwd" and r["shape"] != "decode":
            out.append((f"forward+backward >= {TARGET_BWD_VS_EAGER}x torch eager's ({where})",
                        r["eager_over_tokpos"], TARGET_BWD_VS_EAGER))
        if r["mode"] == "fwd" and r["shape"] == "decode":
            out.append((f"decode step no slower than torch eager's ({where})",
                        r["eager_over_tokpos"], TARGET_DECODE_VS_EAGER))
    return [dict(target=d, value=v, bound=b, met=None if v is None else v >= b) for d, v, b in out]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a short smoke run: few repeats and warm-ups")
    ap.add_argument("--shapes", type=lambda t: parse_list(t, SHAPES), default=list(SHAPES),
                    help=f"comma-separated subset of {','.join(SHAPES)} (default: all)")
    ap.add_argument("--threads", type=lambda t: parse_list(t, kind=int), default=[1, 2],
                    help="comma-separated thread counts (default: 1,2)")
    ap.add_argument("--repeats", type=int, default=None,
                    help=f"timed repeats for every row (default: {DEFAULT_REPEATS[0]}, decode forward "
                         f"{DEFAULT_REPEATS[1]}; --quick: {QUICK_REPEATS[0]}, decode forward {QUICK_REPEATS[1]})")
    ap.add_argument("--no-compile", action="store_true", help="leave torch.compile out")
    ap.add_argument("--json", metavar="PATH", help="also write the results to PATH as JSON")
    args = ap.parse_args(argv)
    if args.repeats is not None and args.repeats < 1:
        ap.error("--repeats must be >= 1")
    if any(n < 1 for n in args.threads):
        ap.error("--threads must be >= 1")

    import torch

    import tokpos
    import tokpos.torch as tpt

    print("tokpos.torch vs torch eager vs torch.compile: the input stage (token + learned position embedding)")
    print(f"  cpu:     {cpu_model()} ({cpu_details()}, {os.cpu_count()} logical CPUs)")
    print(f"  load:    {' '.join(f'{x:.2f}' for x in os.getloadavg())} (1, 5, 15 min) at the start")
    print(f"  python:  {platform.python_version()}, torch {torch.__version__}, tokpos {tokpos.__version__}")
    print(f"  threads: {','.join(map(str, args.threads))} (torch.set_num_threads and tokpos.set_num_threads)")
    print("  compile: " + ("left out (--no-compile)" if args.no_compile else
                          "torch.compile(eager module), inductor, default mode; compiled per shape and thread count"))
    print("  times are medians over round-robin repeats; a ratio other/tokpos above 1 means tokpos is faster")
    if "llama2-7b" in args.shapes:
        print("  llama2-7b: Llama-2 uses rotary positions, not a learned table; the shape keeps the learned-position")
        print("             composer (L=4096) so all three implementations do the same work")
    sys.stdout.flush()

    rows = []
    for shape_name in args.shapes:
        run_shape(torch, tokpos, tpt, shape_name, args, rows)

    print("\nresults (median per call):")
    print("  " + HEADER)
    for r in rows:
        print("  " + row_line(r))

    print("\ntargets:")
    tg = targets(rows)
    if not tg:
        print("  (no row covers a target)")
    for t in tg:
        if t["value"] is None:
            print(f"  not measured  {t['target']}")
        else:
            print(f"  {'met' if t['met'] else 'NOT met':<13} {t['target']}: {t['value']:.2f}x")
    sys.stdout.flush()

    if args.json:
        doc = dict(
            cpu=cpu_model(), cpus=os.cpu_count(), python=platform.python_version(), torch=torch.__version__,
            tokpos=tokpos.__version__, threads=args.threads, quick=args.quick, compile=not args.no_compile,
            shapes={k: {x: SHAPES[k][x] for x in "VDLBT"} for k in args.shapes}, rows=rows, targets=tg,
        )
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
