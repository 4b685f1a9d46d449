"""tokpos.torch.apply_rope and RotaryEmbedding: forward, gradients, the custom
op and torch.compile, checked against transformers' apply_rotary_pos_emb
(q * cos + rotate_half(q) * sin) written out here in float64 torch, and its
autograd."""

from __future__ import annotations

import math

import numpy as np
import pytest

from conftest import tokpos_torch

tt = tokpos_torch()  # or a skip saying why (torch missing or too old)

import tokpos  # noqa: E402
import torch  # noqa: E402

B, T, H, DH = 2, 5, 3, 8
EPS32 = 2.0**-24


# ---- float64 references ------------------------------------------------------------


def default_inv_freq(dim: int, base: float = 10000.0) -> torch.Tensor:
    return base ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def rotate_every_two(x):
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack((-x2, x1), dim=-1).flatten(-2)


def reference(x, positions, inv_freq, layout="half", attention_factor=1.0):
    """transformers' apply_rotary_pos_emb in float64 (GPT-J's rotate_every_two
    for "interleaved"), with partial rotary as GPT-NeoX does it: rotate the
    first 2 * len(inv_freq) dims, pass the rest through. x (..., T, H, D)
    float64 (differentiable), positions (..., T)."""
    inv = torch.as_tensor(np.asarray(inv_freq), dtype=torch.float64)
    rot = 2 * inv.shape[0]
    freqs = positions.to(torch.float64)[..., None] * inv
    emb = torch.cat((freqs, freqs), dim=-1) if layout == "half" else freqs.repeat_interleave(2, dim=-1)
    cos = (emb.cos() * attention_factor)[..., None, :]  # broadcast over heads
    sin = (emb.sin() * attention_factor)[..., None, :]
    xr, xp = x[..., :rot], x[..., rot:]
    turn = rotate_half if layout == "half" else rotate_every_two
    return torch.cat((xr * cos + turn(xr) * sin, xp), dim=-1)


def data(shape, seed, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(shape, generator=g, dtype=torch.float64) * 2 - 1).to(dtype)


def positions_of(shape, seed, high=4096):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, high, shape, generator=g)


def yarn_scaling():
    return {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}


def close32(got, want, scale):
    """got (float32) within float32 rounding of the float64 want: the
    kernel's cos and sin are within 2^-24 of exact and each of its few float
    operations rounds once."""
    torch.testing.assert_close(got.double(), want, rtol=0, atol=8 * EPS32 * scale)


# ---- forward -----------------------------------------------------------------------


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("batched", [True, False])
def test_forward_matches_float64_reference(layout, batched):
    shape = (B, T, H, DH) if batched else (T, H, DH)
    x = data(shape, 1)
    pos = positions_of(shape[:-2], 2)
    inv = default_inv_freq(DH)
    out = tt.apply_rope(x, pos, inv, layout=layout)
    assert out.shape == x.shape and out.dtype == torch.float32
    close32(out, reference(x.double(), pos, inv, layout), 2.0)
    # int32 positions and numpy inv_freq give the same bits.
    out32 = tt.apply_rope(x, pos.to(torch.int32), inv.numpy(), layout=layout)
    assert torch.equal(out, out32)


def test_layouts_differ():
    x = data((T, H, DH), 3)
    pos = torch.arange(1, T + 1)
    inv = default_inv_freq(DH)
    assert not torch.equal(tt.apply_rope(x, pos, inv, layout="half"), tt.apply_rope(x, pos, inv, layout="interleaved"))


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_partial_rotary_passes_the_rest_through(layout):
    x = data((B, T, H, 10), 4)
    pos = positions_of((B, T), 5)
    inv = default_inv_freq(6)
    out = tt.apply_rope(x, pos, inv, layout=layout, rotary_dim=6)
    assert torch.equal(out[..., 6:], x[..., 6:])
    close32(out, reference(x.double(), pos, inv, layout), 2.0)
    assert torch.equal(tt.apply_rope(x, pos, inv, layout=layout), out)  # rotary_dim None: 2 * len(inv_freq)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_x(dtype):
    x = data((B, T, H, DH), 6, dtype)
    pos = positions_of((B, T), 7)
    inv = default_inv_freq(DH)
    out = tt.apply_rope(x, pos, inv)
    assert out.dtype == dtype
    want = reference(x.double(), pos, inv)
    # One rounding to dtype of a float32 result: half an ulp plus float32 noise.
    eps = 2.0**-8 if dtype == torch.bfloat16 else 2.0**-11
    torch.testing.assert_close(out.double(), want, rtol=eps, atol=8 * EPS32 * 2 + 2.0**-24)


def test_transposed_bhtd_view():
    """transformers' (B, H, T, D) q goes in as q.transpose(1, 2), a view."""
    q = data((B, H, T, DH), 8)
    pos = positions_of((B, T), 9)
    inv = default_inv_freq(DH)
    out = tt.apply_rope(q.transpose(1, 2), pos, inv)
    close32(out, reference(q.transpose(1, 2).double(), pos, inv), 2.0)
    # A non-unit innermost stride works too (copied first).
    wide = data((T, H, 2 * DH), 10)
    close32(tt.apply_rope(wide[..., ::2], pos[0], inv), reference(wide[..., ::2].double(), pos[0], inv), 2.0)


def test_attention_factor_scales_rotated_dims_only():
    inv, a = tokpos.rope_frequencies(6, scaling=yarn_scaling())
    assert a > 1.1
    x = data((T, H, DH), 11)
    pos = torch.arange(T) * 7
    out = tt.apply_rope(x, pos, inv, attention_factor=a)
    close32(out, reference(x.double(), pos, inv, "half", a), 2.0 * a)
    assert torch.equal(out[..., 6:], x[..., 6:])


def test_inference_path_equals_op_path():
    x = data((B, T, H, DH), 12).requires_grad_()
    pos = positions_of((B, T), 13)
    inv = default_inv_freq(DH)
    with_grad = tt.apply_rope(x, pos, inv, layout="interleaved", attention_factor=1.25)
    assert with_grad.requires_grad
    with torch.no_grad():
        without = tt.apply_rope(x, pos, inv, layout="interleaved", attention_factor=1.25)
    assert not without.requires_grad
    assert torch.equal(with_grad.detach(), without)
    direct = torch.ops.tokpos.apply_rope(x.detach(), pos, inv, "interleaved", None, 1.25, False)
    assert torch.equal(direct, without)


# ---- gradients ---------------------------------------------------------------------


def grad_pair(x32, pos, inv, layout, a, rotary_dim=None, seed=20):
    """(tokpos's gradient of sum(out * w), float64 autograd's of the reference)."""
    w = data(x32.shape, seed)
    x = x32.clone().requires_grad_()
    (tt.apply_rope(x, pos, inv, layout=layout, rotary_dim=rotary_dim, attention_factor=a) * w).sum().backward()
    x64 = x32.double().requires_grad_()
    (reference(x64, pos, inv, layout, a) * w.double()).sum().backward()
    return x.grad, x64.grad


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_gradient_matches_float64_autograd(layout):
    x = data((B, T, H, DH), 14)
    pos = positions_of((B, T), 15)
    got, want = grad_pair(x, pos, default_inv_freq(DH), layout, 1.0)
    assert got.dtype == torch.float32
    close32(got, want, 2.0)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_gradient_with_yarn_attention_factor_and_partial_rotary(layout):
    inv, a = tokpos.rope_frequencies(6, scaling=yarn_scaling())
    assert a != 1.0
    x = data((B, T, H, 10), 16)
    pos = positions_of((B, T), 17)
    got, want = grad_pair(x, pos, inv, layout, a, rotary_dim=6)
    close32(got, want, 2.0 * a)
    # The pass-through dims' gradient is the upstream gradient itself.
    assert torch.equal(got[..., 6:], data(x.shape, 20)[..., 6:])


def test_gradient_reaches_x_only():
    x = data((T, H, DH), 18).requires_grad_()
    inv = default_inv_freq(DH).requires_grad_()
    pos = torch.arange(T)
    tt.apply_rope(x, pos, inv).sum().backward()
    assert x.grad is not None and inv.grad is None


def test_bfloat16_gradient_is_bfloat16():
    x = data((B, T, H, DH), 19, torch.bfloat16).requires_grad_()
    pos = positions_of((B, T), 21)
    inv = default_inv_freq(DH)
    g = data(x.shape, 22, torch.bfloat16)
    tt.apply_rope(x, pos, inv).backward(g)
    assert x.grad.dtype == torch.bfloat16
    x64 = x.detach().double().requires_grad_()
    reference(x64, pos, inv).backward(g.double())
    torch.testing.assert_close(x.grad.double(), x64.grad, rtol=2.0**-8, atol=1e-6)


def test_gradient_through_transposed_view():
    q = data((B, H, T, DH), 23).requires_grad_()
    pos = positions_of((B, T), 24)
    inv = default_inv_freq(DH)
    tt.apply_rope(q.transpose(1, 2), pos, inv).transpose(1, 2).pow(2).sum().backward()
    q64 = q.detach().double().requires_grad_()
    reference(q64.transpose(1, 2), pos, inv).transpose(1, 2).pow(2).sum().backward()
    close32(q.grad, q64.grad, 8.0)


# ---- the custom op -----------------------------------------------------------------


def test_opcheck():
    inv, a = tokpos.rope_frequencies(6, scaling=yarn_scaling())
    inv = torch.from_numpy(inv)
    cases = [
        (
            data((B, T, H, DH), 25).requires_grad_(),
            positions_of((B, T), 26),
            default_inv_freq(DH),
            "half",
            None,
            1.0,
            False,
        ),
        (data((T, H, 10), 27).requires_grad_(), torch.arange(T, dtype=torch.int32), inv, "interleaved", 6, a, False),
        (data((B, T, H, 10), 28), positions_of((B, T), 29), inv, "half", 6, a, True),
    ]
    for args in cases:
        torch.library.opcheck(torch.ops.tokpos.apply_rope.default, args)


def test_compile_fullgraph_forward_and_backward_match_eager():
    inv, a = tokpos.rope_frequencies(6, scaling=yarn_scaling())
    rope = tt.RotaryEmbedding(6, scaling=yarn_scaling(), layout="interleaved")

    def step(q, pos):
        return rope(q.transpose(1, 2), pos).transpose(1, 2)

    compiled = torch.compile(step, fullgraph=True)
    q = data((B, H, T, 10), 30)
    pos = positions_of((B, T), 31)
    w = data(q.shape, 32)
    qe, qc = q.clone().requires_grad_(), q.clone().requires_grad_()
    out_e = step(qe, pos)
    out_c = compiled(qc, pos)
    (out_e * w).sum().backward()
    (out_c * w).sum().backward()
    assert torch.equal(out_c, out_e)
    assert torch.equal(qc.grad, qe.grad)
    close32(out_e, reference(q.transpose(1, 2).double(), pos, inv, "interleaved", a).transpose(1, 2), 2.0 * a)


# ---- RotaryEmbedding ---------------------------------------------------------------


def test_module_buffers_parameters_and_state_dict():
    rope = tt.RotaryEmbedding(DH, base=500000.0)
    assert list(rope.parameters()) == []
    assert "inv_freq" not in rope.state_dict() and len(rope.state_dict()) == 0
    assert rope.inv_freq.dtype == torch.float64
    torch.testing.assert_close(rope.inv_freq, default_inv_freq(DH, 500000.0), rtol=4e-16, atol=0)
    assert rope.attention_factor == 1.0
    rope.load_state_dict({}, strict=True)
    # A dtype conversion of the module keeps the frequencies exact.
    rope.to(torch.bfloat16)
    assert rope.inv_freq.dtype == torch.float64
    torch.testing.assert_close(rope.inv_freq, default_inv_freq(DH, 500000.0), rtol=4e-16, atol=0)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_module_forward_partial_rotary_and_yarn(layout):
    rope = tt.RotaryEmbedding(6, scaling=yarn_scaling(), layout=layout)
    a = rope.attention_factor
    assert a == pytest.approx(0.1 * math.log(4.0) + 1.0, rel=1e-15)
    x = data((B, T, H, DH), 33)
    pos = positions_of((B, T), 34)
    out = rope(x, pos)
    close32(out, reference(x.double(), pos, rope.inv_freq, layout, a), 2.0 * a)
    assert torch.equal(out[..., 6:], x[..., 6:])
    assert torch.equal(out, tt.apply_rope(x, pos, rope.inv_freq, layout=layout, attention_factor=a))


def test_module_rope_theta_in_scaling():
    rope = tt.RotaryEmbedding(DH, scaling={"rope_type": "default", "rope_theta": 1e6})
    torch.testing.assert_close(rope.inv_freq, default_inv_freq(DH, 1e6), rtol=4e-16, atol=0)


def test_module_dynamic_needs_seq_len():
    scaling = {"rope_type": "dynamic", "factor": 2.0, "max_position_embeddings": 16}
    rope = tt.RotaryEmbedding(DH, scaling=scaling)
    x = data((T, H, DH), 35)
    pos = torch.arange(T) + 30
    with pytest.raises(ValueError, match="seq_len"):
        rope(x, pos)
    with pytest.raises(ValueError, match="seq_len"):
        rope.cos_sin(pos)
    # Dynamic NTK: base' = base * (factor * L / M - (factor - 1))^(dim / (dim - 2)).
    L, M, f = 40, 16, 2.0
    base = 10000.0 * (f * L / M - (f - 1)) ** (DH / (DH - 2))
    out = rope(x, pos, seq_len=L)
    close32(out, reference(x.double(), pos, default_inv_freq(DH, base)), 2.0)
    # Up to M the frequencies are the default ones.
    close32(rope(x, pos, seq_len=M), reference(x.double(), pos, default_inv_freq(DH)), 2.0)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_module_cos_sin(layout):
    rope = tt.RotaryEmbedding(6, scaling=yarn_scaling(), layout=layout)
    pos = positions_of((B, T), 36)
    cos, sin = rope.cos_sin(pos)
    assert cos.shape == (B, T, 6) and cos.dtype == torch.float32
    freqs = pos.double()[..., None] * rope.inv_freq
    emb = torch.cat((freqs, freqs), -1) if layout == "half" else freqs.repeat_interleave(2, dim=-1)
    a = rope.attention_factor
    torch.testing.assert_close(cos.double(), emb.cos() * a, rtol=0, atol=4 * EPS32 * a)
    torch.testing.assert_close(sin.double(), emb.sin() * a, rtol=0, atol=4 * EPS32 * a)
    cb, sb = rope.cos_sin(pos, dtype=torch.bfloat16)
    assert cb.dtype == sb.dtype == torch.bfloat16
    assert torch.equal(cb, cos.to(torch.bfloat16))


# ---- errors ------------------------------------------------------------------------


@pytest.mark.parametrize("grad", [False, True])
def test_bad_input_raises_value_error(grad):
    x = data((B, T, H, DH), 37).requires_grad_(grad)
    pos = positions_of((B, T), 38)
    inv = default_inv_freq(DH)
    bad = [
        lambda: tt.apply_rope(x, pos, inv, layout="neox"),
        lambda: tt.apply_rope(x.detach().numpy(), pos, inv),
        lambda: tt.apply_rope(x, pos.tolist(), inv),
        lambda: tt.apply_rope(x, pos, inv.tolist()),
        lambda: tt.apply_rope(x, pos[:, :-1], inv),  # positions (B, T-1)
        lambda: tt.apply_rope(x, pos[0], inv),  # (T) positions for (B, T, H, D) x
        lambda: tt.apply_rope(x, pos, default_inv_freq(2 * DH)),  # rotary dim past the head
        lambda: tt.apply_rope(x, pos, inv, rotary_dim=6),  # != 2 * len(inv_freq)
        lambda: tt.apply_rope(x, pos, inv, attention_factor=0.0),
        lambda: tt.apply_rope(x, pos.double(), inv),
        lambda: tt.apply_rope(x.detach().to(torch.int32), pos, inv),
    ]
    for i, call in enumerate(bad):
        with pytest.raises(ValueError):
            call()
            pytest.fail(f"case {i} did not raise")


def test_position_out_of_range_raises_index_error():
    x = data((T, H, DH), 39)
    with pytest.raises(IndexError, match="position -1"):
        tt.apply_rope(x, torch.tensor([0, 1, -1, 2, 3]), default_inv_freq(DH))


def test_module_bad_arguments():
    with pytest.raises(ValueError):
        tt.RotaryEmbedding(7)  # odd
    with pytest.raises(ValueError):
        tt.RotaryEmbedding(DH, layout="neox")
    with pytest.raises(ValueError):
        tt.RotaryEmbedding(DH, scaling={"rope_type": "nope"})
    with pytest.raises(ValueError):
        tt.RotaryEmbedding(DH, base=10000.0, scaling={"rope_type": "default", "rope_theta": 1e6})
    rope = tt.RotaryEmbedding(DH)
    with pytest.raises(ValueError):
        rope(data((T, H, DH - 2), 40), torch.arange(T))  # head narrower than dim
    with pytest.raises(ValueError):
        rope.cos_sin(torch.arange(T), dtype=torch.float64)
