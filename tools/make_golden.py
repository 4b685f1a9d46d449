#!/usr/bin/env python3
"""Golden position tables, each built the way its own project builds it.

Writes tests/data/golden/*.npy and tests/data/golden/manifest.json. The test
tests/golden_test.cc checks that tokpos agrees with each within that
variant's own float32 rounding, and that tokpos is closer to the exact value
than every float32 reference (it prints both errors).

Needs torch and numpy (pip install torch numpy); run once, commit the output:
    python3 tools/make_golden.py
With transformers installed it also runs tools/make_rope_golden.py, which
writes rope.json and alibi.json from transformers' own functions (each
ROPE_INIT_FUNCTIONS entry, apply_rotary_pos_emb, BLOOM's build_alibi_tensor);
without it those two files stay as committed.
Each builder below follows its project's source (named in docs/layouts.md).
"""
import json
import math
import os
import sys

import numpy as np
import torch

OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "data", "golden")


def distilbert(L, D, start):
    # transformers/models/distilbert/modeling_distilbert.py create_sinusoidal_embeddings (numpy float64)
    position_enc = np.array([[pos / np.power(10000, 2 * (j // 2) / D) for j in range(D)]
                             for pos in range(start, start + L)])
    out = torch.zeros(L, D)
    out[:, 0::2] = torch.FloatTensor(np.sin(position_enc[:, 0::2]))
    out[:, 1::2] = torch.FloatTensor(np.cos(position_enc[:, 1::2]))
    return out


def torch_tutorial(L, D, start):
    # The common PyTorch float32 construction (the "Annotated Transformer" and PyTorch tutorials)
    pe = torch.zeros(L, D)
    position = torch.arange(start, start + L, dtype=torch.float32).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, D, 2, dtype=torch.float32) * (-math.log(10000.0) / D))
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)[:, : D // 2]
    return pe


def marian(L, D, start):
    # transformers/models/marian/modeling_marian.py MarianSinusoidalPositionalEmbedding._init_weight (float64)
    position_enc = np.array([[pos / np.power(10000, 2 * (j // 2) / D) for j in range(D)]
                             for pos in range(start, start + L)])
    out = torch.zeros(L, D)
    sentinel = D // 2 if D % 2 == 0 else (D // 2) + 1
    out[:, 0:sentinel] = torch.FloatTensor(np.sin(position_enc[:, 0::2]))
    out[:, sentinel:] = torch.FloatTensor(np.cos(position_enc[:, 1::2]))
    return out


def fairseq(L, D, start, padding_idx):
    # fairseq/modules/sinusoidal_positional_embedding.py get_embedding (torch float32); rows are positions
    num_embeddings = start + L
    half_dim = D // 2
    emb = math.log(10000) / (half_dim - 1)
    emb = torch.exp(torch.arange(half_dim, dtype=torch.float) * -emb)
    emb = torch.arange(num_embeddings, dtype=torch.float).unsqueeze(1) * emb.unsqueeze(0)
    emb = torch.cat([torch.sin(emb), torch.cos(emb)], dim=1).view(num_embeddings, -1)
    if D % 2 == 1:
        emb = torch.cat([emb, torch.zeros(num_embeddings, 1)], dim=1)
    if padding_idx is not None:
        emb[padding_idx, :] = 0
    return emb[start:]


def t2t(L, D, start, min_timescale=1.0, max_timescale=1.0e4):
    # tensor2tensor/layers/common_attention.py get_timing_signal_1d, in torch float32
    position = (torch.arange(L, dtype=torch.int64) + start).to(torch.float32)
    num_timescales = D // 2
    log_timescale_increment = math.log(float(max_timescale) / float(min_timescale)) / max(num_timescales - 1, 1)
    inv_timescales = min_timescale * torch.exp(torch.arange(num_timescales, dtype=torch.float32) * -log_timescale_increment)
    scaled_time = position.unsqueeze(1) * inv_timescales.unsqueeze(0)
    signal = torch.cat([torch.sin(scaled_time), torch.cos(scaled_time)], dim=1)
    return torch.nn.functional.pad(signal, (0, D % 2))


def ggml(L, D, start, max_period=10000):
    # ggml/src/ggml-cpu/ops.cpp ggml_compute_forward_timestep_embedding_f32, in float32:
    # freq = expf(-logf(max_period) * j / half); embed[j] = cosf(t freq); embed[j + half] = sinf(t freq)
    half = D // 2
    timesteps = torch.arange(start, start + L, dtype=torch.float32)
    j = torch.arange(half, dtype=torch.float32)
    neg_log = -torch.log(torch.tensor(float(max_period), dtype=torch.float32))
    freq = torch.exp(neg_log * j / half)
    arg = timesteps.unsqueeze(1) * freq.unsqueeze(0)
    out = torch.zeros(L, D)
    out[:, :half] = torch.cos(arg)
    out[:, half:2 * half] = torch.sin(arg)
    return out


CASES = []
for D in (16, 9, 3, 2, 1):
    CASES += [("distilbert", "interleaved", dict(L=64, D=D, start=0), "float64"),
              ("torch_tutorial", "interleaved", dict(L=64, D=D, start=0), "float32"),
              ("marian", "halves", dict(L=64, D=D, start=0), "float64")]
    if D >= 4:  # fairseq divides by half_dim - 1: NaN for D = 2, 3 (docs/layouts.md)
        CASES.append(("fairseq", "fairseq", dict(L=64, D=D, start=0, padding_idx=1), "float32"))
    CASES += [("t2t", "t2t", dict(L=64, D=D, start=0), "float32"),
              ("ggml", "ggml", dict(L=64, D=D, start=0), "float32")]
# Far positions, where float32 angles go wrong.
for name, layout, precision in (("distilbert", "interleaved", "float64"), ("torch_tutorial", "interleaved", "float32"),
                                ("t2t", "t2t", "float32"), ("ggml", "ggml", "float32")):
    CASES.append((name, layout, dict(L=32, D=64, start=(1 << 24) - 32), precision))
CASES.append(("fairseq", "fairseq", dict(L=32, D=64, start=8192 - 32, padding_idx=1), "float32"))
CASES.append(("t2t", "t2t", dict(L=16, D=8, start=0, min_timescale=2.0, max_timescale=500.0), "float32"))

BUILDERS = dict(distilbert=distilbert, torch_tutorial=torch_tutorial, marian=marian, fairseq=fairseq, t2t=t2t, ggml=ggml)


def main():
    os.makedirs(OUT, exist_ok=True)
    manifest = []
    for name, layout, args, precision in CASES:
        builder_args = dict(args)
        table = BUILDERS[name](**builder_args).to(torch.float32).numpy()
        assert table.shape == (args["L"], args["D"]), (name, table.shape)
        fname = f"{name}_L{args['L']}_D{args['D']}_start{args['start']}"
        if "min_timescale" in args:
            fname += f"_min{args['min_timescale']:g}_max{args['max_timescale']:g}"
        fname += ".npy"
        np.save(os.path.join(OUT, fname), np.ascontiguousarray(table, dtype="<f4"))
        entry = dict(file=fname, source=name, layout=layout, L=args["L"], D=args["D"], start=args["start"],
                     computed_in=precision, base=args.get("max_timescale", 10000.0),
                     min_timescale=args.get("min_timescale", 1.0), padding_idx=args.get("padding_idx", -1))
        manifest.append(entry)
    with open(os.path.join(OUT, "manifest.json"), "w") as f:
        json.dump(dict(generator="tools/make_golden.py", torch=torch.__version__, numpy=np.__version__,
                       tables=manifest), f, indent=1)
    print(f"wrote {len(manifest)} tables to {os.path.normpath(OUT)} with torch {torch.__version__}")
    try:
        import transformers  # noqa: F401 - only its presence is checked here
    except ImportError:
        print("transformers is not installed: rope.json and alibi.json left as they are")
        return 0
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import make_rope_golden

    make_rope_golden.main()
    print(f"wrote rope.json and alibi.json with transformers {transformers.__version__}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
