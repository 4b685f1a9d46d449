"""The numpy API of tokpos against independent numpy / float64 references."""

from __future__ import annotations

import re
import sys
import threading
import time

import numpy as np
import pytest

import tokpos
from tokpos import _core

from conftest import REFERENCES, REPO, ambiguous, ref_interleaved

F32 = np.float32
RNG_SEED = 1234


def rng(seed: int = RNG_SEED) -> np.random.Generator:
    return np.random.default_rng(seed)


def table(V: int, D: int, dtype=F32, seed: int = RNG_SEED) -> np.ndarray:
    return rng(seed).standard_normal((V, D)).astype(dtype)


def exact_interleaved(p: int, i: int, D: int, base: float = 10000.0) -> float:
    """One interleaved entry from 60-digit arithmetic (mpmath), as float64."""
    mpmath = pytest.importorskip("mpmath")
    with mpmath.workdps(60):
        angle = mpmath.mpf(p) / mpmath.power(mpmath.mpf(base), mpmath.mpf(2 * (i // 2)) / D)
        return float(mpmath.sin(angle) if i % 2 == 0 else mpmath.cos(angle))


# ---------------------------------------------------------------- version


def test_version_matches_core_and_cmake():
    text = (REPO / "CMakeLists.txt").read_text()
    m = re.search(r"project\(tokpos VERSION ([0-9.]+)", text)
    assert m, "CMakeLists.txt has no project(tokpos VERSION x.y.z"
    assert tokpos.__version__ == _core.version() == m.group(1)


# ---------------------------------------------------------------- sinusoidal_table


def check_correctly_rounded(got: np.ndarray, ref64: np.ndarray, start: int, D: int, base: float, dtype) -> None:
    """got equals ref64 rounded to dtype; the few entries too close to a
    midpoint for float64 to decide are settled with 60-digit arithmetic."""
    L = ref64.shape[0]
    positions = np.broadcast_to(np.arange(start, start + L, dtype=np.float64)[:, None], ref64.shape)
    expected = ref64.astype(dtype)
    unsure = ambiguous(ref64, dtype, positions)
    assert unsure.mean() < 0.05, "the float64 reference cannot decide the rounding of many entries"
    for r, i in zip(*np.nonzero(unsure)):
        expected[r, i] = np.asarray(exact_interleaved(start + int(r), int(i), D, base)).astype(dtype)
    assert got.dtype == np.dtype(dtype)
    bad = np.argwhere(got != expected)
    assert bad.size == 0, f"{len(bad)} entries differ, first at {tuple(bad[0])}: {got[tuple(bad[0])]!r} vs {expected[tuple(bad[0])]!r}"


@pytest.mark.parametrize(
    "L,D,start,base",
    [(1, 1, 0, 10000.0), (5, 2, 0, 10000.0), (7, 3, 0, 10000.0), (33, 8, 0, 10000.0), (64, 17, 0, 10000.0),
     (40, 64, 3, 10000.0), (16, 12, 100_000, 10000.0), (20, 10, 0, 500.0)],
)
def test_interleaved_is_correctly_rounded(L, D, start, base):
    got = tokpos.sinusoidal_table(L, D, start=start, base=base)
    assert isinstance(got, np.ndarray) and got.shape == (L, D) and got.flags.c_contiguous
    check_correctly_rounded(got, ref_interleaved(L, D, base, start), start, D, base, F32)


def test_interleaved_known_values():
    t = tokpos.sinusoidal_table(3, 4)
    assert t[0].tolist() == [0.0, 1.0, 0.0, 1.0]
    assert t[1, 0] == F32(np.sin(1.0)) and t[1, 1] == F32(np.cos(1.0))
    assert t[2, 2] == F32(np.sin(2.0 / 100.0)) and t[2, 3] == F32(np.cos(2.0 / 100.0))


def within_one_ulp(got: np.ndarray, ref64: np.ndarray, dtype=F32) -> None:
    ulp = np.spacing(np.abs(ref64).astype(dtype)).astype(np.float64)
    err = np.abs(got.astype(np.float64) - ref64)
    worst = np.unravel_index(np.argmax(err / ulp), err.shape) if err.size else None
    assert np.all(err <= ulp), f"{worst}: {got[worst]!r} vs {ref64[worst]!r}"


@pytest.mark.parametrize("layout", ["interleaved", "halves", "fairseq", "t2t", "ggml"])
@pytest.mark.parametrize("L,D,start", [(9, 1, 0), (9, 2, 0), (11, 3, 0), (13, 7, 5), (32, 16, 0), (20, 64, 1000)])
def test_layouts_within_one_ulp(layout, L, D, start):
    got = tokpos.sinusoidal_table(L, D, layout=layout, start=start)
    assert got.shape == (L, D) and got.dtype == F32
    within_one_ulp(got, REFERENCES[layout](L, D, start=start))


def test_layout_structure():
    # halves with odd D: ceil(D/2) sin columns then floor(D/2) cos columns.
    h = tokpos.sinusoidal_table(4, 5, layout="halves")
    assert h[0].tolist() == [0, 0, 0, 1, 1]
    # fairseq / t2t / ggml with odd D: a zero last column; D = 1 all zeros.
    for layout in ("fairseq", "t2t", "ggml"):
        t = tokpos.sinusoidal_table(6, 5, layout=layout)
        assert np.all(t[:, 4] == 0), layout
        assert np.all(tokpos.sinusoidal_table(6, 1, layout=layout) == 0), layout
    # ggml puts cos first.
    assert tokpos.sinusoidal_table(1, 4, layout="ggml")[0].tolist() == [1, 1, 0, 0]


def test_t2t_min_timescale_and_base():
    got = tokpos.sinusoidal_table(10, 8, layout="t2t", base=100.0, min_timescale=2.0)
    ref = REFERENCES["t2t"](10, 8, base=100.0, min_timescale=2.0)
    within_one_ulp(got, ref)
    # the default min_timescale 1 gives something else: the argument is used.
    assert not np.array_equal(got, tokpos.sinusoidal_table(10, 8, layout="t2t", base=100.0))


@pytest.mark.parametrize("start", [0, 1, 4])
def test_fairseq_padding_idx(start):
    L, D, padding_idx = 8, 6, 3
    got = tokpos.sinusoidal_table(L, D, layout="fairseq", start=start, padding_idx=padding_idx)
    ref = REFERENCES["fairseq"](L, D, start=start, padding_idx=padding_idx)
    within_one_ulp(got, ref)
    row = padding_idx - start
    if 0 <= row < L:
        assert np.all(got[row] == 0)
        assert np.any(tokpos.sinusoidal_table(L, D, layout="fairseq", start=start)[row] != 0)


@pytest.mark.parametrize("layout", ["interleaved", "halves", "t2t", "ggml"])
def test_padding_idx_only_for_fairseq(layout):
    with pytest.raises(ValueError, match="fairseq"):
        tokpos.sinusoidal_table(4, 4, layout=layout, padding_idx=1)


@pytest.mark.parametrize("L,D,start", [(17, 6, 0), (30, 9, 7), (8, 32, 2000)])
def test_float16_is_the_float64_formula_rounded_once(L, D, start):
    got = tokpos.sinusoidal_table(L, D, start=start, dtype="float16")
    assert isinstance(got, np.ndarray) and got.dtype == np.float16
    check_correctly_rounded(got, ref_interleaved(L, D, start=start), start, D, 10000.0, np.float16)


def test_float16_other_layout():
    got = tokpos.sinusoidal_table(12, 10, layout="halves", dtype="float16")
    within_one_ulp(got, REFERENCES["halves"](12, 10), np.float16)


def test_bfloat16_needs_torch():
    with pytest.raises(ValueError, match='framework="torch"'):
        tokpos.sinusoidal_table(4, 4, dtype="bfloat16")


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_framework_torch(dtype):
    torch = pytest.importorskip("torch")
    got = tokpos.sinusoidal_table(10, 6, dtype=dtype, framework="torch", layout="halves", start=2)
    assert isinstance(got, torch.Tensor)
    assert got.dtype == getattr(torch, dtype) and tuple(got.shape) == (10, 6) and got.device.type == "cpu"
    ref = REFERENCES["halves"](10, 6, start=2)
    err = np.abs(got.to(torch.float64).numpy() - ref)
    # correctly rounded: within half an ulp of the format (8 bits bf16, 11 f16, 24 f32).
    bits = {"float32": 24, "float16": 11, "bfloat16": 8}[dtype]
    assert np.all(err <= np.abs(ref) * 2.0**-bits + 1e-30)


@pytest.mark.parametrize(
    "kwargs,needle",
    [
        ({"layout": "sideways"}, "sideways"),
        ({"layout": "Interleaved"}, "Interleaved"),
        ({"dtype": "float64"}, "float64"),
        ({"dtype": "int8"}, "int8"),
        ({"framework": "jax"}, "jax"),
        ({"start": -1}, "start"),
    ],
)
def test_sinusoidal_table_bad_arguments(kwargs, needle):
    with pytest.raises(ValueError, match=re.escape(needle)):
        tokpos.sinusoidal_table(4, 4, **kwargs)


@pytest.mark.parametrize("L,D,needle", [(0, 4, "max_context"), (-3, 4, "max_context"), (4, 0, "dim"),
                                        (4, -1, "dim"), (2.5, 4, "max_context"), (4, True, "dim")])
def test_sinusoidal_table_bad_sizes(L, D, needle):
    with pytest.raises(ValueError, match=needle):
        tokpos.sinusoidal_table(L, D)


@pytest.mark.parametrize("base", [0.0, -1.0, float("nan"), float("inf")])
def test_sinusoidal_table_bad_base(base):
    with pytest.raises(ValueError):
        tokpos.sinusoidal_table(4, 4, base=base)


# ---------------------------------------------------------------- pe_sinusoidal


def test_pe_sinusoidal_matches_formula():
    cases = [(p, i, D) for D in (1, 2, 3, 8, 31, 512) for p in (0, 1, 2, 17, 255, 4096) for i in
             sorted({0, 1, D // 2, max(D - 2, 0), D - 1}) if i < D]
    for p, i, D in cases:
        ref = ref_interleaved(1, D, start=p)[0, i]
        got = tokpos.pe_sinusoidal(p, i, D)
        assert isinstance(got, float)
        if ambiguous(np.array([ref]), F32, np.array([float(p)]))[0]:
            ref = exact_interleaved(p, i, D)
        assert got == float(F32(ref)), (p, i, D)


@pytest.mark.parametrize("pos,dim,hidden", [(-1, 0, 4), (0, -1, 4), (0, 4, 4), (0, 5, 4), (0, 0, 0), (0, 0, -2)])
def test_pe_sinusoidal_errors(pos, dim, hidden):
    with pytest.raises(ValueError):
        tokpos.pe_sinusoidal(pos, dim, hidden)


# ---------------------------------------------------------------- compose


def ref_compose(ids, tok, pos=None, position_ids=None, start=0):
    """numpy fancy indexing + add, in float32 (or the tables' float32 values
    summed and rounded once to tok's dtype)."""
    ids = np.asarray(ids)
    rows = tok[ids].astype(F32)
    if pos is not None:
        if position_ids is None:
            T = ids.shape[-1]
            position_ids = np.broadcast_to(np.arange(start, start + T), ids.shape)
        rows = rows + pos[np.asarray(position_ids)].astype(F32)
    return rows.astype(tok.dtype)


@pytest.mark.parametrize("id_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("shape", [(3, 5), (1, 1), (11,), (4, 16)])
@pytest.mark.parametrize("with_pos", [False, True])
def test_compose_matches_numpy(id_dtype, shape, with_pos):
    V, L, D = 50, 20, 12
    tok, pos = table(V, D, seed=1), table(L, D, seed=2)
    ids = rng(3).integers(0, V, size=shape).astype(id_dtype)
    got = tokpos.compose(ids, tok, pos if with_pos else None)
    assert isinstance(got, np.ndarray) and got.dtype == F32 and got.shape == shape + (D,)
    assert np.array_equal(got, ref_compose(ids, tok, pos if with_pos else None))


@pytest.mark.parametrize("shape", [(3, 5), (7,)])
def test_compose_start(shape):
    V, L, D = 30, 16, 8
    tok, pos = table(V, D, seed=4), table(L, D, seed=5)
    ids = rng(6).integers(0, V, size=shape)
    T = shape[-1]
    got = tokpos.compose(ids, tok, pos, start=L - T)
    assert np.array_equal(got, ref_compose(ids, tok, pos, start=L - T))
    assert not np.array_equal(got, ref_compose(ids, tok, pos, start=0))


@pytest.mark.parametrize("id_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("shape", [(4, 6), (9,)])
def test_compose_position_ids(id_dtype, shape):
    V, L, D = 40, 25, 10
    tok, pos = table(V, D, seed=7), table(L, D, seed=8)
    ids = rng(9).integers(0, V, size=shape).astype(id_dtype)
    pids = rng(10).integers(0, L, size=shape).astype(id_dtype)
    got = tokpos.compose(ids, tok, pos, position_ids=pids)
    assert np.array_equal(got, ref_compose(ids, tok, pos, position_ids=pids))


def test_compose_mixed_index_dtypes_and_lists():
    tok, pos = table(10, 4, seed=11), table(6, 4, seed=12)
    ids = np.array([[1, 9, 0]], dtype=np.int32)
    pids = np.array([[5, 0, 2]], dtype=np.int64)
    assert np.array_equal(tokpos.compose(ids, tok, pos, position_ids=pids), ref_compose(ids, tok, pos, pids))
    assert np.array_equal(tokpos.compose([[1, 9, 0]], tok, pos), ref_compose(ids, tok, pos))


def test_compose_float16_rounds_the_float32_sum_once():
    V, L, D = 64, 32, 16
    tok, pos = table(V, D, np.float16, seed=13) * np.float16(30), table(L, D, np.float16, seed=14)
    ids = rng(15).integers(0, V, size=(4, 32))
    got = tokpos.compose(ids, tok, pos)
    assert got.dtype == np.float16
    expected = (tok[ids].astype(F32) + pos[np.arange(32)].astype(F32)).astype(np.float16)
    assert np.array_equal(got, expected)


@pytest.mark.parametrize("tok_dtype,pos_dtype", [(F32, np.float16), (np.float16, F32), (np.float16, np.float16)])
def test_compose_output_dtype_follows_token_table(tok_dtype, pos_dtype):
    tok, pos = table(10, 8, tok_dtype, seed=16), table(5, 8, pos_dtype, seed=17)
    ids = np.array([[3, 1, 4, 1, 5]]) % 10
    got = tokpos.compose(ids, tok, pos)
    assert got.dtype == np.dtype(tok_dtype)
    assert np.array_equal(got, (tok[ids].astype(F32) + pos[:5].astype(F32)).astype(tok_dtype))


def test_compose_out_dtype_decides_rounding():
    tok, pos = table(10, 8, seed=18), table(5, 8, seed=19)
    ids = np.array([[0, 9, 2]])
    out = np.empty((1, 3, 8), np.float16)
    got = tokpos.compose(ids, tok, pos, out=out)
    assert got is out
    assert np.array_equal(out, (tok[ids] + pos[:3]).astype(np.float16))


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a.view(np.uint8), b.view(np.uint8))


@pytest.mark.parametrize("shape", [(3, 5), (11,)])
@pytest.mark.parametrize("with_pos", [False, True])
def test_compose_float64_is_float64_throughout(shape, with_pos):
    # float64 tables give a float64 out: each element the one double
    # addition numpy makes, bit for bit (the tables hold values float32
    # cannot, so a float32 step anywhere would show).
    V, L, D = 40, 16, 9
    tok, pos = table(V, D, np.float64, seed=60), table(L, D, np.float64, seed=61)
    ids = rng(62).integers(0, V, size=shape)
    pids = rng(63).integers(0, L, size=shape)
    T = shape[-1]
    positions = np.broadcast_to(np.arange(2, 2 + T), shape)
    want = tok[ids] + pos[positions] if with_pos else tok[ids].copy()
    got = tokpos.compose(ids, tok, pos if with_pos else None, start=2)
    assert same_bits(got, want)
    assert not np.array_equal(want, want.astype(F32).astype(np.float64))
    if with_pos:
        out = np.full(shape + (D,), -3.0)
        assert tokpos.compose(ids, tok, pos, position_ids=pids, out=out) is out
        assert same_bits(out, tok[ids] + pos[pids])


def test_compose_float64_mixed_with_float32_is_refused():
    V, L, D = 10, 6, 4
    tok64, pos64 = table(V, D, np.float64, seed=64), table(L, D, np.float64, seed=65)
    tok32, pos32 = table(V, D, seed=66), table(L, D, seed=67)
    ids = np.array([[1, 9, 0]])
    with pytest.raises(ValueError, match="token_table is f64 but pos_table is f32; a float64 lookup takes"):
        tokpos.compose(ids, tok64, pos32)
    with pytest.raises(ValueError, match="pos_table is f64 but token_table is f32"):
        tokpos.compose(ids, tok32, pos64)
    out32, out64 = np.full((1, 3, D), 5.0, F32), np.full((1, 3, D), 5.0)
    with pytest.raises(ValueError, match="token_table is f64 but out is f32"):
        tokpos.compose(ids, tok64, pos64, out=out32)
    with pytest.raises(ValueError, match="out is f64 but token_table is f32"):
        tokpos.compose(ids, tok32, pos32, out=out64)
    assert np.all(out32 == 5.0) and np.all(out64 == 5.0)


def test_compose_backward_float64():
    # float64 gradients and d_out: added in double one source at a time in
    # (b, t) order, as np.add.at adds them (rows used at most 64 times).
    V, L, D = 12, 8, 5
    ids = rng(68).integers(0, 4, size=(3, 8))
    pids = rng(69).integers(0, L, size=(3, 8))
    g = rng(70).standard_normal((3, 8, D))
    d_tok, d_pos = table(V, D, np.float64, seed=71), table(L, D, np.float64, seed=72)
    ref_tok, ref_pos = d_tok.copy(), d_pos.copy()
    np.add.at(ref_tok, ids.ravel(), g.reshape(-1, D))
    np.add.at(ref_pos, pids.ravel(), g.reshape(-1, D))
    tokpos.compose_backward(g, ids, d_token_table=d_tok, d_pos_table=d_pos, position_ids=pids)
    assert same_bits(d_tok, ref_tok) and same_bits(d_pos, ref_pos)
    d32 = np.full((V, D), 5.0, F32)
    with pytest.raises(ValueError, match="d_out is f64 but d_token_table is f32"):
        tokpos.compose_backward(g, ids, d_token_table=d32)
    assert np.all(d32 == 5.0)


def test_compose_broadcast_inputs():
    # stride-0 views: the same position ids (and ids) for every batch row.
    V, L, D = 20, 10, 6
    tok, pos = table(V, D, seed=20), table(L, D, seed=21)
    ids = np.broadcast_to(np.array([4, 2, 19, 0]), (3, 4))
    pids = np.broadcast_to(np.array([9, 0, 3, 3]), (3, 4))
    assert ids.strides[0] == 0 and not ids.flags.writeable
    got = tokpos.compose(ids, tok, pos, position_ids=pids)
    assert np.array_equal(got, ref_compose(ids, tok, pos, position_ids=pids))
    # the position rows are the same for every batch row
    assert np.array_equal(got[0], got[2])


def test_compose_empty_batch():
    tok, pos = table(5, 3), table(4, 3)
    got = tokpos.compose(np.zeros((0, 4), np.int64), tok, pos)
    assert got.shape == (0, 4, 3)
    got = tokpos.compose(np.zeros((2, 0), np.int64), tok, pos)
    assert got.shape == (2, 0, 3)


# ---------------------------------------------------------------- zero copy, strides


def test_out_is_written_in_place_and_returned():
    tok, pos = table(10, 4, seed=22), table(8, 4, seed=23)
    ids = np.array([[1, 2, 3], [7, 8, 9]])
    out = np.full((2, 3, 4), np.nan, F32)
    got = tokpos.compose(ids, tok, pos, out=out)
    assert got is out and np.shares_memory(got, out)
    assert np.array_equal(out, ref_compose(ids, tok, pos))


def test_result_does_not_alias_inputs():
    tok = table(10, 4)
    got = tokpos.compose(np.array([1, 2]), tok)
    assert not np.shares_memory(got, tok)


def test_out_view_with_row_stride():
    # out is a slice of a wider buffer: only its own elements change.
    tok, pos = table(10, 4, seed=24), table(8, 4, seed=25)
    ids = np.array([[0, 5, 9], [3, 3, 1]])
    big = np.full((2, 3, 10), -7.0, F32)
    out = big[:, :, 2:6]
    got = tokpos.compose(ids, tok, pos, out=out)
    assert got is out and np.shares_memory(big, got)
    assert np.array_equal(big[:, :, 2:6], ref_compose(ids, tok, pos))
    assert np.all(big[:, :, :2] == -7) and np.all(big[:, :, 6:] == -7)


def test_non_contiguous_ids_and_position_ids():
    V, L, D = 30, 20, 5
    tok, pos = table(V, D, seed=26), table(L, D, seed=27)
    ids_full = rng(28).integers(0, V, size=(6, 10))
    pids_full = rng(29).integers(0, L, size=(6, 10)).astype(np.int32)
    ids, pids = ids_full[::2, ::2], pids_full[1::2, 1::2]
    assert not ids.flags.c_contiguous and not pids.flags.c_contiguous
    got = tokpos.compose(ids, tok, pos, position_ids=pids)
    assert np.array_equal(got, ref_compose(ids, tok, pos, position_ids=pids))
    got = tokpos.compose(ids_full[:, 3], tok, pos)  # 1-D with a stride of 10
    assert np.array_equal(got, ref_compose(ids_full[:, 3], tok, pos))


def test_strided_tables():
    V, L, D = 16, 12, 6
    big_tok = table(V, 3 * D, seed=30)
    big_pos = table(2 * L, D + 5, seed=31)
    tok = big_tok[:, :D]              # row stride 3D > D
    pos = big_pos[::2, 5:]            # every other row, offset columns
    assert tok.strides[0] == 3 * D * 4 and not pos.flags.c_contiguous
    ids = rng(32).integers(0, V, size=(3, 7))
    got = tokpos.compose(ids, tok, pos, start=2)
    assert np.array_equal(got, ref_compose(ids, np.ascontiguousarray(tok), np.ascontiguousarray(pos), start=2))
    row_slice = big_tok[4:12, D:2 * D]  # a row slice of a wider array
    got = tokpos.compose(ids % 8, row_slice)
    assert np.array_equal(got, row_slice[ids % 8])


def test_negative_strides_raise():
    tok, pos = table(10, 4), table(6, 4)
    with pytest.raises(ValueError, match="position_ids"):
        tokpos.compose(np.array([1, 2, 3]), tok, pos, position_ids=np.array([0, 1, 2])[::-1])
    with pytest.raises(ValueError, match="token_table"):
        tokpos.compose(np.array([1, 2, 3]), tok[::-1])


@pytest.mark.parametrize("which", ["token_table", "pos_table"])
def test_table_with_inner_stride_raises(which):
    tok, pos = table(10, 8), table(6, 8)
    ids = np.array([[1, 2]])
    if which == "token_table":
        args = (tok[:, ::2], pos[:, :4])
    else:
        args = (tok[:, :4], pos[:, ::2])
    with pytest.raises(ValueError, match=which):
        tokpos.compose(ids, *args)


def test_out_with_inner_stride_raises():
    tok = table(10, 4)
    out = np.zeros((1, 2, 8), F32)
    with pytest.raises(ValueError, match="out"):
        tokpos.compose(np.array([[1, 2]]), tok, out=out[:, :, ::2])
    assert np.all(out == 0)


def test_read_only_inputs_are_accepted():
    V, L, D = 10, 6, 4
    tok, pos = table(V, D, seed=33), table(L, D, seed=34)
    ids, pids = np.array([[1, 0, 9]]), np.array([[5, 5, 0]])
    for a in (tok, pos, ids, pids):
        a.flags.writeable = False
    got = tokpos.compose(ids, tok, pos, position_ids=pids)
    assert np.array_equal(got, ref_compose(ids, tok, pos, position_ids=pids))
    g = table(3, D, seed=35).reshape(1, 3, D)
    g.flags.writeable = False
    d_tok = np.zeros((V, D), F32)
    tokpos.compose_backward(g, ids, d_token_table=d_tok)
    assert np.array_equal(d_tok[9], g[0, 2])


def test_read_only_out_raises_value_error():
    tok = table(10, 4)
    out = np.zeros((1, 2, 4), F32)
    out.flags.writeable = False
    with pytest.raises(ValueError, match="out"):
        tokpos.compose(np.array([[1, 2]]), tok, out=out)
    d = np.zeros((10, 4), F32)
    d.flags.writeable = False
    with pytest.raises(ValueError, match="d_token_table"):
        tokpos.compose_backward(np.zeros((1, 2, 4), F32), np.array([[1, 2]]), d_token_table=d)


# ---------------------------------------------------------------- compose_backward


def test_backward_rows_used_once_exact():
    V, L, D = 20, 10, 6
    ids = np.array([[3, 7, 11], [0, 19, 5]])
    g = table(6, D, seed=36).reshape(2, 3, D)
    d_tok = table(V, D, seed=37)            # non-zero: the gradient is added
    d_pos = table(L, D, seed=38)
    ref_tok, ref_pos = d_tok.copy(), d_pos.copy()
    ref_tok[ids.ravel()] += g.reshape(-1, D)
    np.add.at(ref_pos, np.tile(np.arange(2, 5), 2), g.reshape(-1, D))
    tokpos.compose_backward(g, ids, d_token_table=d_tok, d_pos_table=d_pos, start=2)
    assert np.array_equal(d_tok, ref_tok)
    assert np.array_equal(d_pos, ref_pos)


def test_backward_repeated_rows_match_add_at():
    V, L, D = 12, 8, 5
    ids = rng(39).integers(0, 4, size=(5, 8))        # heavy repetition
    pids = rng(40).integers(0, L, size=(5, 8))
    g = rng(41).standard_normal((5, 8, D)).astype(F32)
    # The additions go into the table one occurrence at a time in (b, t)
    # order, as np.add.at does in float32: equal bit for bit, also onto a
    # non-zero table (where summing the occurrences first would round differently).
    for init in ("zeros", "random"):
        if init == "zeros":
            d_tok, d_pos = np.zeros((V, D), F32), np.zeros((L, D), F32)
        else:
            d_tok, d_pos = table(V, D, seed=45), table(L, D, seed=46)
        ref_tok, ref_pos = d_tok.copy(), d_pos.copy()
        tokpos.compose_backward(g, ids, d_token_table=d_tok, d_pos_table=d_pos, position_ids=pids)
        np.add.at(ref_tok, ids.ravel(), g.reshape(-1, D))
        np.add.at(ref_pos, pids.ravel(), g.reshape(-1, D))
        assert np.array_equal(d_tok, ref_tok), init
        assert np.array_equal(d_pos, ref_pos), init
    # and close to the float64 sums
    ref64 = table(V, D, seed=45).astype(np.float64)
    np.add.at(ref64, ids.ravel(), g.reshape(-1, D).astype(np.float64))
    assert np.allclose(d_tok, ref64, rtol=1e-5, atol=1e-5)


def test_backward_only_touched_rows_change():
    V, L, D = 50, 30, 4
    ids = np.array([2, 40, 2, 17])
    g = table(4, D, seed=42)
    d_tok, d_pos = table(V, D, seed=43), table(L, D, seed=44)
    before_tok, before_pos = d_tok.copy(), d_pos.copy()
    tokpos.compose_backward(g, ids, d_token_table=d_tok, d_pos_table=d_pos, start=10)
    changed = np.nonzero(np.any(d_tok != before_tok, axis=1))[0]
    assert changed.tolist() == [2, 17, 40]
    changed = np.nonzero(np.any(d_pos != before_pos, axis=1))[0]
    assert changed.tolist() == [10, 11, 12, 13]


def test_backward_none_allowed():
    ids = np.array([[1, 2]])
    g = table(2, 3).reshape(1, 2, 3)
    d_pos = np.zeros((4, 3), F32)
    assert tokpos.compose_backward(g, ids, d_pos_table=d_pos) is None
    assert np.array_equal(d_pos[:2], g[0]) and np.all(d_pos[2:] == 0)
    d_tok = np.zeros((4, 3), F32)
    tokpos.compose_backward(g, ids, d_token_table=d_tok)
    assert np.array_equal(d_tok[1:3], g[0])
    tokpos.compose_backward(g, ids)  # nothing to write: a valid no-op


def test_backward_errors():
    ids = np.array([[1, 2]])
    g = np.zeros((1, 2, 3), F32)
    d = np.full((4, 3), 5.0, F32)
    with pytest.raises(ValueError, match="d_out"):
        tokpos.compose_backward(g.astype(np.float16), ids, d_token_table=d)
    with pytest.raises(IndexError, match="d_pos_table"):
        tokpos.compose_backward(g, ids, d_pos_table=np.zeros((1, 3), F32))
    with pytest.raises(IndexError, match=r"\(b=0, t=1\)"):
        tokpos.compose_backward(g, np.array([[1, 4]]), d_token_table=d)
    with pytest.raises(ValueError):
        tokpos.compose_backward(np.zeros((1, 2, 5), F32), ids, d_token_table=d)
    assert np.all(d == 5.0)


# ---------------------------------------------------------------- errors


@pytest.mark.parametrize("shape", [(2, 5), (10,)])
def test_id_out_of_range_names_position_value_limit(shape):
    V, D = 7, 3
    tok = table(V, D)
    ids = np.zeros(shape, np.int64)
    flat = ids.reshape(-1)
    flat[-2] = V + 5
    b, t = (divmod(ids.size - 2, shape[-1]) if len(shape) == 2 else (0, ids.size - 2))
    out = np.full(shape + (D,), 42.0, F32)
    with pytest.raises(IndexError) as e:
        tokpos.compose(ids, tok, out=out)
    msg = str(e.value)
    assert f"(b={b}, t={t})" in msg and str(V + 5) in msg and str(V) in msg
    assert np.all(out == 42.0), "out changed on error"


def test_negative_id_raises_index_error():
    with pytest.raises(IndexError, match="-1"):
        tokpos.compose(np.array([[0, -1]], np.int32), table(5, 2))


def test_position_past_table():
    tok, pos = table(10, 4), table(6, 4)
    out = np.full((2, 4, 4), 3.0, F32)
    with pytest.raises(IndexError, match="6"):
        tokpos.compose(np.ones((2, 4), np.int64), tok, pos, start=3, out=out)
    with pytest.raises(IndexError, match=r"\(b=1, t=2\)"):
        pids = np.zeros((2, 4), np.int64)
        pids[1, 2] = 6
        tokpos.compose(np.ones((2, 4), np.int64), tok, pos, position_ids=pids, out=out)
    assert np.all(out == 3.0)


@pytest.mark.parametrize("ids", [np.array([[0.0, 1.0]]), np.array([[0, 1]], np.int8), np.array([[0, 1]], np.uint8),
                                 np.array([[0, 1]], np.int16), np.zeros((1, 2, 1), np.int64), np.array(1)])
def test_bad_ids(ids):
    out = np.full((1, 2, 4), 9.0, F32)
    with pytest.raises(ValueError, match="ids"):
        tokpos.compose(ids, table(5, 4), out=out)
    assert np.all(out == 9.0)


def test_shape_mismatches():
    tok = table(10, 4)
    ids = np.array([[1, 2]])
    out = np.full((1, 2, 4), 9.0, F32)
    with pytest.raises(ValueError, match="pos_table"):
        tokpos.compose(ids, tok, table(6, 5), out=out)
    with pytest.raises(ValueError, match="out"):
        tokpos.compose(ids, tok, out=np.zeros((1, 2, 5), F32))
    with pytest.raises(ValueError, match="out"):
        tokpos.compose(ids, tok, out=np.zeros((1, 3, 4), F32))
    with pytest.raises(ValueError, match="position_ids"):
        tokpos.compose(ids, tok, table(6, 4), position_ids=np.array([[1, 2, 3]]), out=out)
    with pytest.raises(ValueError, match="token_table"):
        tokpos.compose(ids, tok[None])
    with pytest.raises(ValueError, match="int32; expected float32, bfloat16, float16 or float64"):
        tokpos.compose(ids, tok.astype(np.int32))
    with pytest.raises(ValueError, match="start"):
        tokpos.compose(ids, tok, start=-1)
    assert np.all(out == 9.0)


def test_not_an_array():
    with pytest.raises(ValueError, match="token_table"):
        tokpos.compose(np.array([1]), {"a": 1})


# ---------------------------------------------------------------- threads and the GIL


def test_two_python_threads_run_kernels_at_once():
    V, L, D = 1000, 512, 128
    tok, pos = table(V, D, seed=50), table(L, D, seed=51)
    jobs = [rng(52 + k).integers(0, V, size=(16, 512)) for k in range(2)]
    barrier = threading.Barrier(2)
    results: list = [None, None]
    errors: list = []

    def work(k):
        try:
            barrier.wait(timeout=30)
            for _ in range(3):
                results[k] = tokpos.compose(jobs[k], tok, pos)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors
    for k in range(2):
        assert np.array_equal(results[k], ref_compose(jobs[k], tok, pos))


def test_gil_is_released_while_a_kernel_runs():
    """With a long switch interval the main thread keeps the GIL between two
    reads of a counter unless something in between releases it: the
    counting thread advances across compose only if compose runs without
    the GIL."""
    V, L, D = 2000, 2048, 256
    tok, pos = table(V, D, seed=60), table(L, D, seed=61)
    ids = rng(62).integers(0, V, size=(8, 2048))
    out = np.empty((8, 2048, D), F32)
    count = [0]
    stop = threading.Event()
    ready = threading.Event()

    def counter():
        ready.set()
        while not stop.is_set():
            count[0] += 1
            time.sleep(1e-4)  # gives the GIL back, so the main thread always gets it back

    old = sys.getswitchinterval()
    t = threading.Thread(target=counter)
    advanced = False
    try:
        t.start()
        ready.wait(timeout=10)
        sys.setswitchinterval(1000.0)
        for _ in range(5):
            before = count[0]
            tokpos.compose(ids, tok, pos, out=out)
            after = count[0]
            if after > before:
                advanced = True
                break
    finally:
        sys.setswitchinterval(old)
        stop.set()
        t.join(timeout=30)
    assert advanced, "no Python code ran while compose ran: the GIL stays held"
    assert np.array_equal(out, ref_compose(ids, tok, pos))


def test_num_threads_round_trip(threads):
    for n in (1, 2, 3):
        tokpos.set_num_threads(n)
        assert tokpos.get_num_threads() == n
    tokpos.set_num_threads(0)
    assert tokpos.get_num_threads() >= 1


def test_results_identical_for_1_and_2_threads(threads):
    V, L, D = 300, 256, 64
    tok, pos = table(V, D, seed=70), table(L, D, seed=71)
    ids = rng(72).integers(0, 10, size=(32, 256))   # many repeats for the backward sums
    g = rng(73).standard_normal((32, 256, D)).astype(F32)
    results = []
    for n in (1, 2):
        tokpos.set_num_threads(n)
        fwd = tokpos.compose(ids, tok, pos)
        d_tok, d_pos = np.zeros((V, D), F32), np.zeros((L, D), F32)
        tokpos.compose_backward(g, ids, d_token_table=d_tok, d_pos_table=d_pos)
        tab = tokpos.sinusoidal_table(L, 33, layout="t2t")
        results.append((fwd, d_tok, d_pos, tab))
    for a, b in zip(*results):
        assert a.tobytes() == b.tobytes()
    assert np.array_equal(results[0][0], ref_compose(ids, tok, pos))
