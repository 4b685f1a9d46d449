#!/usr/bin/env python3
"""tokpos.apply_rope against transformers' apply_rotary_pos_emb, in ONE process and side by side:

  tokpos      tokpos.apply_rope(x, positions, inv_freq): x (B, T, H, Dh), a new output
  tokpos out= the same into a preallocated output (out=buffer)
  eager       transformers' Llama apply_rotary_pos_emb (written out below: rotate_half,
              q * cos + rotate_half(q) * sin) on q = x.transpose(1, 2), the (B, H, T, Dh)
              view a Llama attention layer hands it
  compile     torch.compile (inductor, default mode) of that eager function
  copy        buf.copy_(x): the same bytes read and written once, the floor

cos and sin for eager and compile are precomputed from inv_freq as transformers'
LlamaRotaryEmbedding gives them (float32 angles, cos/sin cast to x's dtype) OUTSIDE
the timed region, as a model computes them once per forward and shares them across
layers; tokpos computes its (exactly reduced) angles inside every call.

Shapes: Llama-2-7B's q for one 4096-token sequence (B 1, T 4096, H 32, Dh 128) and a
batch (B 8, T 1024, H 32, Dh 128), in float32 and bfloat16, at each thread count
(torch.set_num_threads(n) and tokpos.set_num_threads(n) before each group). The
implementations run round-robin inside every repeat, so they see the same machine
state; the table gives medians and the ratios eager/tokpos, compile/tokpos (above 1:
tokpos is faster) and (tokpos out=)/copy. Once per shape and dtype the outputs are
compared (at the first thread count): float32 tokpos must lie within 1e-6 (relative to max |out|) of a reference
with float64 angles, or the script exits with status 1; the differences from
transformers' float32-angle cos/sin are printed. The speed targets are printed as
met / NOT met, never asserted.

    python3 bench/rope_side_by_side.py [--quick] [--threads 1,2] [--repeats N]
        [--no-compile] [--json PATH]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

from machine import cpu_model, fmt_ratio, fmt_time  # bench/machine.py

SHAPES = {
    "llama2-7b": dict(B=1, T=4096, H=32, D=128, label="Llama-2-7B q, one 4096-token sequence"),
    "batch": dict(B=8, T=1024, H=32, D=128, label="Llama-2-7B q, batch of 8 x 1024"),
}
QUICK_SHAPES = {
    "small": dict(B=2, T=64, H=4, D=128, label="quick: B 2, T 64, H 4, Dh 128"),
}
DTYPES = ("float32", "bfloat16")
IMPLS = ("tokpos", "tokpos_out", "eager", "compile", "copy")
LABELS = {"tokpos": "tokpos", "tokpos_out": "tokpos out=", "eager": "eager", "compile": "compile", "copy": "copy"}
DEFAULT_REPEATS = 11
QUICK_REPEATS = 3
TARGET_VS_EAGER = 3.0
TARGET_VS_COMPILE = 1.2
TARGET_VS_COPY = 1.3
AGREE_REL = 1e-6


def rotate_half(x):
    """transformers' rotate_half (models/llama/modeling_llama.py)."""
    import torch

    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, cos, sin, unsqueeze_dim=1):
    """transformers' Llama apply_rotary_pos_emb, for q alone (k is the same work)."""
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    return (q * cos) + (rotate_half(q) * sin)


def hf_cos_sin(torch, inv_freq, positions, dtype):
    """LlamaRotaryEmbedding.forward: float32 angles position * inv_freq,
    emb = cat(freqs, freqs), cos/sin cast to x's dtype (attention_scaling 1)."""
    inv = inv_freq[None, :, None].float().expand(positions.shape[0], -1, 1)
    freqs = (inv @ positions[:, None, :].float()).transpose(1, 2)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def exact_cos_sin(torch, inv_freq, positions):
    """float64 angles and cos/sin, rounded to float32: the reference."""
    freqs = positions.double()[:, :, None] * inv_freq.double()[None, None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().float(), emb.sin().float()


def time_round_robin(calls, repeats, warmup):
    """calls: name -> run. Every repeat runs each implementation once,
    starting from a rotating position. Returns name -> median seconds."""
    names = list(calls)
    for _ in range(warmup):
        for name in names:
            calls[name]()
    samples = {name: [] for name in names}
    clock = time.perf_counter
    for r in range(repeats):
        for k in range(len(names)):
            name = names[(r + k) % len(names)]
            t0 = clock()
            result = calls[name]()
            t1 = clock()
            del result
            samples[name].append(t1 - t0)
    return {name: statistics.median(s) for name, s in samples.items()}


def check_agreement(torch, tokpos, label, x, positions, inv_freq, cos, sin, compiled):
    """float32: tokpos within AGREE_REL of the float64-angle reference (exit 1
    otherwise). Prints the max |diff| from transformers' own cos/sin too."""
    got = tokpos.apply_rope(x, positions, inv_freq).float()
    q = x.transpose(1, 2)
    hf = apply_rotary_pos_emb(q, cos, sin).transpose(1, 2).float()
    scale = hf.abs().max().item()
    line = f"  {label}: max |tokpos - transformers| {(got - hf).abs().max().item():.3g}"
    if compiled is not None:
        comp = compiled(q, cos, sin).transpose(1, 2).float()
        line += f", max |compile - eager| {(comp - hf).abs().max().item():.3g}"
    line += f" (max |out| {scale:.3g})"
    if x.dtype == torch.float32:
        ec, es = exact_cos_sin(torch, inv_freq, positions)
        ref = apply_rotary_pos_emb(q.double(), ec.double(), es.double()).transpose(1, 2)
        err = (got.double() - ref).abs().max().item() / max(ref.abs().max().item(), 1e-30)
        line += f"; tokpos vs float64-angle reference {err:.3g} relative (limit {AGREE_REL:g})"
        print(line, flush=True)
        if not err <= AGREE_REL:
            print(f"  {label}: OUTPUTS DISAGREE: tokpos is {err:.3g} relative from the reference", flush=True)
            sys.exit(1)
        print(f"  {label}: outputs agree", flush=True)
    else:
        print(line, flush=True)


def run_group(torch, tokpos, shape_name, shape, dtype_name, n, repeats, use_compile, compiled_fn, inv_freq, check):
    B, T, H, D = shape["B"], shape["T"], shape["H"], shape["D"]
    dtype = getattr(torch, dtype_name)
    gen = torch.Generator().manual_seed(1234)
    x = torch.randn(B, T, H, D, generator=gen).to(dtype)
    positions = torch.arange(T, dtype=torch.int64).expand(B, T).contiguous()
    cos, sin = hf_cos_sin(torch, inv_freq, positions, dtype)
    q = x.transpose(1, 2)  # (B, H, T, D), a view, as in a Llama attention layer
    out_buf = torch.empty_like(x)
    copy_buf = torch.empty_like(x)
    calls = {
        "tokpos": lambda: tokpos.apply_rope(x, positions, inv_freq),
        "tokpos_out": lambda: tokpos.apply_rope(x, positions, inv_freq, out=out_buf),
        "eager": lambda: apply_rotary_pos_emb(q, cos, sin),
        "copy": lambda: copy_buf.copy_(x),
    }
    if use_compile and compiled_fn is not None:
        calls["compile"] = lambda: compiled_fn(q, cos, sin)
    label = f"{shape_name} {dtype_name} threads={n}"
    if use_compile and compiled_fn is not None:
        t0 = time.perf_counter()
        try:
            with torch.no_grad():
                compiled_fn(q, cos, sin)
            print(f"  {label}: torch.compile first call {time.perf_counter() - t0:.1f} s", flush=True)
        except Exception as e:  # noqa: BLE001 - the column is left out, the rest still runs
            print(f"  {label}: torch.compile FAILED ({type(e).__name__}: {e}); compile column left out", flush=True)
            del calls["compile"]
    if check:
        check_agreement(torch, tokpos, label, x, positions, inv_freq, cos, sin,
                        calls.get("compile") and compiled_fn)
    with torch.no_grad():
        times = time_round_robin(calls, repeats, warmup=1)
    return times


def targets(rows):
    """(description, figure, met) for each target over every row."""
    out = []
    vs_eager = [r["eager"] / r["tokpos"] for r in rows if r.get("eager")]
    if vs_eager:
        worst = min(vs_eager)
        out.append((f"tokpos >= {TARGET_VS_EAGER}x faster than eager", f"worst {worst:.2f}x",
                    worst >= TARGET_VS_EAGER))
    vs_comp = [r["compile"] / r["tokpos"] for r in rows if r.get("compile")]
    if vs_comp:
        worst = min(vs_comp)
        out.append((f"tokpos >= {TARGET_VS_COMPILE}x faster than torch.compile", f"worst {worst:.2f}x",
                    worst >= TARGET_VS_COMPILE))
    vs_copy = [r["tokpos_out"] / r["copy"] for r in rows if r.get("copy")]
    if vs_copy:
        worst = max(vs_copy)
        out.append((f"tokpos out= <= {TARGET_VS_COPY}x the copy", f"worst {worst:.2f}x",
                    worst <= TARGET_VS_COPY))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="one small shape, few repeats (a smoke run)")
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts (default 1,2)")
    ap.add_argument("--repeats", type=int, help=f"timed repeats per row (default {DEFAULT_REPEATS}, "
                                                f"{QUICK_REPEATS} with --quick)")
    ap.add_argument("--no-compile", action="store_true", help="leave torch.compile out")
    ap.add_argument("--json", metavar="PATH", help="also write the results to PATH as JSON")
    args = ap.parse_args(argv)
    threads = [int(t) for t in args.threads.split(",") if t.strip()]
    if not threads or min(threads) < 1:
        ap.error("--threads needs thread counts >= 1")
    repeats = args.repeats or (QUICK_REPEATS if args.quick else DEFAULT_REPEATS)
    shapes = QUICK_SHAPES if args.quick else SHAPES

    import numpy as np
    import torch

    import tokpos

    use_compile = not args.no_compile
    print("tokpos.apply_rope vs transformers' apply_rotary_pos_emb (eager, torch.compile) vs a copy")
    print(f"  cpu:     {cpu_model()} ({os.cpu_count()} logical CPUs, load average "
          f"{', '.join(f'{v:.2f}' for v in os.getloadavg())})")
    print(f"  python:  {platform.python_version()}, torch {torch.__version__}, numpy {np.__version__}, "
          f"tokpos {tokpos.__version__}")
    print("  eager/compile: cos/sin precomputed from inv_freq outside the timed region (a model caches them);"
          " tokpos computes its angles inside every call")
    print(f"  medians of {repeats} round-robin repeats", flush=True)

    inv_np, _ = tokpos.rope_frequencies(128, base=10000.0)
    inv_freq = torch.from_numpy(inv_np.astype(np.float32))
    # One compiled graph per shape, dtype and thread count (dynamo guards on
    # the thread count): room for all of them, so none falls back to eager.
    torch._dynamo.config.recompile_limit = max(64, torch._dynamo.config.recompile_limit)
    compiled_fn = torch.compile(apply_rotary_pos_emb, dynamic=False) if use_compile else None
    rows = []
    for n in threads:
        torch.set_num_threads(n)
        tokpos.set_num_threads(n)
        for shape_name, shape in shapes.items():
            for dtype_name in DTYPES:
                times = run_group(torch, tokpos, shape_name, shape, dtype_name, n, repeats, use_compile,
                                  compiled_fn, inv_freq, check=(n == threads[0]))
                rows.append(dict(shape=shape_name, dtype=dtype_name, threads=n, **times))

    print()
    print("| shape | dtype | threads | " + " | ".join(LABELS[i] for i in IMPLS)
          + " | eager/tokpos | compile/tokpos | (tokpos out=)/copy |")
    print("|---|---|---|" + "---:|" * (len(IMPLS) + 3))
    for r in rows:
        cells = [fmt_time(r.get(i)) for i in IMPLS]
        ratios = [fmt_ratio(r["eager"] / r["tokpos"]),
                  fmt_ratio(r["compile"] / r["tokpos"] if r.get("compile") else None),
                  fmt_ratio(r["tokpos_out"] / r["copy"])]
        print(f"| {r['shape']} | {r['dtype']} | {r['threads']} | " + " | ".join(cells + ratios) + " |")
    print()
    print("targets:")
    result = targets(rows)
    for what, figure, met in result:
        print(f"  {what}: {'met' if met else 'NOT met'} ({figure})")
    if args.json:
        doc = dict(cpu=cpu_model(), cpus=os.cpu_count(), python=platform.python_version(), torch=torch.__version__,
                   tokpos=tokpos.__version__, repeats=repeats, shapes=shapes, rows=rows,
                   targets=[dict(target=w, figure=f, met=m) for w, f, m in result])
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
