"""RoPE in transformers' terms, checked against the installed transformers'
own functions: apply_rotary_pos_emb with the cos and sin of
LlamaRotaryEmbedding, every rope_type of ROPE_INIT_FUNCTIONS (enumerated from
transformers, so a type it adds fails here until tokpos supports it), dynamic
NTK's state, and multimodal rotary (M-RoPE)."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import tokpos_torch

tt = tokpos_torch()  # or a skip saying why (torch missing or too old)

import tokpos  # noqa: E402
import torch  # noqa: E402

transformers = pytest.importorskip("transformers", reason="transformers is not installed")
from transformers.models.llama import modeling_llama  # noqa: E402

EPS32 = 2.0**-24


def llama_config(head_dim=16, heads=4, **kw):
    kw.setdefault("max_position_embeddings", 64)
    return transformers.LlamaConfig(
        hidden_size=head_dim * heads, num_attention_heads=heads, num_key_value_heads=heads, head_dim=head_dim,
        intermediate_size=32, num_hidden_layers=1, vocab_size=32, **kw,
    )


def data(shape, seed, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(shape, generator=g, dtype=torch.float64) * 2 - 1).to(dtype)


def angle_tolerance(positions, scale=1.0):
    """How far transformers' float32 rotation may be from the exact one:
    its inv_freq (a float32 power and a division) and the float32 product
    position * inv_freq are each within an ulp or so, an angle error below
    4 * p * 2^-24 for frequencies <= 1; each output mixes two inputs of
    size <= 1 by it, plus float32 rounding."""
    return scale * (8 * int(positions.max()) * EPS32 + 16 * EPS32)


# ---- apply_rope in transformers' layout -------------------------------------------


@pytest.mark.parametrize("heads_first", [True, False])
@pytest.mark.parametrize("batch_positions", [True, False])
def test_apply_rope_matches_apply_rotary_pos_emb(heads_first, batch_positions):
    B, H, T, D = 3, 4, 7, 16
    config = llama_config(head_dim=D, heads=H)
    rotary = modeling_llama.LlamaRotaryEmbedding(config)
    shape = (B, H, T, D) if heads_first else (B, T, H, D)
    q, k = data(shape, 1), data(shape, 2)
    if batch_positions:
        positions = torch.stack([torch.arange(T) + 3 * b for b in range(B)])
    else:
        positions = torch.arange(T)[None] + 5  # (1, T), as transformers passes it
    cos, sin = rotary(q, positions)
    want_q, want_k = modeling_llama.apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1 if heads_first else 2)
    inv, factor = tokpos.rope_frequencies(D, base=config.rope_parameters["rope_theta"])
    tol = angle_tolerance(positions)
    for x, want in ((q, want_q), (k, want_k)):
        got = tt.apply_rope(x, positions, inv, heads_first=heads_first, attention_factor=factor)
        assert got.shape == x.shape
        torch.testing.assert_close(got, want, rtol=0, atol=tol)
        # numpy in, numpy out, the same bits; and out= in x's layout.
        got_np = tokpos.apply_rope(x.numpy(), positions.numpy(), inv, heads_first=heads_first)
        np.testing.assert_array_equal(got_np, got.numpy())
        out = torch.empty_like(x)
        tokpos.apply_rope(x, positions, inv, heads_first=heads_first, out=out)
        assert torch.equal(out, got)
    if heads_first:
        # Unambiguous (H != T): the layout is read from positions alone.
        assert torch.equal(tt.apply_rope(q, positions, inv), tt.apply_rope(q, positions, inv, heads_first=True))
        # The result keeps transformers' memory order.
        assert tt.apply_rope(q, positions, inv, heads_first=True).is_contiguous()


def test_apply_rope_heads_first_gradient():
    B, H, T, D = 2, 3, 5, 8
    q = data((B, H, T, D), 3).double()
    q32 = q.float().requires_grad_()
    positions = torch.arange(T)[None]
    inv, _ = tokpos.rope_frequencies(D)
    y = tt.apply_rope(q32, positions, inv, heads_first=True)
    g = data((B, H, T, D), 4)
    y.backward(g)
    # The gradient is the transposed rotation of g: rotating by the inverse.
    want = tt.apply_rope(g, positions, inv, heads_first=True, inverse=True)
    torch.testing.assert_close(q32.grad, want, rtol=0, atol=0)
    same = tt.apply_rope(q32.detach(), positions, inv, heads_first=True)
    assert torch.equal(y.detach(), same)


def test_apply_rope_unbatched_heads_first():
    H, T, D = 2, 6, 8
    x = data((H, T, D), 5)
    positions = torch.arange(T) * 3
    inv, _ = tokpos.rope_frequencies(D)
    got = tt.apply_rope(x, positions, inv, heads_first=True)
    want = tt.apply_rope(x.transpose(0, 1).contiguous(), positions, inv, heads_first=False).transpose(0, 1)
    assert torch.equal(got, want)


@pytest.mark.parametrize("batched", [True, False])
def test_apply_rope_two_readings_is_an_error(batched):
    T = 4
    shape = (2, T, T, 8) if batched else (T, T, 8)
    x = data(shape, 6)
    positions = torch.arange(T)[None].expand(2, T) if batched else torch.arange(T)
    inv, _ = tokpos.rope_frequencies(8)
    for f in (tt.apply_rope, tokpos.apply_rope):
        with pytest.raises(ValueError, match=r"reads two ways.*H = 4.*heads_first=False or heads_first=True"):
            f(x, positions, inv)
    with pytest.raises(ValueError, match="reads two ways"):
        tokpos.apply_rope(x.numpy(), positions.numpy(), inv)
    # Either explicit reading is taken, and they differ.
    a = tt.apply_rope(x, positions, inv, heads_first=False)
    b = tt.apply_rope(x, positions, inv, heads_first=True)
    assert not torch.equal(a, b)
    with pytest.raises(ValueError, match="heads_first = 'yes' must be True, False or None"):
        tt.apply_rope(x, positions, inv, heads_first="yes")


def test_apply_rope_positions_broadcast_only_from_one_row():
    x = data((3, 5, 2, 8), 7)
    inv, _ = tokpos.rope_frequencies(8)
    one = torch.arange(5)[None]
    got = tt.apply_rope(x, one, inv)
    assert torch.equal(got, tt.apply_rope(x, one.expand(3, 5).contiguous(), inv))
    with pytest.raises(ValueError, match="positions"):
        tt.apply_rope(x, torch.arange(10).reshape(2, 5), inv)


def test_module_forward_heads_first():
    rope = tt.RotaryEmbedding(8)
    q = data((2, 3, 5, 8), 8)
    positions = torch.arange(5)[None]
    assert torch.equal(rope(q, positions, heads_first=True), tt.apply_rope(q, positions, rope.inv_freq, heads_first=True))
