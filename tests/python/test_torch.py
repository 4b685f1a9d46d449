"""tokpos.torch: the modules, their autograd and the custom ops, checked
against independent references (torch.nn.Embedding and float64 formulas)."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import warnings

import numpy as np
import pytest

from conftest import tokpos_torch

tt = tokpos_torch()  # or a skip saying why (torch missing or too old)

import tokpos  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

V, D, L, B, T = 13, 8, 16, 3, 5


@pytest.fixture
def keep_threads():
    """Restores the kernel thread count after a test that changes it."""
    before = tokpos.get_num_threads()
    yield
    tokpos.set_num_threads(before)


def ids_of(shape, vocab=V, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, shape, generator=g)


def reference_pair(tok: tt.TokenEmbedding, pos: tt.LearnedPositionalEmbedding):
    """nn.Embedding copies of the two tables (same values, own memory)."""
    rt = nn.Embedding(tok.vocab_size, tok.dim, padding_idx=tok.padding_idx)
    rp = nn.Embedding(pos.max_context_length, pos.dim)
    with torch.no_grad():
        rt.weight.copy_(tok.weight)
        rp.weight.copy_(pos.weight)
    return rt, rp


def composer(seed=0, padding_idx=None, sparse=False, learned=True):
    tok = tt.TokenEmbedding(V, D, seed=seed, padding_idx=padding_idx, sparse=sparse)
    pos = tt.LearnedPositionalEmbedding(L, D, seed=seed) if learned else tt.SinusoidalPositionalEmbedding(L, D)
    return tt.EmbeddingComposer(tok, pos)


# --- import, shapes, parameters -----------------------------------------------


def test_import_tokpos_does_not_import_torch():
    code = "import sys, tokpos; assert 'torch' not in sys.modules, 'tokpos imported torch'"
    # The child imports the same tokpos as this process.
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.dirname(os.path.dirname(os.path.abspath(tokpos.__file__))), env.get("PYTHONPATH", "")]
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/", env=env)
    assert proc.returncode == 0, proc.stderr


def test_shapes_and_broadcast_over_batch():
    c = composer()
    ids = ids_of((B, T))
    assert c(ids).shape == (B, T, D)
    assert c.token(ids[0]).shape == (T, D)
    assert c.token(ids).shape == (B, T, D)
    assert c.position(T).shape == (T, D)
    assert c.position(torch.arange(T).expand(B, T)).shape == (B, T, D)
    # Two batch rows with the same ids get the same vectors: positions are
    # 0..T-1 for every row.
    ids2 = torch.stack([ids[0], ids[0]])
    out = c(ids2)
    assert torch.equal(out[0], out[1])
    # Each row minus its token rows is the position table's first T rows
    # (to float32 rounding of the sum).
    with torch.no_grad():
        residual = out - c.token.weight[ids2]
        torch.testing.assert_close(residual, c.position.weight[:T].expand(2, T, D), rtol=0, atol=1e-6)


def test_parameter_counts():
    def count(m):
        return sum(p.numel() for p in m.parameters())

    tok = tt.TokenEmbedding(V, D)
    learned = tt.LearnedPositionalEmbedding(L, D)
    sin = tt.SinusoidalPositionalEmbedding(L, D)
    assert count(tok) == V * D
    assert count(learned) == L * D
    assert count(sin) == 0
    assert dict(sin.named_buffers())["weight"].shape == (L, D)
    assert count(tt.EmbeddingComposer(tok, learned)) == V * D + L * D
    assert count(tt.EmbeddingComposer(tt.TokenEmbedding(V, D), sin)) == V * D


def test_sinusoidal_formula_in_float64():
    Lx, Dx = 64, 16
    table = tt.SinusoidalPositionalEmbedding(Lx, Dx).weight
    assert table.dtype == torch.float32
    p = np.arange(Lx, dtype=np.float64)[:, None]
    i = np.arange(Dx)
    angle = p / 10000.0 ** (2 * (i // 2) / Dx)
    ref = np.where(i % 2 == 0, np.sin(angle), np.cos(angle))
    got = table.numpy().astype(np.float64)
    # Within float32 rounding: half an ulp of the float32 value, plus the
    # float64 formula's own error.
    half_ulp = np.spacing(np.abs(ref).astype(np.float32)).astype(np.float64) / 2
    assert np.all(np.abs(got - ref) <= half_ulp + 1e-13)
    # forward(T) gives the first T rows, as new memory.
    rows = tt.SinusoidalPositionalEmbedding(Lx, Dx)(7)
    assert torch.equal(rows, table[:7])


def test_init_draws_from_seed_and_stream():
    a, b = tt.TokenEmbedding(64, 32, seed=3), tt.TokenEmbedding(64, 32, seed=3)
    assert torch.equal(a.weight, b.weight)
    assert not torch.equal(a.weight, tt.TokenEmbedding(64, 32, seed=4).weight)
    # The position table uses its own stream: the same seed gives another table.
    assert not torch.equal(a.weight[:16], tt.LearnedPositionalEmbedding(16, 32, seed=3).weight)
    w = tt.TokenEmbedding(500, 64, seed=1, init_std=0.02).weight.detach().double()
    assert abs(w.mean().item()) < 0.002
    assert 0.019 < w.std().item() < 0.021
    padded = tt.TokenEmbedding(V, D, padding_idx=4)
    assert torch.count_nonzero(padded.weight[4]) == 0
    assert torch.count_nonzero(padded.weight[3]) == D
    assert tt.TokenEmbedding(V, D, padding_idx=-1).padding_idx == V - 1


# --- forward against nn.Embedding ---------------------------------------------


def test_forward_bitwise_equals_nn_embedding():
    c = composer(seed=5)
    rt, rp = reference_pair(c.token, c.position)
    ids = ids_of((B, T), seed=1)
    ref = rt(ids) + rp(torch.arange(T))
    assert torch.equal(c(ids), ref)
    with torch.no_grad():  # the inference fast path
        assert torch.equal(c(ids), ref)
        assert torch.equal(c.token(ids), rt(ids))
        assert torch.equal(c.token(ids[1]), rt(ids[1]))
    # Explicit positions and a start offset.
    pids = ids_of((B, T), vocab=L, seed=2)
    assert torch.equal(c(ids, position_ids=pids), rt(ids) + rp(pids))
    assert torch.equal(c(ids, start=4), rt(ids) + rp(torch.arange(4, 4 + T)))
    assert torch.equal(c.position(pids), rp(pids))
    assert torch.equal(c.position(T, start=2), rp(torch.arange(2, 2 + T)))
    # int32 ids and a strided view of ids.
    assert torch.equal(c(ids.to(torch.int32)), ref)
    wide = ids_of((B, 2 * T), seed=3)
    assert torch.equal(c(wide[:, ::2]), rt(wide[:, ::2]) + rp(torch.arange(T)))
    with torch.no_grad():
        assert torch.equal(c(wide[:, ::2]), rt(wide[:, ::2]) + rp(torch.arange(T)))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_inference_forward_on_views_and_dtypes(dtype):
    wide = torch.randn(V, 2 * D, generator=torch.Generator().manual_seed(11)).to(dtype)
    pos_table = torch.randn(L, D, generator=torch.Generator().manual_seed(12)).to(dtype)
    ids = ids_of((B, T), seed=13)
    pids = ids_of((B, T), vocab=L, seed=14).to(torch.int32)
    for table in (wide[:, :D], wide[:, :D].contiguous(), wide[:, ::2]):  # row stride 2D; contiguous; column stride 2
        pos = tt.LearnedPositionalEmbedding(L, D)
        pos.weight = nn.Parameter(pos_table)
        c = tt.EmbeddingComposer(tt.TokenEmbedding.from_pretrained(table, freeze=True), pos)
        ref = (table.float()[ids] + pos_table.float()[pids.long()]).to(dtype)
        with torch.no_grad():
            assert torch.equal(c(ids, position_ids=pids), ref)
            assert torch.equal(c(ids[1], position_ids=pids[1]), ref[1])
            assert torch.equal(c.token(ids), table[ids])
        assert torch.equal(c(ids, position_ids=pids), ref)  # the op path: the position table requires grad


def test_sinusoidal_composer_equals_reference():
    c = composer(learned=False)
    ids = ids_of((B, T))
    rt = nn.Embedding.from_pretrained(c.token.weight.detach().clone())
    table = torch.from_numpy(tokpos.sinusoidal_table(L, D))
    assert torch.equal(c(ids), rt(ids) + table[:T])


def test_output_requires_grad_only_when_needed():
    c = composer()
    ids = ids_of((B, T))
    assert c(ids).requires_grad
    with torch.no_grad():
        assert not c(ids).requires_grad
    with torch.inference_mode():
        out = c(ids)
        assert not out.requires_grad
    assert torch.equal(out, c(ids).detach())
    frozen = tt.EmbeddingComposer(
        tt.TokenEmbedding.from_pretrained(c.token.weight.detach(), freeze=True), tt.SinusoidalPositionalEmbedding(L, D)
    )
    assert not frozen(ids).requires_grad


def test_inference_skips_the_custom_op(monkeypatch):
    c = composer()
    ids = ids_of((B, T))
    expected = c(ids).detach()

    def dispatched(*args):
        raise AssertionError("the custom op was dispatched")

    import tokpos._torch_ops as ops

    monkeypatch.setattr(ops, "_compose_op", dispatched)
    with torch.no_grad():
        assert torch.equal(c(ids), expected)
        assert torch.equal(c(ids, position_ids=torch.arange(T).expand(B, T)), expected)
    with torch.inference_mode():
        assert torch.equal(c(ids), expected)
    # With a gradient to compute, the op (and its autograd formula) runs.
    with pytest.raises(AssertionError, match="dispatched"):
        c(ids)


def test_bf16_forward_rounds_once():
    c = composer(seed=2)
    rt, rp = reference_pair(c.token, c.position)
    c.to(torch.bfloat16)
    ids = ids_of((B, T))
    # The float32 sum of the bf16 rows, rounded once to bf16.
    tok32, pos32 = c.token.weight.detach().float(), c.position.weight.detach().float()
    ref = (tok32[ids] + pos32[:T]).to(torch.bfloat16)
    out = c(ids)
    assert out.dtype == torch.bfloat16
    assert torch.equal(out, ref)
    out.float().sum().backward()
    assert c.token.weight.grad.dtype == torch.bfloat16
    assert c.position.weight.grad.dtype == torch.bfloat16


# --- gradients ------------------------------------------------------------------


def run_backward(c, ids, g, **kw):
    c.zero_grad(set_to_none=True)
    (c(ids, **kw) * g).sum().backward()
    return c.token.weight.grad.clone(), c.position.weight.grad.clone()


def test_gradients_bitwise_equal_nn_embedding():
    c = composer(seed=1, padding_idx=3)
    rt, rp = reference_pair(c.token, c.position)
    ids = ids_of((4, 12), seed=7)
    ids[0, :3] = 3  # padding rows appear
    g = torch.randn(4, 12, D, generator=torch.Generator().manual_seed(8))
    d_tok, d_pos = run_backward(c, ids, g)
    # Every row is used at most 48 times: the same summation order as torch's.
    (rt(ids) + rp(torch.arange(12).expand(4, 12))).mul(g).sum().backward()
    assert torch.equal(d_tok, rt.weight.grad)
    assert torch.equal(d_pos, rp.weight.grad)
    # The broadcast form (one position row per t, summed over B by torch's
    # reduction, whose order may differ): within 1e-6 relative.
    rp.zero_grad()
    (rt(ids) + rp(torch.arange(12))).mul(g).sum().backward()
    scale = g.abs().sum(0)
    assert torch.all((d_pos[:12] - rp.weight.grad[:12]).abs() <= 1e-6 * scale)
    assert torch.count_nonzero(d_pos[12:]) == 0
    assert torch.count_nonzero(d_tok[3]) == 0
    assert torch.count_nonzero(d_tok[ids.unique()[ids.unique() != 3]].abs().sum(1)) == len(ids.unique()) - 1
    untouched = sorted(set(range(V)) - set(ids.unique().tolist()))
    assert torch.count_nonzero(d_tok[untouched]) == 0
    # Explicit positions.
    pids = ids_of((4, 12), vocab=L, seed=9)
    d_tok2, d_pos2 = run_backward(c, ids, g, position_ids=pids)
    rt.zero_grad(), rp.zero_grad()
    (rt(ids) + rp(pids)).mul(g).sum().backward()
    assert torch.equal(d_tok2, rt.weight.grad)
    assert torch.equal(d_pos2, rp.weight.grad)


def test_hot_row_gradient_within_1e6_relative():
    c = composer(seed=2)
    rt, rp = reference_pair(c.token, c.position)
    ids = torch.full((20, 10), 5)
    ids[::3, ::2] = 1
    g = torch.randn(20, 10, D, generator=torch.Generator().manual_seed(3))
    d_tok, _ = run_backward(c, ids, g)
    rt(ids).mul(g).sum().backward()
    # The exact sum, in float64; the bound is relative to the sum of magnitudes.
    exact = torch.zeros(V, D, dtype=torch.float64).index_add_(0, ids.reshape(-1), g.reshape(-1, D).double())
    scale = torch.zeros(V, D, dtype=torch.float64).index_add_(0, ids.reshape(-1), g.reshape(-1, D).double().abs())
    assert (ids == 5).sum() > 64
    assert torch.all((d_tok.double() - exact).abs() <= 1e-6 * scale)
    assert torch.all((d_tok.double() - rt.weight.grad.double()).abs() <= 1e-6 * scale)


def test_sinusoidal_buffer_gets_no_gradient():
    c = composer(learned=False)
    c(ids_of((B, T))).sum().backward()
    assert c.position.weight.grad is None
    assert c.token.weight.grad is not None


def test_token_module_and_position_module_gradients():
    tok = tt.TokenEmbedding(V, D, seed=4)
    pos = tt.LearnedPositionalEmbedding(L, D, seed=4)
    rt, rp = reference_pair(tok, pos)
    ids = ids_of((B, T), seed=4)
    pids = ids_of((B, T), vocab=L, seed=5)
    g = torch.randn(B, T, D, generator=torch.Generator().manual_seed(6))
    (tok(ids) * g).sum().backward()
    (rt(ids) * g).sum().backward()
    assert torch.equal(tok.weight.grad, rt.weight.grad)
    (pos(pids) * g).sum().backward()
    (rp(pids) * g).sum().backward()
    assert torch.equal(pos.weight.grad, rp.weight.grad)
    pos.zero_grad(), rp.zero_grad()
    (pos(T) * g[0]).sum().backward()
    (rp(torch.arange(T)) * g[0]).sum().backward()
    assert torch.equal(pos.weight.grad, rp.weight.grad)


def test_gradcheck_float64():
    # float64 tables are a float64 lookup (summed in double), gradcheck's own
    # type: its default eps and tolerances.
    ids = torch.tensor([[0, 2, 2], [4, 1, 0]])
    pids = torch.tensor([[0, 1, 2], [3, 3, 0]])
    w = torch.randn(5, 3, dtype=torch.float64, requires_grad=True)
    p = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    for pos_ids in (None, pids):
        assert torch.autograd.gradcheck(
            lambda w, p: torch.ops.tokpos.compose(ids, w, p, pos_ids, 0, -1, False), (w, p)
        )


def test_gradcheck_float32():
    # In float32 too, with a large eps (the function is linear, so finite
    # differences are exact up to float32 rounding) and matching tolerances.
    ids = torch.tensor([[0, 2, 2], [4, 1, 0]])
    pids = torch.tensor([[0, 1, 2], [3, 3, 0]])
    w = torch.randn(5, 3, requires_grad=True)
    p = torch.randn(4, 3, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        for pos_ids in (None, pids):
            assert torch.autograd.gradcheck(
                lambda w, p: torch.ops.tokpos.compose(ids, w, p, pos_ids, 0, -1, False),
                (w, p),
                eps=1e-2,
                atol=1e-3,
                rtol=1e-3,
            )


# --- custom ops ---------------------------------------------------------------


def test_opcheck_compose():
    ids = ids_of((B, T))
    pids = ids_of((B, T), vocab=L, seed=1)
    w = torch.randn(V, D, requires_grad=True)
    p = torch.randn(L, D, requires_grad=True)
    for args in (
        (ids, w, p, None, 0, -1, False),
        (ids, w, p, pids, 0, 2, False),
        (ids[0], w, None, None, 0, -1, False),
    ):
        torch.library.opcheck(torch.ops.tokpos.compose.default, args)


def test_opcheck_compose_backward():
    ids = ids_of((B, T))
    pids = ids_of((B, T), vocab=L, seed=1)
    g = torch.randn(B, T, D)
    torch.library.opcheck(torch.ops.tokpos.compose_backward.default, (g, ids, pids, 0, V, L, 2))
    torch.library.opcheck(torch.ops.tokpos.compose_backward.default, (g, ids, None, 3, V, 0, -1))


def test_opcheck_token_grad_rows():
    ids = ids_of((B, T))
    g = torch.randn(B, T, D)
    torch.library.opcheck(torch.ops.tokpos.token_grad_rows.default, (g, ids, V, 2))


def test_compose_backward_op_values():
    ids = ids_of((B, T), seed=3)
    g = torch.randn(B, T, D, generator=torch.Generator().manual_seed(4))
    d_tok, d_pos = torch.ops.tokpos.compose_backward(g, ids, None, 2, V, L, -1)
    ref_tok = torch.zeros(V, D).index_add_(0, ids.reshape(-1), g.reshape(-1, D))
    ref_pos = torch.zeros(L, D).index_add_(0, torch.arange(2, 2 + T).repeat(B), g.reshape(-1, D))
    assert torch.equal(d_tok, ref_tok)
    assert torch.equal(d_pos, ref_pos)
    empty_tok, _ = torch.ops.tokpos.compose_backward(g, ids, None, 0, 0, L, -1)
    assert empty_tok.shape == (0, D)


# --- torch.compile ----------------------------------------------------------------


def test_compile_fullgraph_matches_eager():
    c = composer(seed=6)
    ids = ids_of((B, T), seed=6)
    g = torch.randn(B, T, D, generator=torch.Generator().manual_seed(7))
    eager_out = c(ids)
    eager_tok, eager_pos = run_backward(c, ids, g)
    compiled = torch.compile(c, fullgraph=True)
    c.zero_grad(set_to_none=True)
    out = compiled(ids)
    (out * g).sum().backward()
    assert torch.equal(out, eager_out)
    assert torch.equal(c.token.weight.grad, eager_tok)
    assert torch.equal(c.position.weight.grad, eager_pos)
    # Without gradients the compiled module still traces the op (no graph break).
    with torch.no_grad():
        assert torch.equal(compiled(ids), eager_out.detach())


# --- memory sharing -------------------------------------------------------------


def test_from_pretrained_shares_memory():
    w = torch.randn(V, D)
    tok = tt.TokenEmbedding.from_pretrained(w, padding_idx=2)
    assert tok.weight.data_ptr() == w.data_ptr()
    assert tok.weight.requires_grad
    assert torch.equal(tok.weight[2], w[2])  # kept as given, as in PyTorch
    ids = torch.tensor([[2, 1, 2]])
    tok(ids).sum().backward()
    assert torch.count_nonzero(tok.weight.grad[2]) == 0
    assert torch.equal(tok.weight.grad[1], torch.ones(D))
    with torch.no_grad():
        w[1] = 7.0  # the module sees the caller's memory
    assert torch.equal(tok(ids)[0, 1], torch.full((D,), 7.0))
    frozen = tt.TokenEmbedding.from_pretrained(w, freeze=True)
    assert not frozen.weight.requires_grad
    assert frozen.weight.data_ptr() == w.data_ptr()


def test_functional_compose_writes_torch_out_in_place():
    w = torch.randn(V, D)
    p = torch.randn(L, D)
    ids = ids_of((B, T))
    out = torch.empty(B, T, D)
    got = tokpos.compose(ids, w, p, out=out)
    assert got.data_ptr() == out.data_ptr()
    assert torch.equal(out, w[ids] + p[:T])


# --- sparse gradients -----------------------------------------------------------


def test_sparse_gradient_matches_nn_embedding():
    c = composer(seed=3, padding_idx=1, sparse=True)
    rt = nn.Embedding(V, D, padding_idx=1, sparse=True)
    with torch.no_grad():
        rt.weight.copy_(c.token.weight)
    ids = ids_of((B, T), seed=5)
    ids[1, 1] = 1
    g = torch.randn(B, T, D, generator=torch.Generator().manual_seed(2))
    (c(ids) * g).sum().backward()
    (rt(ids) * g).sum().backward()
    grad = c.token.weight.grad
    assert grad.is_sparse
    touched = sorted(set(ids.reshape(-1).tolist()) - {1})
    # Only the touched rows are held, once each, sorted.
    assert grad._nnz() == len(touched)
    assert grad._indices().reshape(-1).tolist() == touched
    grad = grad.coalesce()
    assert grad.indices().reshape(-1).tolist() == touched
    ref = rt.weight.grad.coalesce()
    ref_rows = ref.indices().reshape(-1).tolist()
    ref_values = ref.values()[[ref_rows.index(r) for r in touched]]
    assert torch.equal(grad.values(), ref_values)
    assert torch.equal(grad.to_dense(), torch.zeros(V, D).index_put_((ids[ids != 1],), g[ids != 1], accumulate=True))
    # The position table's gradient stays dense.
    assert not c.position.weight.grad.is_sparse
    # A sparse optimizer step works on it.
    torch.optim.SGD(c.token.parameters(), lr=0.1).step()


# --- errors ---------------------------------------------------------------------


def test_position_past_max_context_raises_index_error():
    # The kernel's own words (tokpos::compose), the same eager, under
    # autograd and under torch.compile (test_torch_messages.py).
    c = composer()
    msg = re.escape("positions 0 .. 17 (start 0, T = 18) exceed the 16 rows of pos_table")
    with pytest.raises(IndexError, match=msg):
        c(ids_of((B, L + 2)))
    with pytest.raises(IndexError, match=re.escape("positions 14 .. 18 (start 14, T = 5) exceed the 16 rows")):
        c(ids_of((B, T)), start=14)
    pids = torch.zeros(B, T, dtype=torch.int64)
    pids[1, 2] = 130
    with pytest.raises(IndexError, match=re.escape("position id 130 at (b=1, t=2) is outside [0, 16)")):
        c(ids_of((B, T)), position_ids=pids)
    with pytest.raises(IndexError, match=re.escape("position id 130 at (b=1, t=2) is outside [0, 16)")):
        c.position(pids)
    with pytest.raises(IndexError, match=re.escape("positions 0 .. 16 (start 0, T = 17) exceed the 16 rows")):
        c.position(L + 1)
    sin = tt.SinusoidalPositionalEmbedding(128, D)
    with pytest.raises(IndexError, match=re.escape("position id 130 at (b=0, t=2) is outside [0, 128)")):
        sin(torch.tensor([[128 - 1, 5, 130]]))
    with torch.no_grad(), pytest.raises(IndexError, match=re.escape("exceed the 16 rows of pos_table")):
        c(ids_of((1, L + 1)))


def test_id_out_of_range_raises_index_error():
    c = composer()
    ids = ids_of((B, T))
    ids[2, 4] = V
    for grad in (True, False):
        with torch.set_grad_enabled(grad):
            with pytest.raises(IndexError, match=rf"id {V} at \(b=2, t=4\).*{V}"):
                c(ids)
            with pytest.raises(IndexError, match=rf"id {V} at \(b=2, t=4\).*{V}"):
                c.token(ids)


def test_bad_arguments_raise_value_error():
    with pytest.raises(ValueError):
        tt.TokenEmbedding(0, D)
    with pytest.raises(ValueError):
        tt.TokenEmbedding(V, D, padding_idx=V)
    with pytest.raises(ValueError):
        tt.EmbeddingComposer(tt.TokenEmbedding(V, D), tt.LearnedPositionalEmbedding(L, D + 1))
    with pytest.raises(ValueError):
        composer()(ids_of((B, T)).float())


# --- determinism and state --------------------------------------------------------


def test_backward_bitwise_identical_for_1_and_2_threads(keep_threads):
    c = tt.EmbeddingComposer(tt.TokenEmbedding(V, D, seed=8), tt.LearnedPositionalEmbedding(64, D, seed=8))
    ids = ids_of((6, 40), seed=8)
    g = torch.randn(6, 40, D, generator=torch.Generator().manual_seed(9))
    tokpos.set_num_threads(1)
    one = run_backward(c, ids, g)
    tokpos.set_num_threads(2)
    two = run_backward(c, ids, g)
    assert torch.equal(one[0], two[0])
    assert torch.equal(one[1], two[1])


def test_state_dict_round_trip():
    c = composer(seed=9, padding_idx=0)
    buf = io.BytesIO()
    torch.save(c.state_dict(), buf)
    buf.seek(0)
    fresh = composer(seed=10, padding_idx=0)
    assert not torch.equal(fresh.token.weight, c.token.weight)
    fresh.load_state_dict(torch.load(buf, weights_only=True))
    assert set(fresh.state_dict()) == {"token.weight", "position.weight"}
    assert torch.equal(fresh.token.weight, c.token.weight)
    assert torch.equal(fresh.position.weight, c.position.weight)
    ids = ids_of((B, T))
    assert torch.equal(fresh(ids), c(ids))
    # The sinusoidal table is recomputed, not saved.
    assert set(composer(learned=False).state_dict()) == {"token.weight"}
