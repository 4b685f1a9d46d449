"""The vocab-shard bindings of tokpos._core against numpy references written
here: each shard's float32 output, summed over shards, equals the whole
table's rows plus position rows; each shard's gradient equals the matching
rows of an in-order numpy accumulation; bad ids raise IndexError naming the
id and the whole vocabulary, before anything is written."""

import numpy as np
import pytest

from tokpos import _core


def shard_ranges(V, pad, world):
    padded = -(-V // pad) * pad
    rows = -(-padded // world)
    return [(r * rows, rows) for r in range(world)]


@pytest.mark.parametrize("V,pad,world", [(10, 1, 1), (10, 1, 3), (37, 8, 4), (7, 1, 4)])
def test_shards_sum_to_the_whole_table(V, pad, world):
    rng = np.random.default_rng(V * 100 + world)
    D, L, B, T = 12, 16, 2, 9
    whole = rng.standard_normal((V, D), dtype=np.float32)
    pos = rng.standard_normal((L, D), dtype=np.float32)
    ids = rng.integers(0, V, size=(B, T))
    ids[0, :4] = [0, V - 1, min(V - 1, shard_ranges(V, pad, world)[-1][0]), V // 2]
    d_out = rng.standard_normal((B, T, D), dtype=np.float32)
    want = whole[ids] + pos[np.arange(T)][None]
    grad_want = np.zeros_like(whole)
    for b in range(B):
        for t in range(T):
            grad_want[ids[b, t]] += d_out[b, t]
    total = np.zeros((B, T, D), np.float32)
    for r, (begin, rows) in enumerate(shard_ranges(V, pad, world)):
        assert _core.vocab_shard_range(V, pad, world, r) == (begin, rows)
        shard = np.full((rows, D), np.nan, np.float32)
        real = max(0, min(rows, V - begin))
        shard[:real] = whole[begin:begin + real]
        out = np.empty((B, T, D), np.float32)
        _core.compose_shard(out, ids, shard, V, begin, pos if r == 0 else None, None, 0, "test")
        total += out
        grad = np.zeros_like(shard)
        grad[real:] = np.nan
        _core.compose_shard_backward(grad, None, d_out, ids, V, begin, None, 0, -1, "test")
        np.testing.assert_array_equal(grad[:real], grad_want[begin:begin + real])
        assert np.isnan(grad[real:]).all(), "a padding row was written"
    np.testing.assert_array_equal(total, want)


def test_bad_ids_and_arguments_are_named():
    shard = np.ones((3, 4), np.float32)
    out = np.full((1, 3, 4), -2.0, np.float32)
    for bad in (10, -1):
        with pytest.raises(IndexError, match=rf"token id {bad} .*\[0, 10\)"):
            _core.compose_shard(out, np.array([[3, bad, 4]]), shard, 10, 3, None, None, 0, "VocabParallelEmbedding")
    assert (out == -2.0).all()
    with pytest.raises(ValueError, match="vocab_size = 0 must be >= 1"):
        _core.compose_shard(out, np.array([[3, 4, 5]]), shard, 0, 3, None, None, 0, "where")
    with pytest.raises(ValueError, match="rank 4 is outside"):
        _core.vocab_shard_range(10, 1, 4, 4)


def test_fill_normal_slices_match_the_whole_draw():
    whole = np.empty(1001, np.float32)
    _core.fill_normal(whole, 5, 0, 0.0, 0.02)
    for first in (0, 1, 3, 4, 500):
        part = np.empty(100, np.float32)
        _core.fill_normal(part, 5, 0, 0.0, 0.02, first=first)
        np.testing.assert_array_equal(part, whole[first:first + 100])
