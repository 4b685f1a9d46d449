"""tokpos.apply_rope_tables and tokpos.torch.apply_rope_tables: q and k
rotated by given cos and sin, checked bit for bit against transformers' own
apply_rotary_pos_emb (Llama's, GPT-NeoX's partial one), values, memory
layout and gradients, in float32, bfloat16 and float16; the numpy form
against numpy's float32 arithmetic; the argument errors."""

from __future__ import annotations

import numpy as np
import pytest

import tokpos
from conftest import tokpos_torch

tt = tokpos_torch()  # or a skip saying why (torch missing or too old)

import torch  # noqa: E402

transformers = pytest.importorskip("transformers", reason="transformers is not installed")
from transformers.models.gpt_neox.modeling_gpt_neox import apply_rotary_pos_emb as neox_apply  # noqa: E402
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb as llama_apply  # noqa: E402

DTYPES = [torch.float32, torch.bfloat16, torch.float16]


def heads(B, T, H, D, dtype, seed):
    """q as transformers makes it: the (B, T, H, D) projection viewed (B, H, T, D)."""
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(B, T, H * D, generator=g) * 3).view(B, T, H, D).transpose(1, 2).to(dtype)


def tables(B, T, R, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(B, T, R, generator=g).to(dtype), torch.randn(B, T, R, generator=g).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).split(".")[1])
@pytest.mark.parametrize("cos_batch", [1, 3])
@pytest.mark.parametrize("rotary", ["full", "partial"])
def test_transformers_bits_layout_and_gradient(dtype, cos_batch, rotary):
    B, T, H, D = 3, 7, 4, 16
    R = D if rotary == "full" else 6
    apply = llama_apply if rotary == "full" else neox_apply
    q, k = heads(B, T, H, D, dtype, 1), heads(B, T, 2, D, dtype, 2)
    cos, sin = tables(cos_batch, T, R, dtype, 3)
    want_q, want_k = apply(q, k, cos, sin)
    got_q = tt.apply_rope_tables(q, cos, sin, heads_first=True)
    got_k = tt.apply_rope_tables(k, cos, sin)  # H = 2 != T: read as (B, H, T, D) by itself
    assert torch.equal(got_q, want_q) and torch.equal(got_k, want_k)
    if rotary == "full":  # torch's elementwise result keeps q's memory order
        assert got_q.stride() == want_q.stride() and got_k.stride() == want_k.stride()
    # The gradient: the transposed map, as torch's autograd of the formula gives it.
    g = torch.randn(want_q.shape, generator=torch.Generator().manual_seed(4)).to(dtype)
    a, b = q.clone().requires_grad_(), q.clone().requires_grad_()
    (apply(a, k, cos, sin)[0].float() * g.float()).sum().backward()
    (tt.apply_rope_tables(b, cos, sin, heads_first=True).float() * g.float()).sum().backward()
    assert torch.equal(a.grad, b.grad)


def test_tokpos_order_and_the_inverse():
    # (B, T, H, D) with unsqueeze_dim=2 in transformers' terms; the inverse undoes a rotation by (cos, sin) of a unit.
    B, T, H, D = 2, 5, 3, 8
    x = heads(B, T, H, D, torch.float32, 5).transpose(1, 2).contiguous()
    angle = torch.rand(B, T, D // 2, generator=torch.Generator().manual_seed(6)) * 6
    cos, sin = torch.cat([angle.cos()] * 2, -1), torch.cat([angle.sin()] * 2, -1)
    want, _ = llama_apply(x, x, cos, sin, unsqueeze_dim=2)
    got = tt.apply_rope_tables(x, cos, sin, heads_first=False)
    assert torch.equal(got, want)
    back = tt.apply_rope_tables(got, cos, sin, heads_first=False, inverse=True)
    torch.testing.assert_close(back, x, rtol=0, atol=4e-6 * float(x.abs().max()))


def test_numpy_form_is_numpy_float32_arithmetic():
    rng = np.random.default_rng(7)
    T, H, D, R = 6, 2, 10, 8
    x = rng.standard_normal((T, H, D)).astype(np.float32)
    c, s = rng.standard_normal((T, R)).astype(np.float32), rng.standard_normal((T, R)).astype(np.float32)
    for layout in ("half", "interleaved"):
        out = tokpos.apply_rope_tables(x, c, s, layout=layout, heads_first=False)
        want = x.copy()
        pairs = [(i, i + R // 2) for i in range(R // 2)] if layout == "half" else [(2 * i, 2 * i + 1) for i in range(R // 2)]
        for j0, j1 in pairs:
            c0, c1, s0, s1 = c[:, None, j0], c[:, None, j1], s[:, None, j0], s[:, None, j1]
            want[..., j0] = x[..., j0] * c0 - x[..., j1] * s0
            want[..., j1] = x[..., j1] * c1 + x[..., j0] * s1
        assert out.dtype == np.float32 and np.array_equal(out.view(np.uint32), want.view(np.uint32)), layout
    inplace = x.copy()
    assert tokpos.apply_rope_tables(inplace, c, s, heads_first=False, out=inplace) is inplace
    assert np.array_equal(inplace, tokpos.apply_rope_tables(x, c, s, heads_first=False))


def test_errors_name_the_argument():
    x = torch.zeros(2, 4, 4, 8)  # H == T: two readings
    cos = torch.zeros(2, 4, 8)
    with pytest.raises(ValueError, match=r"reads two ways.*\(B, T, H, D\).*\(B, H, T, D\)"):
        tt.apply_rope_tables(x, cos, cos)
    with pytest.raises(ValueError, match="cos and sin get no gradient here"):
        tt.apply_rope_tables(x, cos.clone().requires_grad_(), cos, heads_first=True)
    with pytest.raises(ValueError, match="cos has dtype bf16 but x has f32"):
        tt.apply_rope_tables(x, cos.bfloat16(), cos, heads_first=True)
    with pytest.raises(ValueError, match="cos has 7 rotary dims; the count must be even"):
        tt.apply_rope_tables(x, cos[..., :7], cos[..., :7], heads_first=True)
    with pytest.raises(ValueError, match="layout = 'spiral'"):
        tt.apply_rope_tables(x, cos, cos, heads_first=True, layout="spiral")
    out = np.full((4, 2, 8), 5.0, dtype=np.float32)
    with pytest.raises(ValueError, match="sin has 6 rotary dims but cos has 8"):
        tokpos.apply_rope_tables(np.zeros((4, 2, 8), np.float32), np.zeros((4, 8), np.float32),
                                 np.zeros((4, 6), np.float32), heads_first=False, out=out)
    assert (out == 5.0).all()  # nothing written


def test_custom_op_passes_opcheck_and_compiles():
    q = heads(2, 5, 3, 8, torch.float32, 8)
    cos, sin = tables(2, 5, 8, torch.float32, 9)
    from tokpos._torch_rope import _apply_rope_tables_op

    for contiguous in (False, True):
        torch.library.opcheck(_apply_rope_tables_op, (q.requires_grad_(), cos, sin, "half", False, True, contiguous))
    q = q.detach()

    def f(q, cos, sin):
        return tt.apply_rope_tables(q, cos, sin, heads_first=True) * 2

    compiled = torch.compile(f, fullgraph=True, backend="eager")
    assert torch.equal(compiled(q, cos, sin), f(q, cos, sin))
