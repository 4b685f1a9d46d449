"""tokpos position ids and ALiBi against references written here: the
transformers / flash-attn formulas in numpy, the ALiBi paper's get_slopes in
pure Python (float64), MPT's gen_slopes and ggml's slopes in float64, and the
bias as a float64 loop rounded once by numpy (or torch for bfloat16)."""

import math

import numpy as np
import pytest

import tokpos


# ---- references ----


def hf_mask_positions(mask, new, pad=0):
    """transformers' generation: cumsum - 1, masked_fill(mask == 0, pad)
    (0 in transformers 5.x, 1 in 4.x)."""
    mask = np.asarray(mask, dtype=np.int64)
    pos = np.cumsum(mask, axis=-1) - 1
    pos[mask == 0] = pad
    return pos[:, mask.shape[1] - new:]


def hf_roberta_positions(ids, pad, past):
    """transformers' create_position_ids_from_input_ids."""
    m = (np.asarray(ids) != pad).astype(np.int64)
    return (np.cumsum(m, axis=-1) + past) * m + pad


def packed_reference(cu, start):
    out = []
    for a, b in zip(cu[:-1], cu[1:]):
        out.extend(range(start, start + b - a))
    return np.array(out, dtype=np.int64)


def paper_get_slopes(n):
    """ofirpress/attention_with_linear_biases, written out."""

    def get_slopes_power_of_2(n):
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        ratio = start
        return [start * ratio**i for i in range(n)]

    if math.log2(n).is_integer():
        return get_slopes_power_of_2(n)
    closest_power_of_2 = 2 ** math.floor(math.log2(n))
    return get_slopes_power_of_2(closest_power_of_2) + paper_get_slopes(2 * closest_power_of_2)[0::2][: n - closest_power_of_2]


def mpt_gen_slopes(n_heads, alibi_bias_max):
    """MPT's gen_slopes in float64."""
    _n_heads = 2 ** math.ceil(math.log2(n_heads))
    m = np.arange(1, _n_heads + 1, dtype=np.float64) * (alibi_bias_max / _n_heads)
    slopes = 1.0 / np.power(2.0, m)
    if _n_heads != n_heads:
        slopes = np.concatenate([slopes[1::2], slopes[::2]])[:n_heads]
    return slopes


def ggml_slopes(n_head, max_bias):
    """ggml's soft_max ALiBi slopes in float64."""
    n_head_log2 = 2 ** math.floor(math.log2(n_head))
    m0 = 2.0 ** (-max_bias / n_head_log2)
    m1 = 2.0 ** (-max_bias / 2.0 / n_head_log2)
    return np.array([m0 ** (h + 1) if h < n_head_log2 else m1 ** (2 * (h - n_head_log2) + 1) for h in range(n_head)])


def bias_reference(slopes, q, k, mode):
    out = np.empty((len(slopes), len(q), len(k)), dtype=np.float64)
    for h, m in enumerate(slopes):
        for i, qi in enumerate(q):
            for j, kj in enumerate(k):
                if mode == "causal":
                    out[h, i, j] = m * (kj - qi) if kj <= qi else -math.inf
                else:
                    out[h, i, j] = -m * abs(qi - kj)
    return out


# ---- position ids ----


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.bool_])
def test_mask_positions_match_transformers(dtype):
    rng = np.random.default_rng(1)
    for _ in range(20):
        b, s = rng.integers(1, 5), rng.integers(1, 10)
        mask = rng.integers(0, 2, size=(b, s)).astype(dtype)
        for new in (None, 0, 1, s):
            got = tokpos.position_ids_from_mask(mask, new)
            want = hf_mask_positions(mask, s if new is None else new)
            assert got.dtype == np.int64
            np.testing.assert_array_equal(got, want)


def test_mask_positions_by_hand():
    mask = [[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]]
    np.testing.assert_array_equal(tokpos.position_ids_from_mask(np.array(mask)), [[0, 0, 0, 1, 2], [0, 1, 2, 3, 4]])
    np.testing.assert_array_equal(
        tokpos.position_ids_from_mask(np.array(mask), pad_value=1), [[1, 1, 0, 1, 2], [0, 1, 2, 3, 4]]
    )
    np.testing.assert_array_equal(tokpos.position_ids_from_mask(np.array(mask), num_new_tokens=1), [[2], [4]])


@pytest.mark.parametrize("value", [2, -1])
def test_mask_values_outside_0_1_name_value_and_place(value):
    mask = np.ones((2, 4), dtype=np.int64)
    mask[1, 2] = value
    with pytest.raises(ValueError, match=rf"attention_mask value {value} at \(b=1, s=2\)"):
        tokpos.position_ids_from_mask(mask)


def test_mask_bad_shapes_and_counts():
    with pytest.raises(ValueError, match="2-D"):
        tokpos.position_ids_from_mask(np.ones(4, dtype=np.int64))
    with pytest.raises(ValueError, match="num_new_tokens = 5 must be <= S = 4"):
        tokpos.position_ids_from_mask(np.ones((1, 4), dtype=np.int64), 5)
    with pytest.raises(ValueError, match="num_new_tokens = -1"):
        tokpos.position_ids_from_mask(np.ones((1, 4), dtype=np.int64), -1)


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_roberta_positions_match_transformers(dtype):
    rng = np.random.default_rng(2)
    for _ in range(20):
        ids = rng.integers(0, 4, size=(rng.integers(1, 4), rng.integers(0, 9))).astype(dtype)
        pad, past = int(rng.integers(0, 3)), int(rng.integers(0, 5))
        got = tokpos.roberta_position_ids(ids, pad, past)
        np.testing.assert_array_equal(got, hf_roberta_positions(ids, pad, past))
    np.testing.assert_array_equal(tokpos.roberta_position_ids(np.array([0, 5, 6, 1, 1]), 1), [2, 3, 4, 1, 1])


def test_roberta_bad_arguments():
    with pytest.raises(ValueError, match="padding_idx = -1"):
        tokpos.roberta_position_ids(np.zeros(3, dtype=np.int64), -1)
    with pytest.raises(ValueError, match="past_length = -4"):
        tokpos.roberta_position_ids(np.zeros(3, dtype=np.int64), 1, -4)


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_packed_positions_and_their_inverse(dtype):
    rng = np.random.default_rng(3)
    for _ in range(20):
        lengths = rng.integers(1, 7, size=rng.integers(1, 6))
        cu = np.concatenate([[0], np.cumsum(lengths)]).astype(dtype)
        for start in (0, 3):
            got = tokpos.packed_position_ids(cu, start)
            assert got.dtype == np.int64
            np.testing.assert_array_equal(got, packed_reference(cu.tolist(), start))
        back = tokpos.cu_seqlens_from_position_ids(tokpos.packed_position_ids(cu))
        assert back.dtype == np.int32
        np.testing.assert_array_equal(back, cu)


def test_packed_by_hand_and_empty_documents():
    np.testing.assert_array_equal(tokpos.packed_position_ids(np.array([0, 3, 3, 5])), [0, 1, 2, 0, 1])
    assert tokpos.packed_position_ids(np.array([0])).shape == (0,)
    # A document starts wherever the position does not grow by one.
    np.testing.assert_array_equal(tokpos.cu_seqlens_from_position_ids(np.array([0, 1, 2, 0, 1, 5, 6, 0])), [0, 3, 5, 7, 8])
    np.testing.assert_array_equal(tokpos.cu_seqlens_from_position_ids(np.array([[3, 4, 3]])), [0, 2, 3])
    np.testing.assert_array_equal(tokpos.cu_seqlens_from_position_ids(np.zeros(0, dtype=np.int64)), [0])


def test_bad_cu_seqlens_name_index_and_values():
    with pytest.raises(ValueError, match=r"cu_seqlens decreases at index 2: cu_seqlens\[1\] = 4 > cu_seqlens\[2\] = 2"):
        tokpos.packed_position_ids(np.array([0, 4, 2, 5]))
    with pytest.raises(ValueError, match=r"cu_seqlens\[0\] = 1 must be 0"):
        tokpos.packed_position_ids(np.array([1, 4], dtype=np.int32))
    with pytest.raises(ValueError, match="cu_seqlens is empty"):
        tokpos.packed_position_ids(np.zeros(0, dtype=np.int64))
    with pytest.raises(ValueError, match="start = -1"):
        tokpos.packed_position_ids(np.array([0, 2]), -1)


# ---- ALiBi ----


@pytest.mark.parametrize("n", list(range(1, 70)) + [80, 96, 100, 128])
def test_slopes_equal_the_papers_get_slopes(n):
    got = tokpos.alibi_slopes(n)
    assert got.dtype == np.float64 and got.shape == (n,)
    assert got.tolist() == paper_get_slopes(n)


@pytest.mark.parametrize("max_bias", [1.0, 4.0, 8.0, 12.5, 16.0])
@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 12, 20, 32, 40, 48])
def test_slopes_follow_mpt_and_ggml(n, max_bias):
    got = tokpos.alibi_slopes(n, max_bias)
    np.testing.assert_allclose(got, mpt_gen_slopes(n, max_bias), rtol=1e-14, atol=0)
    np.testing.assert_allclose(got, ggml_slopes(n, max_bias), rtol=1e-14, atol=0)


def test_bad_slope_arguments():
    for n in (0, -2):
        with pytest.raises(ValueError, match=f"num_heads = {n} must be >= 1"):
            tokpos.alibi_slopes(n)
    for b, shown in ((0.0, "0"), (-1.0, "-1"), (math.nan, "nan"), (math.inf, "inf")):
        with pytest.raises(ValueError, match=f"max_bias = {shown} must be finite and > 0"):
            tokpos.alibi_slopes(8, b)


@pytest.mark.parametrize("mode", ["causal", "symmetric"])
@pytest.mark.parametrize("pdtype", [np.int32, np.int64])
def test_bias_float32_and_float16_round_the_float64_reference(mode, pdtype):
    slopes = tokpos.alibi_slopes(12)
    q = np.array([0, 3, 7, 100, 2047], dtype=pdtype)
    k = np.array([0, 1, 7, 99, 2047, 3000], dtype=pdtype)
    want = bias_reference(slopes.tolist(), q.tolist(), k.tolist(), mode)
    for dtype, np_dtype in (("float32", np.float32), ("float16", np.float16)):
        got = tokpos.alibi_bias(slopes, q, k, mode=mode, dtype=dtype)
        assert got.dtype == np_dtype and got.shape == (12, 5, 6)
        np.testing.assert_array_equal(got, want.astype(np_dtype))  # numpy rounds float64 once


def test_bias_by_hand_and_in_place():
    out = np.full((2, 2, 3), 7.0, dtype=np.float32)
    res = tokpos.alibi_bias([0.5, 0.25], [0, 2], [0, 1, 2], out=out)
    assert res is out
    inf = math.inf
    np.testing.assert_array_equal(out, [[[0, -inf, -inf], [-1, -0.5, 0]], [[0, -inf, -inf], [-0.5, -0.25, 0]]])
    tokpos.alibi_bias([0.5, 0.25], [0, 2], [0, 1, 2], mode="symmetric", out=out)
    np.testing.assert_array_equal(out, [[[0, -0.5, -1], [-1, -0.5, 0]], [[0, -0.25, -0.5], [-0.5, -0.25, 0]]])


def test_bad_bias_arguments_write_nothing():
    out = np.full((2, 2, 2), 7.0, dtype=np.float32)
    with pytest.raises(ValueError, match=r"q_positions\[1\] = -3 is negative"):
        tokpos.alibi_bias([0.5, 0.25], np.array([0, -3]), np.array([0, 1]), out=out)
    with pytest.raises(ValueError, match=r"k_positions\[0\] = -1 is negative"):
        tokpos.alibi_bias([0.5, 0.25], np.array([0, 1]), np.array([-1, 1]), mode="symmetric", out=out)
    with pytest.raises(ValueError, match="mode = 'both'"):
        tokpos.alibi_bias([0.5, 0.25], [0, 1], [0, 1], mode="both", out=out)
    with pytest.raises(ValueError, match="dtype = 'float64'"):
        tokpos.alibi_bias([0.5, 0.25], [0, 1], [0, 1], dtype="float64")
    with pytest.raises(ValueError, match="'bfloat16' needs torch"):
        tokpos.alibi_bias([0.5, 0.25], [0, 1], [0, 1], dtype="bfloat16")
    with pytest.raises(ValueError, match=r"expected \(H, Tq, Tk\) = \(3, 2, 2\)"):
        tokpos.alibi_bias([0.5, 0.25, 0.125], [0, 1], [0, 1], out=out)
    np.testing.assert_array_equal(out, np.full((2, 2, 2), 7.0, dtype=np.float32))


# ---- torch ----


def test_torch_in_torch_out():
    torch = pytest.importorskip("torch", reason="torch is not installed: the torch variants need it")
    mask = torch.tensor([[0, 1, 1], [1, 1, 1]])
    got = tokpos.position_ids_from_mask(mask)
    assert isinstance(got, torch.Tensor) and got.dtype == torch.int64
    np.testing.assert_array_equal(got.numpy(), hf_mask_positions(mask.numpy(), 3))
    got = tokpos.position_ids_from_mask(mask.bool(), 1)
    np.testing.assert_array_equal(got.numpy(), [[1], [2]])
    ids = torch.tensor([[0, 5, 1, 6]], dtype=torch.int32)
    np.testing.assert_array_equal(tokpos.roberta_position_ids(ids, 1, 2).numpy(), hf_roberta_positions(ids.numpy(), 1, 2))
    cu = torch.tensor([0, 2, 5], dtype=torch.int32)
    pos = tokpos.packed_position_ids(cu)
    assert isinstance(pos, torch.Tensor)
    back = tokpos.cu_seqlens_from_position_ids(pos)
    assert back.dtype == torch.int32 and back.tolist() == [0, 2, 5]


def bf16_nearest(x):
    """x rounded once to bfloat16 (8 significant bits, ties to even), for
    normal values, zero and infinities: frexp splits x exactly, and Python's
    round() rounds the exact m * 2^8 half to even."""
    if x == 0 or math.isinf(x):
        return x
    m, e = math.frexp(x)
    return math.ldexp(round(m * 256), e - 8)


@pytest.mark.parametrize("mode", ["causal", "symmetric"])
def test_torch_bias_bfloat16_rounds_the_float64_reference_once(mode):
    torch = pytest.importorskip("torch", reason="torch is not installed: the torch variants need it")
    slopes = tokpos.alibi_slopes(12)
    q = torch.arange(0, 50, 7)
    k = torch.arange(0, 60, 3)
    got = tokpos.alibi_bias(slopes, q, k, mode=mode, dtype="bfloat16")
    assert got.dtype == torch.bfloat16 and got.shape == (12, len(q), len(k))
    ref = bias_reference(slopes.tolist(), q.tolist(), k.tolist(), mode)
    want = np.vectorize(bf16_nearest)(ref)
    np.testing.assert_array_equal(got.to(torch.float64).numpy(), want)
    out = torch.full((12, len(q), len(k)), 7.0, dtype=torch.float16)
    assert tokpos.alibi_bias(torch.from_numpy(slopes), q, k, mode=mode, out=out) is out
    np.testing.assert_array_equal(out.numpy(), ref.astype(np.float16))
