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


# ---- every rope_type of ROPE_INIT_FUNCTIONS -----------------------------------------

from transformers import modeling_rope_utils  # noqa: E402

HEAD_DIM, ORIGINAL = 16, 16


def rope_parameters(rope_type, rotary_dim):
    """A small rope_parameters dict of each type, with the keys it reads."""
    half = rotary_dim // 2
    p = {"rope_type": rope_type, "rope_theta": 1000.0}
    if rope_type in ("linear", "dynamic"):
        p["factor"] = 2.0
    elif rope_type == "yarn":
        p.update(factor=4.0, original_max_position_embeddings=ORIGINAL, beta_fast=8.0, beta_slow=1.0)
    elif rope_type == "longrope":
        p.update(
            short_factor=[1.0 + 0.1 * i for i in range(half)], long_factor=[1.5 + 0.5 * i for i in range(half)],
            original_max_position_embeddings=ORIGINAL,
        )
    elif rope_type == "llama3":
        # wavelengths 2 pi 1000^(2i/d) on both sides of 64 / 1 and 64 / 4, and between
        p.update(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=64)
    elif rope_type == "proportional":
        p["factor"] = 2.0
    return p


ROPE_TYPES = ["default", *modeling_rope_utils.ROPE_INIT_FUNCTIONS]


def transformers_frequencies(config, rope_type):
    """transformers' own (inv_freq, attention_factor) for config: its
    ROPE_INIT_FUNCTIONS entry, or for "default" the compute_default of a
    model that honours partial_rotary_factor (Phi-3's; Llama's reads the
    whole head)."""
    if rope_type == "default":
        from transformers.models.phi3 import modeling_phi3

        return modeling_phi3.Phi3RotaryEmbedding.compute_default_rope_parameters(config)
    return modeling_rope_utils.ROPE_INIT_FUNCTIONS[rope_type](config)


def test_every_transformers_rope_type_is_a_tokpos_rope_type():
    assert set(ROPE_TYPES) <= set(tokpos.ROPE_TYPES), set(ROPE_TYPES) - set(tokpos.ROPE_TYPES)


@pytest.mark.parametrize("partial", [None, 0.5, 0.25])
@pytest.mark.parametrize("rope_type", ROPE_TYPES)
def test_frequencies_match_init_function(rope_type, partial):
    factor = 1.0 if partial is None else partial
    rotary_dim = int(HEAD_DIM * factor) if rope_type != "proportional" else HEAD_DIM
    params = rope_parameters(rope_type, rotary_dim)
    if partial is not None:
        params["partial_rotary_factor"] = partial
    config = llama_config(head_dim=HEAD_DIM, rope_parameters=dict(params))
    want_inv, want_factor = transformers_frequencies(config, rope_type)
    rope = tt.RotaryEmbedding.from_config(config)
    assert rope.rotary_dim == 2 * want_inv.shape[0]
    # transformers computes in float32: a few float32 ulps apart.
    np.testing.assert_allclose(rope.inv_freq.numpy(), want_inv.double().numpy(), rtol=4e-7 * 8, atol=0)
    assert rope.attention_factor == pytest.approx(want_factor, rel=1e-12)
    # The same through rope_frequencies and the dict alone, head_dim in it or as dim.
    inv, af = tokpos.rope_frequencies(HEAD_DIM, scaling={**params, "max_position_embeddings": 64})
    np.testing.assert_array_equal(inv, rope.inv_freq.numpy())
    assert af == rope.attention_factor
    inv2, _ = tokpos.rope_frequencies(scaling={**params, "head_dim": HEAD_DIM, "max_position_embeddings": 64})
    np.testing.assert_array_equal(inv2, inv)


@pytest.mark.parametrize("rope_type", ROPE_TYPES)
def test_cos_sin_match_llama_rotary_embedding(rope_type):
    params = rope_parameters(rope_type, HEAD_DIM)
    config = llama_config(head_dim=HEAD_DIM, rope_parameters=dict(params))
    rotary = modeling_llama.LlamaRotaryEmbedding(config)
    rope = tt.RotaryEmbedding.from_config(config)
    x = torch.zeros(1, 1, 1, HEAD_DIM)
    # Lengths within and past the original ones, growing then shrinking
    # (dynamic's state is checked on its own in test_dynamic_*).
    lengths = (torch.arange(12)[None], torch.arange(30, 50)[None], torch.arange(60, 100)[None],
               torch.stack([torch.arange(5), torch.arange(5) + 9]))
    for positions in lengths:
        want_cos, want_sin = rotary(x, positions)
        seq_len = int(positions.max()) + 1
        cos, sin = rope.cos_sin(positions, seq_len=seq_len)
        tol = angle_tolerance(positions, rope.attention_factor)
        torch.testing.assert_close(cos, want_cos, rtol=0, atol=tol)
        torch.testing.assert_close(sin, want_sin, rtol=0, atol=tol)


@pytest.mark.parametrize("factor", [1.0, 0.1 * np.log(4.0) + 1.0])
def test_float32_angle_is_transformers_arithmetic(factor):
    # angle="float32": float32(position) * float32(inv_freq) rounded to
    # float32, then cos and sin of that angle rounded once (here by numpy's
    # float64 cos, an independent reference), times the factor in float32.
    inv = np.array(tokpos.rope_frequencies(HEAD_DIM, base=10000.0)[0])
    positions = np.array([[0, 1, 7, 100, 4095], [65535, 1 << 20, (1 << 24) + 3, 3, 9]], dtype=np.int64)
    cos, sin = tokpos.rope_cos_sin(positions, inv, attention_factor=factor, angle="float32")
    angle = positions.astype(np.float32)[..., None] * inv.astype(np.float32)
    f = np.float32(factor)
    want_c = np.cos(angle.astype(np.float64)).astype(np.float32) * f
    want_s = np.sin(angle.astype(np.float64)).astype(np.float32) * f
    half = inv.shape[0]
    np.testing.assert_array_equal(cos, np.concatenate([want_c, want_c], axis=-1))
    np.testing.assert_array_equal(sin, np.concatenate([want_s, want_s], axis=-1))
    # The exact angle differs from the float32 one at large positions.
    exact, _ = tokpos.rope_cos_sin(positions, inv, attention_factor=factor)
    assert not np.array_equal(exact[..., :half], cos[..., :half])
    # torch in, torch out, the same values.
    tc, ts = tokpos.rope_cos_sin(torch.from_numpy(positions), inv, attention_factor=factor, angle="float32")
    np.testing.assert_array_equal(tc.numpy(), cos)
    np.testing.assert_array_equal(ts.numpy(), sin)


def test_float32_angle_limits_are_named():
    with pytest.raises(ValueError, match="angle = 'f32' is not one of 'exact', 'float32'"):
        tokpos.rope_cos_sin([1], [1.0], angle="f32")
    with pytest.raises(ValueError, match="at most 2\\^31"):
        tokpos.rope_cos_sin([(1 << 31) - 1], [4.0], angle="float32")
    cos, _ = tokpos.rope_cos_sin([(1 << 31) - 1], [1.0], angle="float32")
    assert cos[0, 0] == np.float32(np.cos(np.float64(np.float32((1 << 31) - 1))))


# (head_dim, partial_rotary_factor): Python's int(partial * head_dim // 2)
# rotated pairs, including 0.06 * 100, which float64 rounds to 6.0 (3 pairs;
# the real product would give 2).
PROPORTIONAL_CASES = [(16, 0.5), (12, 0.25), (10, 0.7), (100, 0.06), (100, 0.3), (16, 0.05), (8, 1.0)]


@pytest.mark.parametrize("head_dim, partial", PROPORTIONAL_CASES)
def test_proportional_is_the_cores_and_transformers(head_dim, partial):
    params = {"rope_type": "proportional", "rope_theta": 1000.0, "factor": 2.0, "partial_rotary_factor": partial}
    config = llama_config(head_dim=head_dim, rope_parameters=dict(params))
    want_inv, want_factor = modeling_rope_utils.ROPE_INIT_FUNCTIONS["proportional"](config)
    inv, af = tokpos.rope_frequencies(head_dim, scaling=params)
    assert inv.shape == (head_dim // 2,)
    # The same pairs rotate (exactly the nonzero ones), the values a few float32 ulps apart.
    np.testing.assert_array_equal(inv != 0, want_inv.numpy() != 0)
    np.testing.assert_allclose(inv, want_inv.double().numpy(), rtol=4e-7 * 8, atol=0)
    assert af == want_factor == 1.0
    # Computed by the core, from the head dimension and the factor the dict gives.
    s = tokpos._core.RopeScaling()
    s.type = "proportional"
    s.factor = 2.0
    s.partial_rotary_factor = partial
    core_inv, core_af = tokpos._core.rope_frequencies(head_dim, 1000.0, s, None)
    np.testing.assert_array_equal(inv, np.asarray(core_inv))
    assert core_af == af


def test_proportional_partial_rotary_factor_is_checked_by_the_core():
    s = tokpos._core.RopeScaling()
    s.type = "proportional"
    for value in (1.5, 0.0, -0.5, float("nan")):
        s.partial_rotary_factor = value
        with pytest.raises(ValueError, match=r"rope_frequencies: partial_rotary_factor = .* must be in \(0, 1\]"):
            tokpos._core.rope_frequencies(16, 1000.0, s, None)
    s.partial_rotary_factor = None  # absent: 1, every pair rotates
    inv, _ = tokpos._core.rope_frequencies(16, 1000.0, s, None)
    np.testing.assert_array_equal(inv, tokpos.rope_frequencies(16, base=1000.0)[0])


def test_rope_dict_errors_name_the_value():
    with pytest.raises(ValueError, match=r"int\(10 \* 0.3\) = 3, which must be even"):
        tokpos.rope_frequencies(10, scaling={"rope_type": "default", "partial_rotary_factor": 0.3})
    with pytest.raises(ValueError, match=r"partial_rotary_factor'\] = 1.5 must be in \(0, 1\]"):
        tokpos.rope_frequencies(16, scaling={"rope_type": "default", "partial_rotary_factor": 1.5})
    with pytest.raises(ValueError, match=r"dim = 16 disagrees with scaling\['head_dim'\] = 32"):
        tokpos.rope_frequencies(16, scaling={"rope_type": "default", "head_dim": 32})
    with pytest.raises(ValueError, match=r"dim is needed"):
        tokpos.rope_frequencies(scaling={"rope_type": "default"})
    with pytest.raises(ValueError, match="disagree"):
        tokpos.rope_frequencies(16, scaling={"rope_type": "proportional", "type": "linear", "factor": 2.0})
    with pytest.raises(ValueError, match=r"factor = -2 must be finite and > 0"):
        tokpos.rope_frequencies(16, scaling={"rope_type": "proportional", "factor": -2.0})
    # Without partial_rotary_factor, dim is the rotary dimension as before.
    inv, _ = tokpos.rope_frequencies(16, scaling={"rope_type": "linear", "factor": 2.0})
    assert inv.shape == (8,)


# ---- dynamic NTK: transformers' state, and tokpos's stateless choice ------------------


def dynamic_config():
    return llama_config(head_dim=HEAD_DIM, rope_parameters={"rope_type": "dynamic", "factor": 2.0, "rope_theta": 1000.0})


# Growing past max_position_embeddings (64), shrinking while still past it,
# then within it (transformers resets), then past it again.
DYNAMIC_LENGTHS = (10, 80, 120, 90, 70, 30, 100, 64, 65)


def test_dynamic_longest_follows_transformers_state():
    config = dynamic_config()
    rotary = modeling_llama.LlamaRotaryEmbedding(config)
    rope = tt.RotaryEmbedding.from_config(config)
    stateless = tt.RotaryEmbedding.from_config(config, dynamic="stateless")
    assert rope.dynamic == "longest"
    x = torch.zeros(1, 1, 1, HEAD_DIM)
    kept = []
    for n in DYNAMIC_LENGTHS:
        positions = torch.arange(n)[None]
        want_cos, want_sin = rotary(x, positions)
        cos, sin = rope.cos_sin(positions, seq_len=n)
        kept.append(not torch.equal(cos, stateless.cos_sin(positions, seq_len=n)[0]))
        assert rope.seq_len_cached == rotary.max_seq_len_cached, n
        np.testing.assert_allclose(rope._by_seq_len[rope.seq_len_cached][0].numpy(), rotary.inv_freq.double().numpy(),
                                   rtol=4e-7 * 8)
        tol = angle_tolerance(positions)
        torch.testing.assert_close(cos, want_cos, rtol=0, atol=tol)
        torch.testing.assert_close(sin, want_sin, rtol=0, atol=tol)
    # The longest length's frequencies were kept for 90, 70 (after 120) and 64, 65 (after 100).
    assert kept == [False, False, False, True, True, False, False, True, True]


def test_dynamic_stateless_depends_on_the_call_alone():
    config = dynamic_config()
    rope = tt.RotaryEmbedding.from_config(config, dynamic="stateless")
    x = torch.zeros(1, 1, 1, HEAD_DIM)
    differs = []
    for n in DYNAMIC_LENGTHS:
        positions = torch.arange(n)[None]
        # transformers' frequencies for this length alone: a fresh module.
        want_cos, _ = modeling_llama.LlamaRotaryEmbedding(config)(x, positions)
        cos, _ = rope.cos_sin(positions, seq_len=n)
        torch.testing.assert_close(cos, want_cos, rtol=0, atol=angle_tolerance(positions))
        longest, _ = tt.RotaryEmbedding.from_config(config).cos_sin(positions, seq_len=n)
        differs.append(not torch.equal(cos, longest))
    assert rope.seq_len_cached == 64  # never moved
    # A fresh "longest" module agrees with the stateless one on any first call.
    assert not any(differs)


def test_dynamic_choice_is_checked():
    with pytest.raises(ValueError, match="dynamic = 'grow' is not one of 'stateless', 'longest'"):
        tt.RotaryEmbedding(8, dynamic="grow")


# ---- M-RoPE: Qwen2-VL's sections and Qwen3-VL's interleaved layout ------------------


def mrope_positions(B=2, T=9):
    """(3, B, T) multimodal positions as Qwen2-VL's get_rope_index makes them:
    text tokens the same on the three axes, an image grid's (t, h, w) apart."""
    g = torch.Generator().manual_seed(26)
    p = torch.randint(0, 40, (3, B, T), generator=g)
    p[:, :, :2] = torch.arange(2)  # text: equal on all axes
    return p


@pytest.mark.parametrize("family", ["qwen2_vl", "qwen3_vl"])
def test_mrope_cos_sin_match_transformers(family):
    if family == "qwen2_vl":
        from transformers.models.qwen2_vl import configuration_qwen2_vl as c, modeling_qwen2_vl as m

        section, interleaved = [2, 3, 3], False
        config = c.Qwen2VLTextConfig(
            hidden_size=64, num_attention_heads=4, num_key_value_heads=4,
            rope_parameters={"rope_type": "default", "mrope_section": section, "rope_theta": 1000.0},
        )
        rotary = m.Qwen2VLRotaryEmbedding(config)
    else:
        from transformers.models.qwen3_vl import configuration_qwen3_vl as c, modeling_qwen3_vl as m

        section, interleaved = [4, 2, 2], True
        config = c.Qwen3VLTextConfig(
            hidden_size=64, num_attention_heads=4, num_key_value_heads=4, head_dim=16,
            rope_parameters={"rope_type": "default", "mrope_section": section, "mrope_interleaved": True,
                             "rope_theta": 1000.0},
        )
        rotary = m.Qwen3VLTextRotaryEmbedding(config)
    rope = tt.RotaryEmbedding.from_config(config)
    assert rope.mrope_section == section and rope.mrope_interleaved == interleaved
    positions = mrope_positions()
    x = torch.zeros(1, 1, 1, 16)
    want_cos, want_sin = rotary(x, positions)
    cos, sin = rope.cos_sin(positions)
    assert cos.shape == want_cos.shape == (2, 9, 16)
    tol = angle_tolerance(positions)
    torch.testing.assert_close(cos, want_cos, rtol=0, atol=tol)
    torch.testing.assert_close(sin, want_sin, rtol=0, atol=tol)
    # Each column is rope_cos_sin's value for its axis's positions, bit for bit.
    axes = tokpos.mrope_axes(section, 8, interleaved=interleaved)
    for a in range(3):
        ca, sa = tokpos.rope_cos_sin(positions[a], rope.inv_freq)
        cols = [j for j in range(16) if axes[j % 8] == a]
        assert cols
        assert torch.equal(cos[..., cols], ca[..., cols]) and torch.equal(sin[..., cols], sa[..., cols])
    # (B, T) positions are the same on the three axes, as transformers expands them.
    text = positions[0]
    assert torch.equal(rope.cos_sin(text)[0], tokpos.rope_cos_sin(text, rope.inv_freq)[0])
    want_text, _ = rotary(x, text[None].expand(3, -1, -1))
    torch.testing.assert_close(rope.cos_sin(text)[0], want_text, rtol=0, atol=angle_tolerance(text))


def test_mrope_axes_and_errors():
    assert tokpos.mrope_axes([2, 3, 3], 8) == [0, 0, 1, 1, 1, 2, 2, 2]
    assert tokpos.mrope_axes([4, 2, 2], 8, interleaved=True) == [0, 1, 2, 0, 1, 2, 0, 0]
    with pytest.raises(ValueError, match=r"sums to 7; the 8 frequencies need it to sum to 8"):
        tokpos.mrope_axes([2, 2, 3], 8)
    with pytest.raises(ValueError, match="must be 3 sizes"):
        tokpos.mrope_axes([4, 4], 8)
    with pytest.raises(ValueError, match=r"positions must be \(3, B, T\) or \(B, T\)"):
        tokpos.mrope_cos_sin(np.zeros((2, 2, 3), dtype=np.int64), np.ones(4), [2, 1, 1])
    with pytest.raises(ValueError, match="mrope_section"):
        tt.RotaryEmbedding(8, mrope_section=[1, 1, 1])


def test_heads_first_under_compile_fullgraph():
    inv = torch.from_numpy(tokpos.rope_frequencies(8)[0])
    q = data((2, 3, 5, 8), 9).requires_grad_()
    positions = torch.arange(5)[None]
    f = torch.compile(lambda q, p: tt.apply_rope(q, p, inv, heads_first=True) * 2, fullgraph=True)
    y = f(q, positions)
    assert torch.equal(y.detach(), tt.apply_rope(q.detach(), positions, inv, heads_first=True) * 2)
    g = data((2, 3, 5, 8), 10)
    y.backward(g)
    assert torch.equal(q.grad, tt.apply_rope(g, positions, inv, heads_first=True, inverse=True) * 2)


def test_from_config_reads_4x_rope_scaling_and_the_config_level_keys():
    from types import SimpleNamespace

    # A 4.x config: rope_scaling with the older "type" key, rope_theta and
    # partial_rotary_factor on the config itself, no head_dim.
    old = SimpleNamespace(
        hidden_size=64, num_attention_heads=4, rope_theta=5000.0, partial_rotary_factor=0.5,
        max_position_embeddings=32, rope_scaling={"type": "linear", "factor": 4.0},
    )
    rope = tt.RotaryEmbedding.from_config(old)
    inv, _ = tokpos.rope_frequencies(8, base=5000.0, scaling={"rope_type": "linear", "factor": 4.0})
    np.testing.assert_array_equal(rope.inv_freq.numpy(), inv)
    assert rope.rotary_dim == 8 and old.rope_scaling == {"type": "linear", "factor": 4.0}  # read, not changed
    # Phi-3 keeps original_max_position_embeddings on the config: it wins, as in transformers.
    phi3 = SimpleNamespace(
        hidden_size=64, num_attention_heads=4, max_position_embeddings=128, original_max_position_embeddings=32,
        rope_parameters={"rope_type": "longrope", "short_factor": [1.0] * 8, "long_factor": [2.0] * 8,
                         "original_max_position_embeddings": 16, "rope_theta": 10000.0},
    )
    rope = tt.RotaryEmbedding.from_config(phi3)
    assert rope.scaling["original_max_position_embeddings"] == 32
    assert rope.attention_factor == pytest.approx(float(np.sqrt(1 + np.log(128 / 32) / np.log(32))))
    nested = SimpleNamespace(hidden_size=64, num_attention_heads=4, layer_types=["full_attention"],
                             rope_parameters={"full_attention": {"rope_type": "default"}})
    with pytest.raises(ValueError, match="nested by layer type"):
        tt.RotaryEmbedding.from_config(nested)


@pytest.mark.parametrize("interleaved", [False, True])
def test_mrope_apply_is_transformers_rotation_with_mrope_cos_sin(interleaved):
    from transformers.models.qwen2_vl import modeling_qwen2_vl

    section = [4, 2, 2] if interleaved else [2, 3, 3]
    B, H, T, D = 2, 3, 9, 16
    inv, _ = tokpos.rope_frequencies(D, base=1000.0)
    positions = mrope_positions(B, T)
    cos, sin = tokpos.mrope_cos_sin(positions, inv, section, interleaved=interleaved)
    q, k = data((B, H, T, D), 11), data((B, H, T, D), 12)
    want_q, want_k = modeling_qwen2_vl.apply_rotary_pos_emb(q, k, cos, sin)
    kw = dict(mrope_section=section, mrope_interleaved=interleaved, heads_first=True)
    # The same float operations with the same cos and sin: the same bits.
    assert torch.equal(tt.apply_rope(q, positions, inv, **kw), want_q)
    assert torch.equal(tt.apply_rope(k, positions, inv, **kw), want_k)
    got_np = tokpos.apply_rope(q.numpy(), positions.numpy(), inv, **kw)
    np.testing.assert_array_equal(got_np, want_q.numpy())
    rope = tt.RotaryEmbedding(D, base=1000.0, mrope_section=section, mrope_interleaved=interleaved)
    assert torch.equal(rope(q, positions, heads_first=True), want_q)
    # Gradient: the transposed rotation.
    qg = q.clone().requires_grad_()
    g = data((B, H, T, D), 13)
    tt.apply_rope(qg, positions, inv, **kw).backward(g)
    assert torch.equal(qg.grad, tt.apply_rope(g, positions, inv, inverse=True, **kw))
    assert torch.equal(qg.grad, modeling_qwen2_vl.apply_rotary_pos_emb(g, g, cos, -sin)[0])


def test_mrope_apply_errors_leave_out_untouched():
    inv, _ = tokpos.rope_frequencies(16)
    x = data((2, 9, 3, 16), 14).numpy()
    positions = mrope_positions().numpy()
    out = np.full_like(x, 7.0)
    bad = positions.copy()
    bad[2, 1, 3] = -1  # the last axis: the first two calls would have succeeded
    with pytest.raises(IndexError, match="position -1"):
        tokpos.apply_rope(x, bad, inv, mrope_section=[2, 3, 3], out=out)
    assert (out == 7.0).all()
    with pytest.raises(ValueError, match=r"positions must be \(3, B, T\)"):
        tokpos.apply_rope(x, positions[0], inv, mrope_section=[2, 3, 3])
    with pytest.raises(ValueError, match="attention_factor = 1.5 with mrope_section"):
        tt.apply_rope(torch.from_numpy(x), torch.from_numpy(positions), inv, mrope_section=[2, 3, 3], attention_factor=1.5)
    tokpos.apply_rope(x, positions, inv, mrope_section=[2, 3, 3], out=out)
    np.testing.assert_array_equal(out, tokpos.apply_rope(x, positions, inv, mrope_section=[2, 3, 3]))
