"""tokpos.torch.Embedding against torch.nn.Embedding: the behaviours
PyTorch's own embedding tests check (constructor and attributes,
from_pretrained, padding_idx, max_norm, scale_grad_by_freq, sparse, shapes,
dtypes, empty tables, bad ids, every autograd mode, meta tensors, the
compiler, export, state_dict) and transformers' resize_token_embeddings.
Each case runs the same weights through both modules; results are compared
bit for bit where torch's computation is exact or sums in the same order,
and within a stated tolerance where it is not (each such case says why).

PyTorch's cases not taken here, and why:
- EmbeddingBag's (a different module; tokpos.torch has no bag reduction);
- CUDA-only ones (max_norm on CUDA against CPU, CUDA determinism, half
  tables moved to CUDA): tokpos has no CUDA kernels, a CUDA tensor goes to
  torch.nn.functional.embedding unchanged, and test_meta_device_goes_to_torch
  checks that hand-over with the meta device standing in;
- TorchScript ones: tokpos's lookup is a Python autograd.Function over a
  custom operator, which torch.jit.script does not compile (torch.compile
  and torch.export are the supported paths, both tested)."""

from __future__ import annotations

import copy

import pytest

from conftest import tokpos_torch

tt = tokpos_torch()  # or a skip saying why (torch missing or too old)

import torch  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

V, D = 11, 6
FLOATS = [torch.float64, torch.float32, torch.bfloat16, torch.float16]
SHAPES = [(), (0,), (5,), (2, 3), (2, 0), (2, 3, 4)]


def pair(dtype=torch.float32, **kw):
    """A tokpos Embedding and an nn.Embedding with the same weights."""
    ref = nn.Embedding(V, D, dtype=dtype, **kw)
    with torch.no_grad():
        ref.weight.copy_(torch.randn(V, D, generator=torch.Generator().manual_seed(3)).to(dtype))
        if ref.padding_idx is not None:
            ref.weight[ref.padding_idx].zero_()
    ours = tt.Embedding(V, D, dtype=dtype, **kw)
    ours.load_state_dict(ref.state_dict())
    return ours, ref


def ids_of(shape, vocab=V, dtype=torch.int64, seed=0):
    return torch.randint(0, vocab, shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def same_bits(a, b):
    """a and b hold the same bits (floats compared as bytes: -0.0 is not 0.0)."""
    assert a.dtype == b.dtype and a.shape == b.shape, (a.dtype, b.dtype, a.shape, b.shape)
    if a.dtype.is_floating_point:
        a, b = a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8)
    assert torch.equal(a, b)


# --- the constructor, attributes, initialisation, repr ------------------------------


def test_is_an_nn_embedding_with_the_same_attributes():
    kw = dict(padding_idx=2, max_norm=1.5, norm_type=3.0, scale_grad_by_freq=True, sparse=True)
    ours, ref = tt.Embedding(num_embeddings=V, embedding_dim=D, **kw), nn.Embedding(num_embeddings=V, embedding_dim=D, **kw)
    assert isinstance(ours, nn.Embedding)
    for name in ("num_embeddings", "embedding_dim", "padding_idx", "max_norm", "norm_type", "scale_grad_by_freq", "sparse"):
        assert getattr(ours, name) == getattr(ref, name), name
    assert tt.Embedding(V, D, 4).padding_idx == nn.Embedding(V, D, 4).padding_idx == 4  # positional padding_idx
    defaults = tt.Embedding(V, D)
    assert (defaults.padding_idx, defaults.max_norm, defaults.norm_type, defaults.scale_grad_by_freq, defaults.sparse) == (
        None,
        None,
        2.0,
        False,
        False,
    )


def test_same_torch_seed_same_table_and_padding_row_zero():
    torch.manual_seed(7)
    ref = nn.Embedding(V, D, padding_idx=3)
    torch.manual_seed(7)
    ours = tt.Embedding(V, D, padding_idx=3)
    same_bits(ours.weight.detach(), ref.weight.detach())
    assert not ours.weight[3].any()
    torch.manual_seed(8)
    ours.reset_parameters()
    torch.manual_seed(8)
    ref.reset_parameters()
    same_bits(ours.weight.detach(), ref.weight.detach())


def test_repr_and_extra_repr_are_torchs():
    for kw in ({}, dict(padding_idx=1, max_norm=2.0, norm_type=1.0, scale_grad_by_freq=True, sparse=True)):
        assert repr(tt.Embedding(V, D, **kw)) == repr(nn.Embedding(V, D, **kw))


def test_negative_padding_idx_is_normalised_and_out_of_range_refused():
    assert tt.Embedding(V, D, padding_idx=-2).padding_idx == nn.Embedding(V, D, padding_idx=-2).padding_idx == V - 2
    for bad in (V, -V - 1):
        with pytest.raises(AssertionError):
            nn.Embedding(V, D, padding_idx=bad)
        with pytest.raises(AssertionError):
            tt.Embedding(V, D, padding_idx=bad)


def test_weight_freeze_device_dtype_keywords():
    w = torch.randn(V, D, dtype=torch.float64)
    ours, ref = tt.Embedding(V, D, _weight=w, _freeze=True), nn.Embedding(V, D, _weight=w, _freeze=True)
    assert ours.weight.requires_grad is ref.weight.requires_grad is False
    same_bits(ours.weight.detach(), w)
    with pytest.raises(AssertionError):
        tt.Embedding(V + 1, D, _weight=w)
    m = tt.Embedding(V, D, device="cpu", dtype=torch.bfloat16)
    assert m.weight.dtype == torch.bfloat16 and m.weight.device.type == "cpu"


def test_state_dict_round_trip_with_nn_embedding():
    ours, ref = pair()
    assert list(ours.state_dict()) == list(ref.state_dict()) == ["weight"]
    other = nn.Embedding(V, D)
    other.load_state_dict(ours.state_dict())
    same_bits(other.weight.detach(), ours.weight.detach())
    back = tt.Embedding(V, D)
    back.load_state_dict(other.state_dict())
    same_bits(back.weight.detach(), ref.weight.detach())


def test_pickles_by_its_public_name():
    import io

    ours, _ = pair(padding_idx=1)
    buf = io.BytesIO()
    torch.save(ours, buf)
    buf.seek(0)
    back = torch.load(buf, weights_only=False)
    assert type(back) is tt.Embedding and back.padding_idx == 1
    same_bits(back.weight.detach(), ours.weight.detach())


# --- from_pretrained -------------------------------------------------------------------


def test_from_pretrained_defaults_to_frozen_and_keeps_its_options():
    w = torch.randn(V, D)
    ours = tt.Embedding.from_pretrained(w, padding_idx=1, max_norm=3.0, norm_type=1.5, scale_grad_by_freq=True)
    ref = nn.Embedding.from_pretrained(w, padding_idx=1, max_norm=3.0, norm_type=1.5, scale_grad_by_freq=True)
    assert type(ours) is tt.Embedding
    assert ours.weight.requires_grad is ref.weight.requires_grad is False
    for name in ("padding_idx", "max_norm", "norm_type", "scale_grad_by_freq", "sparse"):
        assert getattr(ours, name) == getattr(ref, name)
    assert tt.Embedding.from_pretrained(w, freeze=False).weight.requires_grad
    with pytest.raises(AssertionError):
        tt.Embedding.from_pretrained(torch.randn(V))  # 2-D only, as torch


def test_from_pretrained_float64_and_integer_weights_as_torch():
    w64 = torch.randn(V, D, dtype=torch.float64)
    ids = ids_of((3, 4))
    same_bits(tt.Embedding.from_pretrained(w64)(ids), nn.Embedding.from_pretrained(w64)(ids))
    wint = torch.arange(V * D).reshape(V, D)  # frozen integer weights: torch takes them (looked up by torch)
    same_bits(tt.Embedding.from_pretrained(wint)(ids), nn.Embedding.from_pretrained(wint)(ids))
    for cls in (nn.Embedding, tt.Embedding):  # an integer weight cannot require grad
        with pytest.raises(RuntimeError):
            cls.from_pretrained(wint, freeze=False)


# --- the forward -----------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("id_dtype", [torch.int32, torch.int64])
def test_forward_bitwise_for_every_dtype_and_shape(dtype, shape, id_dtype):
    ours, ref = pair(dtype)
    ids = ids_of(shape, dtype=id_dtype)
    with torch.no_grad():
        same_bits(ours(ids), ref(ids))
    same_bits(ours(ids), ref(ids))  # under autograd as well


def test_forward_of_non_contiguous_ids():
    ours, ref = pair()
    ids = ids_of((4, 6))[:, ::2]
    same_bits(ours(ids), ref(ids))


@pytest.mark.parametrize("vd", [(0, D), (V, 0), (0, 0)])
def test_empty_vocabulary_or_dimension(vd):
    v, d = vd
    ours, ref = tt.Embedding(v, d), nn.Embedding(v, d)
    ids = torch.zeros((2, 3), dtype=torch.int64) if v else torch.zeros((2, 0), dtype=torch.int64)
    out = ours(ids)
    same_bits(out, ref(ids))
    out.sum().backward()
    assert ours.weight.grad.shape == (v, d)


@pytest.mark.parametrize("bad", [V, -1, 10**6])
def test_out_of_range_ids_raise_index_error(bad):
    ours, ref = pair()
    ids = torch.tensor([[0, 1], [2, bad]])
    with pytest.raises(IndexError):
        ref(ids)
    with pytest.raises(IndexError):
        ours(ids)


def test_float_ids_are_refused_as_torch_refuses_them():
    ours, ref = pair()
    ids = torch.tensor([0.0, 1.0])
    with pytest.raises(RuntimeError):
        ref(ids)
    with pytest.raises(RuntimeError):
        ours(ids)


def test_max_norm_renormalises_the_looked_up_rows_in_place():
    for norm_type in (2.0, 1.0, 3.5):
        ours, ref = pair(max_norm=1.0, norm_type=norm_type)
        with torch.no_grad():
            ours.weight.mul_(3)
            ref.weight.mul_(3)
        ids = torch.tensor([[0, 2, 2], [5, 0, 7]])
        same_bits(ours(ids), ref(ids))
        same_bits(ours.weight.detach(), ref.weight.detach())
        untouched = [r for r in range(V) if r not in (0, 2, 5, 7)]
        assert (ours.weight[untouched].norm(p=norm_type, dim=1) > 1.0).all()


def test_functional_form_matches_torchs_with_every_option():
    w = torch.randn(V, D, generator=torch.Generator().manual_seed(12)) * 3
    ids = torch.tensor([[4, 1, 4], [9, 0, 2]])
    for kw in ({}, dict(padding_idx=-3), dict(max_norm=2.0, norm_type=1.5), dict(scale_grad_by_freq=True)):
        a, b = w.clone(), w.clone()
        same_bits(tt.embedding(ids, a, **kw), F.embedding(ids, b, **kw))
        same_bits(a, b)


def test_max_norm_with_unsorted_repeating_ids_and_the_output_norms():
    ours, ref = pair(max_norm=0.5)
    ids = torch.tensor([7, 1, 7, 7, 0, 1, 3, 0])
    out = ours(ids)
    same_bits(out, ref(ids))
    same_bits(ours.weight.detach(), ref.weight.detach())
    assert (out.norm(dim=-1) <= 0.5 * (1 + 1e-6)).all()


def test_max_norm_backward_and_forward_ad():
    # The renormalisation is done without grad: the gradient flows through
    # the renormalised rows only, as in torch.
    ours, ref = pair(torch.float64, max_norm=1.0)
    ids = torch.tensor([[1, 2, 1]])
    g = torch.randn(1, 3, D, dtype=torch.float64)
    ours(ids).backward(g)
    ref(ids).backward(g)
    same_bits(ours.weight.grad, ref.weight.grad)
    w, t = torch.randn(V, D, dtype=torch.float64) * 4, torch.randn(V, D, dtype=torch.float64)
    results = []
    for f in (tt.embedding, F.embedding):
        with torch.autograd.forward_ad.dual_level():
            dual = torch.autograd.forward_ad.make_dual(w.clone(), t)
            out = f(ids, dual, max_norm=1.0)
            results.append(torch.autograd.forward_ad.unpack_dual(out))
    same_bits(results[0].primal, results[1].primal)
    same_bits(results[0].tangent, results[1].tangent)


def test_a_table_that_is_not_2_d_is_refused_as_torch():
    for f in (F.embedding, tt.embedding):
        with pytest.raises(RuntimeError, match="2-D"):
            f(torch.tensor([0]), torch.randn(()))


# --- gradients -------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("padding_idx", [None, 4, -1])
def test_backward_bitwise_where_the_sum_order_matches(dtype, padding_idx):
    # Each row used at most 64 times: tokpos and torch's CPU backward both add
    # a row's sources one at a time in increasing position.
    ours, ref = pair(dtype, padding_idx=padding_idx)
    ids = ids_of((4, 9))
    g = torch.randn(4, 9, D, dtype=dtype, generator=torch.Generator().manual_seed(1))
    ours(ids).backward(g)
    ref(ids).backward(g)
    same_bits(ours.weight.grad, ref.weight.grad)
    if padding_idx is not None:
        assert not ours.weight.grad[ours.padding_idx].any()


def test_backward_of_hot_rows_within_rounding():
    # A row used more than 64 times: tokpos sums blocks of 64 (its fixed,
    # thread-count independent order), torch one at a time, so the float32
    # sums differ by rounding only.
    ours, ref = pair()
    ids = ids_of((8, 100), vocab=3)
    g = torch.randn(8, 100, D, generator=torch.Generator().manual_seed(2))
    ours(ids).backward(g)
    ref(ids).backward(g)
    torch.testing.assert_close(ours.weight.grad, ref.weight.grad, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_backward_of_16_bit_tables_within_rounding(dtype):
    # tokpos adds in float32 and rounds once; torch adds in the table's type.
    ours, ref = pair(dtype)
    ids = ids_of((3, 7))
    g = torch.randn(3, 7, D, generator=torch.Generator().manual_seed(4)).to(dtype)
    ours(ids).backward(g)
    ref(ids).backward(g)
    assert ours.weight.grad.dtype == dtype
    torch.testing.assert_close(ours.weight.grad.float(), ref.weight.grad.float(), rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("dim", [6, 64, 67])
def test_scale_grad_by_freq_bitwise(dtype, dim):
    # torch's CPU backward adds each count-scaled row with a fused
    # multiply-add, grad = fma(1/count, g, grad), one at a time whatever the
    # count; tokpos's scaled backward is defined the same way. Rows used
    # more than 64 times included (there are no blocks on this path).
    kw = dict(dtype=dtype, scale_grad_by_freq=True, padding_idx=2)
    ref = nn.Embedding(V, dim, **kw)
    ours = tt.Embedding(V, dim, **kw)
    ours.load_state_dict(ref.state_dict())
    ids = ids_of((6, 50), vocab=5)
    g = torch.randn(6, 50, dim, dtype=dtype, generator=torch.Generator().manual_seed(5))
    ours(ids).backward(g)
    ref(ids).backward(g)
    same_bits(ours.weight.grad, ref.weight.grad)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_scale_grad_by_freq_of_16_bit_tables_within_rounding(dtype):
    # tokpos adds in float32 and rounds once; torch rounds at every addition.
    ours, ref = pair(dtype, scale_grad_by_freq=True)
    ids = ids_of((3, 7), vocab=4)
    g = torch.randn(3, 7, D, generator=torch.Generator().manual_seed(4)).to(dtype)
    ours(ids).backward(g)
    ref(ids).backward(g)
    torch.testing.assert_close(ours.weight.grad.float(), ref.weight.grad.float(), rtol=2e-2, atol=2e-2)


def test_sparse_gradient_is_torchs():
    ours, ref = pair(sparse=True, padding_idx=3)
    ids = torch.tensor([[1, 3, 1], [4, 0, 3]])
    g = torch.randn(2, 3, D, generator=torch.Generator().manual_seed(6))
    ours(ids).backward(g)
    ref(ids).backward(g)
    assert ours.weight.grad.is_sparse and ref.weight.grad.is_sparse
    same_bits(ours.weight.grad._indices(), ref.weight.grad._indices())
    same_bits(ours.weight.grad._values(), ref.weight.grad._values())
    same_bits(ours.weight.grad.to_dense(), ref.weight.grad.to_dense())


def test_sparse_gradient_of_an_empty_batch():
    ours, ref = pair(sparse=True)
    ids = torch.zeros((0,), dtype=torch.int64)
    ours(ids).sum().backward()
    ref(ids).sum().backward()
    assert ours.weight.grad.is_sparse and ours.weight.grad._nnz() == ref.weight.grad._nnz() == 0
    same_bits(ours.weight.grad.to_dense(), ref.weight.grad.to_dense())


def test_sparse_with_scale_grad_by_freq_is_refused_as_torch():
    for cls in (nn.Embedding, tt.Embedding):
        m = cls(V, D, sparse=True, scale_grad_by_freq=True)
        with pytest.raises(RuntimeError, match="scale_grad_by_freq not supported with sparse"):
            m(ids_of((2, 3))).sum().backward()


def test_frozen_table_gets_no_gradient():
    w = torch.randn(V, D)
    m = tt.Embedding.from_pretrained(w)
    out = m(ids_of((2, 3)))
    assert not out.requires_grad


# --- autograd modes ----------------------------------------------------------------


def lookups(padding_idx=None, scale=False):
    ids = ids_of((2, 3), vocab=5)
    return (
        lambda w: tt.embedding(ids, w, padding_idx=padding_idx, scale_grad_by_freq=scale),
        lambda w: F.embedding(ids, w, padding_idx=padding_idx, scale_grad_by_freq=scale),
    )


@pytest.mark.parametrize("padding_idx,scale", [(None, False), (2, False), (None, True), (1, True)])
def test_gradcheck_and_gradgradcheck_in_float64(padding_idx, scale):
    # scale_grad_by_freq's gradient is by design not the derivative (torch's
    # fails gradcheck alike), so it gets gradgradcheck only: the derivative
    # of its backward, a linear map of the output gradient.
    ours, _ = lookups(padding_idx, scale)
    w = torch.randn(5, 3, dtype=torch.float64, requires_grad=True)
    if not scale:
        assert torch.autograd.gradcheck(ours, (w,), check_forward_ad=True, check_backward_ad=True)
    assert torch.autograd.gradgradcheck(ours, (w,), check_fwd_over_rev=True, check_rev_over_rev=True)


def test_double_backward_matches_torch():
    # The weight's gradient is linear in the output gradient v; its
    # derivative with respect to v is a lookup (padding rows zero).
    ours, ref = lookups(padding_idx=2)
    w = torch.randn(5, 3, dtype=torch.float64, requires_grad=True)
    u = torch.randn(5, 3, dtype=torch.float64)
    results = []
    for f in (ours, ref):
        v = torch.randn(2, 3, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(9), requires_grad=True)
        (gw,) = torch.autograd.grad(f(w), w, grad_outputs=v, create_graph=True)
        results.append(torch.autograd.grad((gw * u).sum(), v)[0])
    same_bits(results[0], results[1])


def test_double_backward_of_scale_grad_by_freq_includes_the_count():
    # The scaled backward is g -> sum over n of g[n] / count(ids[n]); its
    # derivative with respect to g is the lookup divided by the count. torch's
    # CPU double backward leaves the 1/count out (it returns the plain lookup),
    # so here the reference is that formula, not torch.
    ids = ids_of((2, 3), vocab=5)
    w = torch.randn(5, 3, dtype=torch.float64, requires_grad=True)
    u = torch.randn(5, 3, dtype=torch.float64)
    v = torch.randn(2, 3, 3, dtype=torch.float64, requires_grad=True)
    (gw,) = torch.autograd.grad(tt.embedding(ids, w, scale_grad_by_freq=True), w, grad_outputs=v, create_graph=True)
    (gv,) = torch.autograd.grad((gw * u).sum(), v)
    counts = torch.bincount(ids.reshape(-1), minlength=5).double()
    same_bits(gv, F.embedding(ids, u) * (1.0 / counts[ids]).unsqueeze(-1))


def test_forward_mode_ad_gives_the_lookup_of_the_tangent():
    ours, ref = lookups()
    w, t = torch.randn(5, 3, dtype=torch.float64), torch.randn(5, 3, dtype=torch.float64)
    with torch.autograd.forward_ad.dual_level():
        out = ours(torch.autograd.forward_ad.make_dual(w, t))
        tangent = torch.autograd.forward_ad.unpack_dual(out).tangent
    assert tangent is not None
    same_bits(tangent, ref(t))


def test_func_jvp_grad_vmap_jacrev_match_torch():
    ours, ref = lookups(padding_idx=1)
    w, t = torch.randn(5, 3, dtype=torch.float64), torch.randn(5, 3, dtype=torch.float64)
    o, r = torch.func.jvp(ours, (w,), (t,)), torch.func.jvp(ref, (w,), (t,))
    same_bits(o[0], r[0])
    same_bits(o[1], r[1])
    same_bits(torch.func.grad(lambda x: (ours(x) ** 2).sum())(w), torch.func.grad(lambda x: (ref(x) ** 2).sum())(w))
    ws = torch.randn(4, 5, 3, dtype=torch.float64)
    same_bits(torch.func.vmap(ours)(ws), torch.func.vmap(ref)(ws))
    ids = ids_of((4, 2, 3), vocab=5)
    same_bits(
        torch.func.vmap(lambda i: tt.embedding(i, w))(ids), torch.func.vmap(lambda i: F.embedding(i, w))(ids)
    )
    same_bits(torch.func.jacrev(ours)(w), torch.func.jacrev(ref)(w))
    same_bits(torch.func.jacfwd(ours)(w), torch.func.jacfwd(ref)(w))
    hess = torch.func.hessian(lambda x: (ours(x) ** 3).sum())(w)
    same_bits(hess, torch.func.hessian(lambda x: (ref(x) ** 3).sum())(w))


# --- other devices, the compiler, export --------------------------------------------


def test_meta_device_goes_to_torch():
    # tokpos has no meta kernel: the call is torch.nn.functional.embedding on
    # that device (as for CUDA or MPS), so shapes propagate as torch's do.
    m = tt.Embedding(V, D, device="meta", padding_idx=2)
    out = m(torch.zeros((2, 3, 4), dtype=torch.int64, device="meta"))
    assert out.device.type == "meta" and out.shape == (2, 3, 4, D)


def test_fake_tensors_propagate_shapes():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        m = tt.Embedding(V, D)
        out = m(torch.zeros((2, 5), dtype=torch.int64))
    assert out.shape == (2, 5, D)


def test_compile_fullgraph_forward_and_backward():
    ours, ref = pair()
    ids = ids_of((2, 7))
    compiled = torch.compile(ours, fullgraph=True, backend="aot_eager")
    out = compiled(ids)
    same_bits(out, ref(ids))
    out.sum().backward()
    ref(ids).sum().backward()
    same_bits(ours.weight.grad, ref.weight.grad)


@pytest.mark.parametrize("strict", [False, True])
def test_export(strict):
    ours, ref = pair(padding_idx=1)
    ids = ids_of((2, 7))
    ep = torch.export.export(ours, (ids,), strict=strict)
    same_bits(ep.module()(ids), ref(ids))
    same_bits(ep.run_decompositions().module()(ids), ref(ids))


def test_compile_with_dynamic_shapes():
    ours, ref = pair()
    compiled = torch.compile(ours, fullgraph=True, dynamic=True, backend="aot_eager")
    for shape in ((2, 7), (3, 5), (4,), ()):
        ids = ids_of(shape)
        same_bits(compiled(ids), ref(ids))


def test_compiled_double_backward_and_sparse_are_clear_errors():
    # Under torch.compile the lookup's backward is an operator without
    # autograd (Dynamo traces no custom jvp), and Dynamo cannot trace the
    # sparse gradient's constructor: both are errors, never a wrong result.
    m = tt.Embedding(V, D, dtype=torch.float64)
    compiled = torch.compile(m, fullgraph=True, backend="aot_eager")
    ids = ids_of((2, 3))
    v = torch.randn(2, 3, D, dtype=torch.float64, requires_grad=True)
    (gw,) = torch.autograd.grad(compiled(ids), m.weight, grad_outputs=v, create_graph=True)
    with pytest.raises(RuntimeError, match="double backward"):
        torch.autograd.grad(gw.sum(), v)
    sparse = torch.compile(tt.Embedding(V, D, sparse=True), fullgraph=True, backend="aot_eager")
    with pytest.raises(Exception, match="sparse_coo_tensor"):
        sparse(ids).sum().backward()


# --- TokenEmbedding shares the lookup ---------------------------------------------------


def test_token_embedding_takes_float64_and_every_autograd_mode():
    w = torch.randn(V, D, dtype=torch.float64)
    ours = tt.TokenEmbedding.from_pretrained(w.clone(), padding_idx=2)
    ref = nn.Embedding.from_pretrained(w.clone(), freeze=False, padding_idx=2)
    ids = ids_of((3, 4))
    same_bits(ours(ids), ref(ids))
    g = torch.randn(3, 4, D, dtype=torch.float64)
    ours(ids).backward(g)
    ref(ids).backward(g)
    same_bits(ours.weight.grad, ref.weight.grad)
    t = torch.randn(V, D, dtype=torch.float64)
    call = lambda m: lambda p: torch.func.functional_call(m, {"weight": p}, (ids,))  # noqa: E731
    o, r = torch.func.jvp(call(ours), (w,), (t,)), torch.func.jvp(call(ref), (w,), (t,))
    same_bits(o[1], r[1])
    with torch.autograd.forward_ad.dual_level():
        out = call(ours)(torch.autograd.forward_ad.make_dual(w, t))
        same_bits(torch.autograd.forward_ad.unpack_dual(out).tangent, r[1])
    loss = lambda m: lambda p: (call(m)(p) ** 2).sum()  # noqa: E731
    same_bits(torch.func.grad(loss(ours))(w), torch.func.grad(loss(ref))(w))
    same_bits(torch.func.jacrev(call(ours))(w), torch.func.jacrev(call(ref))(w))
    x = w.clone().requires_grad_()
    assert torch.autograd.gradcheck(call(ours), (x,), check_forward_ad=True)


def test_token_embedding_on_another_device_goes_to_torch():
    # The lesson's module hands a device tokpos has no kernels for to
    # torch.nn.functional.embedding, as Embedding does; the meta device
    # stands in for CUDA and MPS. On the CPU it is tokpos's own lookup.
    m = tt.TokenEmbedding(V, D, padding_idx=2, sparse=True)
    cpu_ids = ids_of((2, 3))
    same_bits(m(cpu_ids), F.embedding(cpu_ids, m.weight, padding_idx=2))
    m = m.to("meta")
    out = m(torch.zeros((2, 3, 4), dtype=torch.int64, device="meta"))
    assert out.device.type == "meta" and out.shape == (2, 3, 4, D)


@pytest.mark.parametrize("padding_idx", [None, 2])
def test_token_embedding_double_backward_matches_torch(padding_idx):
    w = torch.randn(V, D, dtype=torch.float64)
    ours = tt.TokenEmbedding.from_pretrained(w.clone(), padding_idx=padding_idx)
    ref = nn.Embedding.from_pretrained(w.clone(), freeze=False, padding_idx=padding_idx)
    ids = ids_of((2, 3), vocab=5)
    u = torch.randn(V, D, dtype=torch.float64)
    results = []
    for m in (ours, ref):
        v = torch.randn(2, 3, D, dtype=torch.float64, generator=torch.Generator().manual_seed(1), requires_grad=True)
        (gw,) = torch.autograd.grad(m(ids), m.weight, grad_outputs=v, create_graph=True)
        results.append(torch.autograd.grad((gw * u).sum(), v)[0])
    same_bits(results[0], results[1])
    call = lambda p: torch.func.functional_call(ours, {"weight": p}, (ids,))  # noqa: E731
    assert torch.autograd.gradgradcheck(call, (w.clone().requires_grad_(),))


@pytest.mark.parametrize("vocab,pos_rows", [(5, 0), (0, 6), (5, 6)])
@pytest.mark.parametrize("padding_idx,scale", [(-1, False), (2, False), (-1, True), (1, True)])
def test_the_backward_operator_is_differentiable(vocab, pos_rows, padding_idx, scale):
    # tokpos::compose_backward is linear in d_out; gradcheck checks its
    # registered backward (the adjoint lookup) against finite differences.
    ids = torch.tensor([[0, 1, 2], [2, 4, 4]])
    d_out = torch.randn(2, 3, 3, dtype=torch.float64, requires_grad=True)

    def f(d):
        return torch.ops.tokpos.compose_backward(d, ids, None, 1, vocab, pos_rows, padding_idx, scale)

    assert torch.autograd.gradcheck(f, (d_out,))


def test_composer_gradgradcheck_in_float64():
    c = tt.EmbeddingComposer(tt.TokenEmbedding(7, 4), tt.LearnedPositionalEmbedding(6, 4))
    ids = torch.tensor([[0, 1, 2], [2, 4, 6]])
    tok = c.token.weight.detach().double().requires_grad_()
    pos = c.position.weight.detach().double().requires_grad_()
    call = lambda t, p: torch.func.functional_call(c, {"token.weight": t, "position.weight": p}, (ids,))  # noqa: E731
    assert torch.autograd.gradgradcheck(call, (tok, pos))


# --- transformers -----------------------------------------------------------------------


def test_resize_token_embeddings_of_a_gpt2_with_tokpos_wte():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.GPT2Config(vocab_size=40, n_positions=16, n_embd=8, n_layer=1, n_head=2)
    torch.manual_seed(0)
    ref = transformers.GPT2LMHeadModel(cfg).eval()
    ours = copy.deepcopy(ref)
    wte = ours.transformer.wte
    swapped = tt.Embedding(wte.num_embeddings, wte.embedding_dim)
    swapped.weight = wte.weight  # the same Parameter: the tie to lm_head stays
    ours.set_input_embeddings(swapped)
    ids = torch.randint(0, 40, (2, 5), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        same_bits(ours(ids).logits, ref(ids).logits)
    torch.manual_seed(5)
    ref.resize_token_embeddings(48)
    torch.manual_seed(5)
    ours.resize_token_embeddings(48)
    assert type(ours.get_input_embeddings()) is tt.Embedding
    assert ours.get_input_embeddings().num_embeddings == 48
    assert ours.get_input_embeddings().weight is ours.get_output_embeddings().weight
    ids = torch.randint(0, 48, (2, 5), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        same_bits(ours(ids).logits, ref(ids).logits)


def test_a_gpt2_training_step_gives_torchs_gradients():
    # wte tied to lm_head: the tied weight's gradient is the head's plus the
    # lookup's, bitwise equal when each id occurs at most 64 times.
    transformers = pytest.importorskip("transformers")
    cfg = transformers.GPT2Config(vocab_size=40, n_positions=16, n_embd=8, n_layer=1, n_head=2)
    torch.manual_seed(0)
    ref = transformers.GPT2LMHeadModel(cfg)
    ours = copy.deepcopy(ref)
    swapped = tt.Embedding(cfg.vocab_size, cfg.n_embd)
    swapped.weight = ours.transformer.wte.weight
    ours.set_input_embeddings(swapped)
    assert sum(1 for _ in ours.parameters()) == sum(1 for _ in ref.parameters())
    ids = torch.randint(0, 40, (2, 9), generator=torch.Generator().manual_seed(3))
    for m in (ours, ref):
        m.train()
        torch.manual_seed(11)  # the same dropout masks
        m(ids, labels=ids).loss.backward()
    for (name, p), (_, q) in zip(ours.named_parameters(), ref.named_parameters()):
        same_bits(p.grad, q.grad)
