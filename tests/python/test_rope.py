"""tokpos RoPE against float64 numpy references: transformers'
modeling_rope_utils formulas written out here for every rope type."""

from __future__ import annotations

import json
import math
import pathlib
from fractions import Fraction

import numpy as np
import pytest

import tokpos


# ---- float64 references of transformers' ROPE_INIT_FUNCTIONS ----------------


def ref_default(dim, base):
    return 1.0 / base ** (np.arange(0, dim, 2, dtype=np.float64) / dim)


def ref_dynamic(dim, base, factor, max_pos, seq_len):
    seq_len = seq_len if seq_len is not None and seq_len > max_pos else max_pos
    base = base * ((factor * seq_len / max_pos) - (factor - 1)) ** (dim / (dim - 2))
    return ref_default(dim, base)


def ref_yarn(dim, base, cfg):
    original = cfg.get("original_max_position_embeddings", cfg["max_position_embeddings"])
    factor = cfg.get("factor")
    if factor is None:
        factor = cfg["max_position_embeddings"] / original

    def get_mscale(scale, mscale=1):
        return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0

    attention_factor = cfg.get("attention_factor")
    if attention_factor is None:
        if cfg.get("mscale") and cfg.get("mscale_all_dim"):
            attention_factor = get_mscale(factor, cfg["mscale"]) / get_mscale(factor, cfg["mscale_all_dim"])
        else:
            attention_factor = get_mscale(factor)
    beta_fast = cfg.get("beta_fast") or 32
    beta_slow = cfg.get("beta_slow") or 1

    def correction_dim(rot):
        return (dim * math.log(original / (rot * 2 * math.pi))) / (2 * math.log(base))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if cfg.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(dim // 2, dtype=np.float64) - low) / (high - low), 0, 1)
    pos_freqs = base ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
    extrapolation_factor = 1 - ramp
    inv = (1.0 / (factor * pos_freqs)) * (1 - extrapolation_factor) + (1.0 / pos_freqs) * extrapolation_factor
    return inv, attention_factor


def ref_longrope(dim, base, cfg, seq_len):
    original = cfg.get("original_max_position_embeddings", cfg["max_position_embeddings"])
    factor = cfg.get("factor")
    if factor is None:
        factor = cfg["max_position_embeddings"] / original
    attention_factor = cfg.get("attention_factor")
    if attention_factor is None:
        attention_factor = 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(original))
    ext = np.asarray(cfg["long_factor"] if seq_len and seq_len > original else cfg["short_factor"], np.float64)
    return 1.0 / (ext * base ** (np.arange(0, dim, 2, dtype=np.float64) / dim)), attention_factor


def ref_llama3(dim, base, cfg):
    inv = ref_default(dim, base)
    factor, low, high = cfg["factor"], cfg["low_freq_factor"], cfg["high_freq_factor"]
    old = cfg["original_max_position_embeddings"]
    wavelen = 2 * math.pi / inv
    out = np.where(wavelen > old / low, inv / factor, inv)
    smooth = (old / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * out / factor + smooth * out
    medium = ~(wavelen < old / high) & ~(wavelen > old / low)
    return np.where(medium, smoothed, out)


def close(got, want, rtol=1e-13):
    np.testing.assert_allclose(got, want, rtol=rtol, atol=0)


def test_default_and_linear():
    for dim in (2, 8, 64, 128):
        for base in (10000.0, 500000.0, 1e6):
            inv, af = tokpos.rope_frequencies(dim, base=base)
            assert inv.dtype == np.float64 and inv.shape == (dim // 2,)
            close(inv, ref_default(dim, base))
            assert af == 1.0
            inv, af = tokpos.rope_frequencies(dim, base=base, scaling={"type": "linear", "factor": 4.0})
            close(inv, ref_default(dim, base) / 4.0)
    inv, _ = tokpos.rope_frequencies(64, scaling={"rope_type": "default", "rope_theta": 500000.0})
    close(inv, ref_default(64, 500000.0))


@pytest.mark.parametrize("seq_len", [None, 10, 4096, 9000])
def test_dynamic(seq_len):
    cfg = {"rope_type": "dynamic", "factor": 2.0, "max_position_embeddings": 4096}
    inv, af = tokpos.rope_frequencies(128, base=10000.0, scaling=cfg, seq_len=seq_len)
    close(inv, ref_dynamic(128, 10000.0, 2.0, 4096, seq_len))
    assert af == 1.0


YARN_CONFIGS = [
    {"rope_type": "yarn", "factor": 4.0, "max_position_embeddings": 32768},  # Qwen2.5 long context
    {"rope_type": "yarn", "factor": 4.0, "max_position_embeddings": 32768, "truncate": False},
    {"type": "yarn", "factor": 2.0, "max_position_embeddings": 4096, "beta_fast": 0, "beta_slow": None},
    {  # DeepSeek-V3
        "type": "yarn",
        "factor": 40,
        "original_max_position_embeddings": 4096,
        "max_position_embeddings": 163840,
        "beta_fast": 32,
        "beta_slow": 1,
        "mscale": 1.0,
        "mscale_all_dim": 1.0,
    },
    {"rope_type": "yarn", "factor": 8.0, "max_position_embeddings": 8192, "mscale": 0.707, "mscale_all_dim": 1.0},
    {"rope_type": "yarn", "factor": 8.0, "max_position_embeddings": 8192, "attention_factor": 0.9},
    # factor given and unlike the ratio of the lengths: the factor wins
    {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 4096, "max_position_embeddings": 163840},
    # no factor: the ratio of the lengths
    {"rope_type": "yarn", "original_max_position_embeddings": 4096, "max_position_embeddings": 65536},
]


@pytest.mark.parametrize("cfg", YARN_CONFIGS)
@pytest.mark.parametrize("dim,base", [(64, 10000.0), (128, 1e6)])
def test_yarn(cfg, dim, base):
    inv, af = tokpos.rope_frequencies(dim, base=base, scaling=cfg)
    want, want_af = ref_yarn(dim, base, cfg)
    close(inv, want)
    assert af == pytest.approx(want_af, rel=1e-15)


@pytest.mark.parametrize("seq_len", [None, 4096, 4097, 100000])
@pytest.mark.parametrize("with_original", [True, False, "and factor"])
def test_longrope(seq_len, with_original):
    dim = 96  # Phi-3-mini's head dim
    rng = np.random.default_rng(3)
    cfg = {
        "type": "longrope",
        "short_factor": list(1 + rng.random(dim // 2) * 0.1),
        "long_factor": list(1 + rng.random(dim // 2) * 30),
        "max_position_embeddings": 131072,
    }
    if with_original:
        cfg["original_max_position_embeddings"] = 4096
        if with_original == "and factor":
            cfg["factor"] = 2.0
    else:
        cfg["max_position_embeddings"] = 4096
        cfg["factor"] = 32.0
    inv, af = tokpos.rope_frequencies(dim, scaling=cfg, seq_len=seq_len)
    want, want_af = ref_longrope(dim, 10000.0, cfg, seq_len)
    close(inv, want)
    assert af == pytest.approx(want_af, rel=1e-15)


def test_llama3():
    cfg = {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    }
    for dim in (64, 128):
        inv, af = tokpos.rope_frequencies(dim, base=500000.0, scaling=cfg)
        close(inv, ref_llama3(dim, 500000.0, cfg))
        assert af == 1.0


@pytest.mark.parametrize(
    "kwargs,needle",
    [
        ({"dim": 7}, "dim = 7"),
        ({"dim": 0}, "dim = 0"),
        ({"dim": 8, "base": 0.0}, "base = 0"),
        ({"dim": 8, "base": float("nan")}, "base = nan"),
        ({"dim": 8, "base": float("inf")}, "base = inf"),
        ({"dim": 8, "scaling": {"type": "ntk-by-parts"}}, "'ntk-by-parts' is not one of"),
        ({"dim": 8, "scaling": {"factor": 2.0}}, "no 'rope_type'"),
        ({"dim": 8, "scaling": {"type": "linear"}}, "linear scaling needs 'factor'"),
        ({"dim": 8, "scaling": {"type": "linear", "factor": -1.0}}, "factor = -1"),
        ({"dim": 8, "scaling": {"type": "linear", "factor": float("inf")}}, "factor = inf"),
        ({"dim": 8, "scaling": {"type": "linear", "factor": "2"}}, "scaling['factor'] = '2' must be a number"),
        ({"dim": 8, "scaling": {"type": "dynamic", "factor": 2.0}}, "needs 'max_position_embeddings'"),
        (
            {"dim": 8, "scaling": {"type": "yarn", "factor": 2.0, "max_position_embeddings": 64, "beta_fast": 1.0,
                                    "beta_slow": 2.0}},
            "beta_fast = 1 must be > beta_slow = 2",
        ),
        (
            {"dim": 8, "scaling": {"type": "longrope", "factor": 2.0, "max_position_embeddings": 64,
                                    "short_factor": [1.0] * 4, "long_factor": [1.0] * 5}},
            "long_factor has 5 entries; dim / 2 = 4",
        ),
        (
            {"dim": 8, "scaling": {"type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0}},
            "needs 'original_max_position_embeddings'",
        ),
        ({"dim": 8, "scaling": {"type": "yarn", "factor": 2.0, "max_position_embeddings": 64, "truncate": 1}},
         "truncate"),
        ({"dim": 8, "seq_len": -2}, "seq_len = -2"),
        ({"dim": 8, "base": 500000.0, "scaling": {"type": "default", "rope_theta": 10000.0}}, "disagrees"),
    ],
)
def test_bad_inputs(kwargs, needle):
    dim = kwargs.pop("dim")
    with pytest.raises(ValueError, match=None) as info:
        tokpos.rope_frequencies(dim, **kwargs)
    assert needle in str(info.value)


# ---- Application: float64 references of the rotation -------------------------

PI = Fraction("3.14159265358979323846264338327950288419716939937510582097494459")


def ref_rotate(x, positions, inv_freq, layout, rotary_dim=None, attention_factor=1.0, inverse=False):
    """transformers' q * cos + rotate_half(q) * sin (half) or Meta's complex
    product (interleaved), in float64 with float64 angles reduced exactly
    enough for positions below 2^31 (p * w split so its products are exact)."""
    x = np.asarray(x, dtype=np.float64)
    inv = np.asarray(inv_freq, dtype=np.float64)
    half = inv.shape[0]
    p = np.asarray(positions, dtype=np.int64)
    # angle = p * w mod 2 pi, exactly, with fractions (w is exact as a
    # float64; pi to 62 digits), then cos and sin of the reduced angle.
    turns = [Fraction(float(w)) / (2 * PI) for w in inv]
    frac = np.empty(p.shape + (half,))
    for idx in np.ndindex(*p.shape):
        for i, t in enumerate(turns):
            f = int(p[idx]) * t
            frac[idx + (i,)] = float(f - round(f))
    angle = 2 * np.pi * frac
    cos, sin = np.cos(angle) * attention_factor, np.sin(angle) * attention_factor
    if inverse:
        sin = -sin
    cos, sin = cos[..., None, :], sin[..., None, :]  # broadcast over heads
    out = x.copy()
    if layout == "half":
        x1, x2 = x[..., :half], x[..., half : 2 * half]
        out[..., :half] = x1 * cos - x2 * sin
        out[..., half : 2 * half] = x2 * cos + x1 * sin
    else:
        x1, x2 = x[..., 0 : 2 * half : 2], x[..., 1 : 2 * half : 2]
        out[..., 0 : 2 * half : 2] = x1 * cos - x2 * sin
        out[..., 1 : 2 * half : 2] = x2 * cos + x1 * sin
    return out


def _data(shape, seed):
    return np.random.default_rng(seed).uniform(-2, 2, size=shape).astype(np.float32)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("rotary", [64, 32])
def test_apply_against_float64(layout, rotary):
    B, T, H, D = 2, 11, 3, 64
    x = _data((B, T, H, D), 1)
    rng = np.random.default_rng(2)
    positions = rng.integers(0, 2**31, size=(B, T), dtype=np.int64)
    positions[0, :5] = np.arange(5)
    inv, _ = tokpos.rope_frequencies(rotary, base=500000.0)
    out = tokpos.apply_rope(x, positions, inv, layout=layout, attention_factor=1.05)
    assert isinstance(out, np.ndarray) and out.dtype == np.float32 and out.shape == x.shape
    want = ref_rotate(x, positions, inv, layout, attention_factor=1.05)
    scale = np.abs(x).max()
    np.testing.assert_allclose(out, want, rtol=0, atol=8 * 2.0**-24 * scale * 1.05)
    np.testing.assert_array_equal(out[..., rotary:], x[..., rotary:])


def test_inverse_in_place_and_unbatched():
    T, H, D = 7, 2, 32
    x = _data((T, H, D), 3)
    positions = np.array([0, 1, 5, 1000, 65535, 2**30, 2**31 - 1], dtype=np.int32)
    inv, _ = tokpos.rope_frequencies(D)
    y = tokpos.apply_rope(x, positions, inv)
    back = tokpos.apply_rope(y, positions, inv, inverse=True)
    np.testing.assert_allclose(back, x, rtol=0, atol=8 * 2.0**-24 * 2)
    z = x.copy()
    assert tokpos.apply_rope(z, positions, inv, out=z) is z
    np.testing.assert_array_equal(z, y)


def test_apply_bad_inputs():
    x = _data((2, 3, 2, 8), 4)
    pos = np.zeros((2, 3), dtype=np.int64)
    inv, _ = tokpos.rope_frequencies(8)
    with pytest.raises(ValueError, match="layout"):
        tokpos.apply_rope(x, pos, inv, layout="neox")
    with pytest.raises(ValueError, match="rotary_dim = 6 must be 2 \\* len\\(inv_freq\\) = 8"):
        tokpos.apply_rope(x, pos, inv, rotary_dim=6)
    with pytest.raises(ValueError, match="attention_factor = 0"):
        tokpos.apply_rope(x, pos, inv, attention_factor=0.0)
    with pytest.raises(IndexError, match="position -3 at \\(b=1, t=2\\)"):
        bad = pos.copy()
        bad[1, 2] = -3
        tokpos.apply_rope(x, bad, inv)
    with pytest.raises(ValueError, match="positions"):
        tokpos.apply_rope(x, pos[0], inv)
    out = np.zeros_like(x)
    out.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        tokpos.apply_rope(x, pos, inv, out=out)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_cos_sin_layout(layout):
    positions = np.array([[0, 1, 2, 3], [7, 100, 2**20, 2**31 - 1]], dtype=np.int64)
    inv, _ = tokpos.rope_frequencies(16)
    cos, sin = tokpos.rope_cos_sin(positions, inv, layout=layout, attention_factor=0.5)
    assert cos.shape == (2, 4, 16) and cos.dtype == np.float32
    ones = np.zeros((2, 4, 1, 16), dtype=np.float64)
    if layout == "half":
        ones[..., :8] = 1
        c = ref_rotate(ones, positions, inv, "half", attention_factor=0.5)[:, :, 0]
        want_cos, want_sin = np.concatenate([c[..., :8]] * 2, -1), np.concatenate([c[..., 8:]] * 2, -1)
    else:
        ones[..., 0::2] = 1
        c = ref_rotate(ones, positions, inv, "interleaved", attention_factor=0.5)[:, :, 0]
        want_cos, want_sin = np.repeat(c[..., 0::2], 2, -1), np.repeat(c[..., 1::2], 2, -1)
    np.testing.assert_allclose(cos, want_cos, rtol=0, atol=2.0**-25 + 1e-12)
    np.testing.assert_allclose(sin, want_sin, rtol=0, atol=2.0**-25 + 1e-12)


# ---- torch: transformers' rotate_half formula in float64 ------------------------


def test_torch_matches_rotate_half_in_float64():
    torch = pytest.importorskip("torch")

    def rotate_half(q):
        q1, q2 = q[..., : q.shape[-1] // 2], q[..., q.shape[-1] // 2 :]
        return torch.cat((-q2, q1), dim=-1)

    B, T, H, D = 2, 9, 4, 32
    q = torch.from_numpy(_data((B, T, H, D), 5))
    positions = torch.arange(T, dtype=torch.int64).expand(B, T).contiguous() * 1000
    inv, af = tokpos.rope_frequencies(D, base=10000.0)
    out = tokpos.apply_rope(q, positions, inv)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float32
    # transformers' LlamaRotaryEmbedding and apply_rotary_pos_emb, in float64
    # (positions * 1000 < 2^24: the float64 product loses nothing that matters).
    freqs = positions.double()[..., None] * torch.from_numpy(inv)[None, None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos()[:, :, None, :], emb.sin()[:, :, None, :]
    want = q.double() * cos + rotate_half(q.double()) * sin
    torch.testing.assert_close(out.double(), want, rtol=0, atol=8 * 2.0**-24 * 2)
    for dtype in (torch.bfloat16, torch.float16):
        qd = q.to(dtype)
        got = tokpos.apply_rope(qd, positions, inv)
        assert got.dtype == dtype
        want16 = (qd.double() * cos + rotate_half(qd.double()) * sin).to(dtype)
        eps = 2.0**-8 if dtype == torch.bfloat16 else 2.0**-11
        torch.testing.assert_close(got.double(), want16.double(), rtol=0, atol=4 * eps * 2)
    cos_t, sin_t = tokpos.rope_cos_sin(positions, inv, dtype="bfloat16")
    assert cos_t.dtype == torch.bfloat16 and cos_t.shape == (B, T, D)
    torch.testing.assert_close(cos_t.double(), emb.cos().to(torch.bfloat16).double(), rtol=0, atol=2.0**-8)


# ---- Golden vectors from transformers (tools/make_rope_golden.py) -------------

GOLDEN = pathlib.Path(__file__).resolve().parents[1] / "data" / "golden" / "rope.json"


def _golden():
    return json.loads(GOLDEN.read_text())


@pytest.mark.parametrize("case", _golden()["frequencies"], ids=lambda c: f"{c['scaling']['rope_type']}-{c['seq_len']}")
def test_frequencies_match_transformers(case):
    inv, af = tokpos.rope_frequencies(case["dim"], base=case["base"], scaling=case["scaling"], seq_len=case["seq_len"])
    # transformers computes in float32: a few float32 ulps apart.
    np.testing.assert_allclose(inv, case["inv_freq"], rtol=2e-6, atol=0)
    assert af == pytest.approx(case["attention_factor"], rel=1e-7)


def test_apply_matches_transformers_llama():
    case = _golden()["apply"][0]
    x = np.asarray(case["x"], dtype=np.float32)
    out = tokpos.apply_rope(x, np.asarray(case["positions"], dtype=np.int64), case["inv_freq"], layout=case["layout"])
    # Positions below 256: transformers' float32 angles are off by at most 256 * 2^-24 rad.
    np.testing.assert_allclose(out, np.asarray(case["out"], dtype=np.float32), rtol=0, atol=2e-5)


def test_transposed_views_and_in_place_on_them():
    q = _data((2, 4, 6, 16), 8)  # (B, H, T, D), as transformers holds q
    positions = np.arange(6, dtype=np.int64)[None].repeat(2, 0) * 977
    inv, _ = tokpos.rope_frequencies(16)
    view = q.transpose(0, 2, 1, 3)  # (B, T, H, D), strided
    want = ref_rotate(view, positions, inv, "half")
    out = tokpos.apply_rope(view, positions, inv)
    np.testing.assert_allclose(out, want, rtol=0, atol=8 * 2.0**-24 * 2)
    tokpos.apply_rope(view, positions, inv, out=view)
    np.testing.assert_array_equal(q.transpose(0, 2, 1, 3), out)


@pytest.mark.parametrize(
    "scaling",
    [
        {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096},
        # --dim is the head dimension here, as rope_frequencies' dim with partial_rotary_factor in the dict.
        {"rope_type": "proportional", "factor": 8.0, "partial_rotary_factor": 0.25},
    ],
    ids=["yarn", "proportional"],
)
@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_cli_rope_caches_are_rope_cos_sin(cli, tmp_path, layout, scaling):
    """`tokpos rope` writes the values tokpos.rope_cos_sin returns, bit for bit,
    and the inv_freq of rope_frequencies (one angle implementation for both)."""
    import subprocess

    out = tmp_path / "r.npy"
    r = subprocess.run(
        [str(cli), "rope", "--dim", "64", "--base", "500000", "--positions", "100000:100040",
         "--layout", layout, "--scaling", json.dumps(scaling), "--out", str(out)],
        capture_output=True, text=True, timeout=60,
    )
    assert r.returncode == 0, r.stderr
    inv_freq, factor = tokpos.rope_frequencies(64, base=500000.0, scaling=scaling)
    np.testing.assert_array_equal(np.load(tmp_path / "r.inv_freq.npy"), inv_freq)
    cos, sin = tokpos.rope_cos_sin(np.arange(100000, 100040), inv_freq, layout=layout, attention_factor=factor)
    cs = np.load(out)
    assert cs.shape == (2, 40, 64) and cs.dtype == np.float32
    np.testing.assert_array_equal(cs[0], cos)
    np.testing.assert_array_equal(cs[1], sin)
