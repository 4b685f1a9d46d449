#!/usr/bin/env python3
"""Golden RoPE and ALiBi vectors from transformers itself.

Writes tests/data/golden/rope.json: for each scaling type, the inverse
frequencies and attention factor of transformers'
modeling_rope_utils.ROPE_INIT_FUNCTIONS (computed there in float32; "default" from
LlamaRotaryEmbedding.compute_default_rope_parameters), and one
application of transformers' Llama apply_rotary_pos_emb (rotate_half) in
float32 at small positions. tests/python/test_rope.py compares tokpos with
them within float32 rounding, without needing transformers.

Writes tests/data/golden/alibi.json: BLOOM's ALiBi slopes
(modeling_bloom._get_alibi_slopes, computed there in float32) for several
head counts, and build_alibi_tensor's output for an attention mask with
padding. tests/python/test_positions_golden.py compares tokpos with them.

Needs torch, numpy and transformers (pip install transformers); run once,
commit the output:
    python3 tools/make_rope_golden.py
(tools/make_golden.py runs it too when transformers is installed.)
"""
import json
import os

import numpy as np
import torch
import transformers
from transformers import PretrainedConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
from transformers.models.bloom.modeling_bloom import _get_alibi_slopes, build_alibi_tensor
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

GOLDEN = os.path.join(os.path.dirname(__file__), "..", "tests", "data", "golden")
OUT = os.path.join(GOLDEN, "rope.json")
ALIBI_OUT = os.path.join(GOLDEN, "alibi.json")
ALIBI_HEADS = (1, 2, 3, 5, 8, 12, 16, 24, 32, 40, 64, 112)
# Left padding, right padding, a pad in the middle, and no padding.
ALIBI_MASK = [[0, 0, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 0, 0], [1, 1, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1, 1]]
ALIBI_TENSOR_HEADS = (3, 8, 12)


def frequencies(dim, base, scaling, seq_len):
    """ROPE_INIT_FUNCTIONS for a config holding `scaling` (max_position_embeddings
    moves from the dict to the config, where transformers reads it)."""
    params = {k: v for k, v in scaling.items() if k != "max_position_embeddings"}
    kind = params.get("rope_type", params.get("type", "default"))
    params["rope_type"] = kind
    params["rope_theta"] = base
    cfg = PretrainedConfig()
    cfg.hidden_size, cfg.num_attention_heads, cfg.head_dim = dim, 1, dim
    cfg.max_position_embeddings = scaling.get("max_position_embeddings", 2048)
    cfg.rope_parameters = params
    if kind == "default":  # transformers 5 keeps it on each model's rotary embedding
        inv, factor = LlamaRotaryEmbedding.compute_default_rope_parameters(cfg, device="cpu")
    else:
        inv, factor = ROPE_INIT_FUNCTIONS[kind](cfg, "cpu", seq_len)
    return [float(v) for v in inv.float()], float(factor)


def main():
    rng = np.random.default_rng(7)
    longrope = {
        "rope_type": "longrope",
        "short_factor": [float(v) for v in 1 + rng.random(48) * 0.1],
        "long_factor": [float(v) for v in 1 + rng.random(48) * 30],
        "original_max_position_embeddings": 4096,
        "max_position_embeddings": 131072,
    }
    cases = [
        (128, 10000.0, {"rope_type": "default"}, None),
        (128, 10000.0, {"rope_type": "linear", "factor": 4.0}, None),
        (128, 10000.0, {"rope_type": "dynamic", "factor": 2.0, "max_position_embeddings": 4096}, 9000),
        (128, 1e6, {"rope_type": "yarn", "factor": 4.0, "max_position_embeddings": 32768}, None),
        (128, 1e6, {"rope_type": "yarn", "factor": 4.0, "max_position_embeddings": 32768, "truncate": False}, None),
        (64, 10000.0, {"rope_type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096,
                       "max_position_embeddings": 163840, "mscale": 1.0, "mscale_all_dim": 0.707,
                       "beta_fast": 32, "beta_slow": 1}, None),
        (64, 10000.0, {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 4096,
                       "max_position_embeddings": 163840}, None),
        (128, 500000.0, {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 8192}, None),
        (96, 10000.0, longrope, None),
        (96, 10000.0, longrope, 5000),
        (96, 10000.0, dict(longrope, factor=2.0), None),
    ]
    out = {"transformers": transformers.__version__, "frequencies": [], "apply": []}
    for dim, base, scaling, seq_len in cases:
        inv, factor = frequencies(dim, base, scaling, seq_len)
        out["frequencies"].append({"dim": dim, "base": base, "scaling": scaling, "seq_len": seq_len,
                                   "inv_freq": inv, "attention_factor": factor})
    # transformers' Llama: cos/sin from LlamaRotaryEmbedding's formula (float32), then rotate_half.
    B, H, T, D = 1, 2, 8, 16
    q = torch.from_numpy(rng.uniform(-2, 2, size=(B, H, T, D)).astype(np.float32))
    positions = torch.tensor([[0, 1, 2, 3, 17, 64, 100, 255]])
    inv, _ = frequencies(D, 10000.0, {"rope_type": "default"}, None)
    inv_t = torch.tensor(inv, dtype=torch.float32)
    freqs = (inv_t[None, :, None] @ positions[:, None, :].float()).transpose(1, 2)
    emb = torch.cat((freqs, freqs), dim=-1)
    rotated, _ = apply_rotary_pos_emb(q, q, emb.cos(), emb.sin())
    out["apply"].append({"layout": "half", "inv_freq": inv, "positions": positions[0].tolist(),
                         "x": q[0].transpose(0, 1).tolist(), "out": rotated[0].transpose(0, 1).tolist()})
    with open(OUT, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    alibi()


def alibi():
    """BLOOM's float32 slopes, and build_alibi_tensor (float32) reshaped to
    (B, H, S): slope_h * ((cumsum(mask) - 1) * mask)[b, j]."""
    out = {"transformers": transformers.__version__, "slopes": [], "tensors": []}
    for heads in ALIBI_HEADS:
        slopes = _get_alibi_slopes(heads, torch.device("cpu"))
        assert slopes.dtype == torch.float32 and slopes.shape == (heads,), (heads, slopes.dtype, slopes.shape)
        out["slopes"].append({"num_heads": heads, "dtype": "float32", "slopes": [float(v) for v in slopes]})
    mask = torch.tensor(ALIBI_MASK, dtype=torch.int64)
    for heads in ALIBI_TENSOR_HEADS:
        t = build_alibi_tensor(mask, heads, torch.float32)
        B, S = mask.shape
        assert t.shape == (B * heads, 1, S), t.shape
        out["tensors"].append({"num_heads": heads, "dtype": "float32", "attention_mask": ALIBI_MASK,
                               "alibi": t.reshape(B, heads, S).tolist()})
    with open(ALIBI_OUT, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
