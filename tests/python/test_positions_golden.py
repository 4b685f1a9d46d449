"""tokpos's ALiBi against BLOOM's, from tests/data/golden/alibi.json
(tools/make_rope_golden.py, transformers' modeling_bloom): no transformers
needed here.

BLOOM computes its slopes in float32: base = 2^(-8/n) rounded to float32,
then torch.pow(base, p) in float32 for the head's power p. tokpos computes
the same slopes in float64 from the exact formula. Rounding the base once
moves base^p by at most p * 2^-24 relative, and pow and the final rounding
add at most 2^-24 each, so BLOOM's slope lies within (p + 2) * 2^-24
relative of the exact one; where the base is a power of two (n <= 8) BLOOM's
slopes are exact and must equal tokpos's rounded to float32 bit for bit.
"""

import json
import math
import pathlib

import numpy as np
import pytest

import tokpos

GOLDEN = pathlib.Path(__file__).resolve().parents[1] / "data" / "golden" / "alibi.json"
U = 2.0**-24  # float32's unit roundoff


def _golden():
    return json.loads(GOLDEN.read_text())


def _powers(num_heads):
    """The exponent BLOOM raises each head's base to (the error bound's p)."""
    closest = 2 ** int(math.floor(math.log2(num_heads)))
    powers = list(range(1, closest + 1))
    extra = min(closest, num_heads - closest)
    powers += list(range(1, 2 * extra, 2))
    return np.asarray(powers, dtype=np.float64)


def test_golden_covers_the_head_counts():
    heads = [c["num_heads"] for c in _golden()["slopes"]]
    assert heads == [1, 2, 3, 5, 8, 12, 16, 24, 32, 40, 64, 112]
    assert len(_golden()["tensors"]) >= 1


@pytest.mark.parametrize("case", _golden()["slopes"], ids=lambda c: f"H{c['num_heads']}")
def test_slopes_match_bloom(case):
    n = case["num_heads"]
    bloom = np.asarray(case["slopes"], dtype=np.float64)
    ours = tokpos.alibi_slopes(n)
    assert ours.shape == (n,) and ours.dtype == np.float64
    rel = np.abs(ours - bloom) / ours
    bound = (_powers(n) + 2) * U
    assert np.all(rel <= bound), (n, rel.max(), bound[np.argmax(rel - bound)])
    if n <= 8:  # base 2^(-8/closest) is a power of two: BLOOM's float32 slopes are exact
        np.testing.assert_array_equal(ours.astype(np.float32), bloom.astype(np.float32))


def test_slopes_differ_from_a_wrong_head_count():
    """The comparison can tell head counts apart (the interleave matters)."""
    bloom12 = np.asarray(next(c for c in _golden()["slopes"] if c["num_heads"] == 12)["slopes"])
    assert not np.allclose(tokpos.alibi_slopes(12)[8:], tokpos.alibi_slopes(16)[8:12])
    assert np.max(np.abs(tokpos.alibi_slopes(12) - bloom12) / bloom12) < 1e-6


def _bloom_from_tokpos(mask, num_heads):
    """BLOOM's build_alibi_tensor (B, H, S) from tokpos: slope_h * k_j with the
    key positions k = (cumsum(mask) - 1) * mask, which is
    position_ids_from_mask(mask) * mask (pads: 1 * 0), and slope * k taken
    from tokpos.alibi_bias's symmetric mode with the query at 0
    (-slope * |0 - k|)."""
    slopes = tokpos.alibi_slopes(num_heads)
    keys = tokpos.position_ids_from_mask(mask) * mask
    out = np.empty((mask.shape[0], num_heads, mask.shape[1]), dtype=np.float32)
    for b in range(mask.shape[0]):
        bias = tokpos.alibi_bias(slopes, np.zeros(1, dtype=np.int64), keys[b], mode="symmetric")
        out[b] = -bias[:, 0, :]
    return out, keys


@pytest.mark.parametrize("case", _golden()["tensors"], ids=lambda c: f"H{c['num_heads']}")
def test_build_alibi_tensor_matches(case):
    n = case["num_heads"]
    mask = np.asarray(case["attention_mask"], dtype=np.int64)
    bloom = np.asarray(case["alibi"], dtype=np.float64)
    assert bloom.shape == (mask.shape[0], n, mask.shape[1])
    ours, keys = _bloom_from_tokpos(mask, n)
    # BLOOM rounds float32 slope * k once more: (p + 3) * 2^-24 relative per head.
    bound = ((_powers(n) + 3) * U)[None, :, None] * np.abs(ours.astype(np.float64))
    assert np.all(np.abs(ours - bloom) <= bound), np.abs(ours - bloom).max()
    # Pads carry 0 in BLOOM's tensor, and so in the reconstruction.
    assert np.all(bloom[np.broadcast_to((mask == 0)[:, None, :], bloom.shape)] == 0)
    assert np.all(keys[mask == 0] == 0)


@pytest.mark.parametrize("case", _golden()["tensors"], ids=lambda c: f"H{c['num_heads']}")
def test_bloom_and_causal_bias_give_the_same_attention(case):
    """docs/positions.md: BLOOM adds m * k, tokpos's causal mode m * (k - q);
    they differ by -m * q along a query row, which softmax cancels. For each
    real query, over the real keys at or before it, the softmax of BLOOM's row
    equals the softmax of tokpos.alibi_bias's causal row."""
    n = case["num_heads"]
    mask = np.asarray(case["attention_mask"], dtype=np.int64)
    bloom = np.asarray(case["alibi"], dtype=np.float64)
    positions = tokpos.position_ids_from_mask(mask)
    slopes = tokpos.alibi_slopes(n)
    checked = 0
    for b in range(mask.shape[0]):
        real = np.flatnonzero(mask[b])
        pos = positions[b, real]
        causal = tokpos.alibi_bias(slopes, pos, pos, mode="causal").astype(np.float64)  # (H, R, R)
        for i in range(len(real)):
            keys = real[: i + 1]
            a = bloom[b][:, keys]
            a = np.exp(a - a.max(axis=1, keepdims=True))
            a /= a.sum(axis=1, keepdims=True)
            c = causal[:, i, : i + 1]
            assert np.all(np.isfinite(c))
            assert np.all(np.isneginf(causal[:, i, i + 1:]))
            c = np.exp(c - c.max(axis=1, keepdims=True))
            c /= c.sum(axis=1, keepdims=True)
            np.testing.assert_allclose(a, c, rtol=1e-5, atol=1e-7)
            checked += 1
    assert checked > 0
