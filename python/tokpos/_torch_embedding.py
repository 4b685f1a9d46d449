"""tokpos.torch.Embedding and tokpos.torch.embedding: torch.nn.Embedding's
contract on tokpos's kernels (private: the public names are tokpos.torch's).

Embedding subclasses torch.nn.Embedding and changes only forward, so its
signature, attributes, defaults, reset_parameters (torch's init.normal_,
the padding row zeroed), extra_repr, from_pretrained, state_dict and
isinstance(m, nn.Embedding) are torch's own. forward is embedding(), the
functional form, which runs tokpos's lookup and backward for CPU tables of
float64, float32, bfloat16 and float16 with int32 or int64 ids of any shape,
and hands everything else (another device, meta included, an integer
table) to torch.nn.functional.embedding on that device (meta ids with a CPU
table: on the meta device, so the result is a meta tensor, where torch's
own lookup returns an uninitialised CPU tensor).

Autograd goes through two autograd.Functions, each with backward, jvp and
vmap: _Lookup (the table's rows at ids, by the tokpos::compose operator)
and _LookupBackward (the rows summed back into a table by
tokpos::compose_backward). The backward of a lookup is a _LookupBackward,
and the backward and the tangent of a _LookupBackward are lookups, so
every order of reverse and forward mode, torch.func.grad, jvp, vmap and
jacrev compose from those two; vmap runs one call per batch element.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from ._torch_ops import _compose_backward_op, _compose_op, compose_kernel, direct
from ._torch_ops import transformed as _transformed_any

TABLE_DTYPES = (torch.float64, torch.float32, torch.bfloat16, torch.float16)
INDEX_DTYPES = (torch.int32, torch.int64)
_SPARSE_SCALE = "embedding_backward: scale_grad_by_freq not supported with sparse gradients"


def _served(input: Tensor, weight: Tensor) -> bool:
    """True when tokpos's kernels take the call: CPU tensors (fake tensors
    under torch.compile and torch.export are CPU too), a 2-D float table of a
    kernel dtype and integer ids of a kernel dtype."""
    return (
        weight.device.type == "cpu"
        and input.device.type == "cpu"
        and weight.dim() == 2
        and weight.dtype in TABLE_DTYPES
        and input.dtype in INDEX_DTYPES
    )


def _padding_index(padding_idx: Optional[int], num_weights: int) -> int:
    """F.embedding's rule: None is -1; a negative index counts from the end;
    one outside [-V, V) is an AssertionError with torch's message."""
    if padding_idx is None:
        return -1
    if padding_idx > 0 and padding_idx >= num_weights:
        raise AssertionError("Padding_idx must be within num_embeddings")
    if padding_idx < 0:
        if padding_idx < -num_weights:
            raise AssertionError("Padding_idx must be within num_embeddings")
        padding_idx += num_weights
    return padding_idx


def transformed(weight: Tensor, ids: Tensor) -> bool:
    """True under a forward-mode dual level or when either tensor is a
    torch.func wrapper (grad, jvp, vmap): the modes that only _Lookup serves
    (a custom operator's registered autograd has neither a jvp nor the
    functorch support of an autograd.Function)."""
    return _transformed_any(weight, ids)


def _plain(weight: Tensor, ids: Tensor) -> bool:
    """True when nothing records, transforms or fakes the call: plain CPU
    tensors (not fake, no dispatch mode, not transformed) and no autograd on
    the table. Then the kernel runs directly (the inference fast path);
    otherwise _Lookup, whose op serves fake tensors by its fake kernel."""
    return direct(weight, ids) and not (torch.is_grad_enabled() and weight.requires_grad)


def _row_scale(ids: Tensor, num_weights: int, dtype: torch.dtype) -> Tensor:
    """(N, 1): 1 / (the count of ids[n] among ids), computed in double and
    rounded to dtype, as torch's CPU backward computes its scale."""
    counts = torch.zeros(num_weights, dtype=torch.int64, device=ids.device).index_add_(
        0, ids.long(), torch.ones_like(ids, dtype=torch.int64)
    )
    return (1.0 / counts[ids.long()].double()).to(dtype).unsqueeze(1)


def _dense_gradient(grad, ids, num_weights, padding_idx, scale_grad_by_freq, dtype):
    """d_weight (V, D) of dtype: grad's rows summed per id in increasing n
    (float64 for a float64 table, else float32, rounded once to dtype);
    padding_idx's row gets nothing; scale_grad_by_freq divides each row's
    contributions by its count (fused multiply-adds: torch's bits)."""
    d_weight, _ = _compose_backward_op(grad, ids, None, 0, num_weights, 0, padding_idx, scale_grad_by_freq)
    return d_weight.to(dtype)


def _by_element(apply, info, in_dims, x, ids, options):
    """vmap of apply(x, ids, *options) as one call per batch element, stacked
    along dim 0; x and ids are batched along in_dims[0] and in_dims[1] (None:
    shared by every element)."""
    xd, idd = in_dims[0], in_dims[1]
    outs = [
        apply(x.select(xd, b) if xd is not None else x, ids.select(idd, b) if idd is not None else ids, *options)
        for b in range(info.batch_size)
    ]
    return torch.stack(outs), 0


def _save_lookup(ctx, inputs) -> Tensor:
    """What both lookups' backwards read, saved on ctx; returns the ids."""
    weight, ids, padding_idx, scale_grad_by_freq, sparse = inputs
    ctx.save_for_backward(ids)
    ctx.num_weights = weight.shape[0]
    ctx.padding_idx = padding_idx
    ctx.scale_grad_by_freq = scale_grad_by_freq
    ctx.sparse = sparse
    ctx.dtype = weight.dtype
    return ids


class _CompiledLookup(torch.autograd.Function):
    """out (N, D) = weight[ids] for 1-D ids, as torch.compile and torch.export
    trace it: forward and backward only (Dynamo does not trace a custom jvp
    or vmap). Its backward is the tokpos::compose_backward operator; a double
    backward through compiled code is AOTAutograd's own error, never a wrong
    answer."""

    @staticmethod
    def forward(weight, ids, padding_idx, scale_grad_by_freq, sparse):
        return _compose_op(ids, weight, None, None, 0, padding_idx, sparse)

    @staticmethod
    def setup_context(ctx, inputs, output):
        _save_lookup(ctx, inputs)

    @staticmethod
    def backward(ctx, grad):
        (ids,) = ctx.saved_tensors
        if not ctx.needs_input_grad[0]:
            return None, None, None, None, None
        if ctx.sparse:
            d_weight = _sparse_gradient(grad, ids, ctx.num_weights, ctx.padding_idx, ctx.scale_grad_by_freq)
        else:
            d_weight = _dense_gradient(grad, ids, ctx.num_weights, ctx.padding_idx, ctx.scale_grad_by_freq, ctx.dtype)
        return d_weight, None, None, None, None


class _Lookup(torch.autograd.Function):
    """out (N, D) = weight[ids] for 1-D ids; padding_idx, scale_grad_by_freq
    and sparse shape only the backward."""

    @staticmethod
    def forward(weight, ids, padding_idx, scale_grad_by_freq, sparse):
        return _compose_op(ids, weight, None, None, 0, padding_idx, sparse)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_forward(_save_lookup(ctx, inputs))

    @staticmethod
    def backward(ctx, grad):
        (ids,) = ctx.saved_tensors
        if not ctx.needs_input_grad[0]:
            return None, None, None, None, None
        if ctx.sparse:
            return _sparse_gradient(grad, ids, ctx.num_weights, ctx.padding_idx, ctx.scale_grad_by_freq), None, None, None, None
        d_weight = _LookupBackward.apply(grad, ids, ctx.num_weights, ctx.padding_idx, ctx.scale_grad_by_freq, ctx.dtype)
        return d_weight, None, None, None, None

    @staticmethod
    def jvp(ctx, weight_t, *_):
        (ids,) = ctx.saved_tensors
        return _Lookup.apply(weight_t, ids, ctx.padding_idx, ctx.scale_grad_by_freq, ctx.sparse)

    @staticmethod
    def vmap(info, in_dims, weight, ids, *options):
        return _by_element(_Lookup.apply, info, in_dims, weight, ids, options)


class _LookupBackward(torch.autograd.Function):
    """_dense_gradient as a differentiable function of grad: its backward and
    its tangent are lookups (the adjoint of the scatter)."""

    @staticmethod
    def forward(grad, ids, num_weights, padding_idx, scale_grad_by_freq, dtype):
        return _dense_gradient(grad, ids, num_weights, padding_idx, scale_grad_by_freq, dtype)

    @staticmethod
    def setup_context(ctx, inputs, output):
        grad, ids, num_weights, padding_idx, scale_grad_by_freq, dtype = inputs
        ctx.save_for_backward(ids)
        ctx.save_for_forward(ids)
        ctx.num_weights = num_weights
        ctx.padding_idx = padding_idx
        ctx.scale_grad_by_freq = scale_grad_by_freq
        ctx.dtype = dtype
        ctx.grad_dtype = grad.dtype

    @staticmethod
    def _transpose(ctx, gg, ids):
        """The adjoint: gg's rows at ids, padding positions zero, scaled by 1/count."""
        out = _Lookup.apply(gg, ids, -1, False, False)
        if ctx.padding_idx >= 0:
            out = out * (ids != ctx.padding_idx).unsqueeze(1).to(out.dtype)
        if ctx.scale_grad_by_freq:
            out = out * _row_scale(ids, ctx.num_weights, out.dtype)
        return out

    @staticmethod
    def backward(ctx, gg):
        (ids,) = ctx.saved_tensors
        d_grad = _LookupBackward._transpose(ctx, gg, ids).to(ctx.grad_dtype) if ctx.needs_input_grad[0] else None
        return d_grad, None, None, None, None, None

    @staticmethod
    def jvp(ctx, grad_t, *_):
        (ids,) = ctx.saved_tensors
        return _LookupBackward.apply(grad_t, ids, ctx.num_weights, ctx.padding_idx, ctx.scale_grad_by_freq, ctx.dtype)

    @staticmethod
    def vmap(info, in_dims, grad, ids, *options):
        return _by_element(_LookupBackward.apply, info, in_dims, grad, ids, options)


def _sparse_gradient(grad: Tensor, ids: Tensor, num_weights: int, padding_idx: int, scale_grad_by_freq: bool) -> Tensor:
    """torch's sparse gradient of a lookup, made from torch's own ops (so it
    is differentiable as torch's is): an uncoalesced COO tensor with one
    entry per id other than padding_idx, in order, its values grad's rows."""
    if scale_grad_by_freq:
        raise RuntimeError(_SPARSE_SCALE)
    if padding_idx >= 0:
        keep = ids != padding_idx
        ids, grad = ids[keep], grad[keep]
    return torch.sparse_coo_tensor(
        ids.long().reshape(1, -1), grad, (num_weights, grad.shape[-1]), check_invariants=False
    )


def embedding(
    input: Tensor,
    weight: Tensor,
    padding_idx: Optional[int] = None,
    max_norm: Optional[float] = None,
    norm_type: float = 2.0,
    scale_grad_by_freq: bool = False,
    sparse: bool = False,
) -> Tensor:
    """torch.nn.functional.embedding's contract: weight's rows at input,
    shape (*input.shape, D), on tokpos's kernels where they serve (CPU,
    float64/float32/bfloat16/float16 table, int32/int64 ids), else
    torch.nn.functional.embedding itself. max_norm renormalises the looked-up
    rows of weight in place first (torch.embedding_renorm_, without grad)."""
    if not _served(input, weight):
        if input.device.type == "meta" and weight.device.type == "cpu":
            # torch's lookup would return an uninitialised CPU tensor here;
            # meta ids give the meta result of a meta table (no data read).
            weight = weight.to("meta")
        return F.embedding(input, weight, padding_idx, max_norm, norm_type, scale_grad_by_freq, sparse)
    padding_idx = _padding_index(padding_idx, weight.size(0))
    if max_norm is not None:
        input = input.contiguous()
        with torch.no_grad():  # on the detached table, as F.embedding: a dual table's tangent is left alone
            torch.embedding_renorm_(weight.detach(), input, max_norm, norm_type)
    ids = input.reshape(-1)
    if torch.compiler.is_compiling():
        out = _CompiledLookup.apply(weight, ids, padding_idx, scale_grad_by_freq, sparse)
    elif _plain(weight, ids):
        out = compose_kernel(ids, weight, None, None, 0)
    else:
        out = _Lookup.apply(weight, ids, padding_idx, scale_grad_by_freq, sparse)
    return out.reshape(*input.shape, weight.shape[1])


class Embedding(nn.Embedding):
    """torch.nn.Embedding (every argument, attribute, default and method is
    torch's: this class only replaces forward) whose forward is
    tokpos.torch.embedding: tokpos's kernels for CPU float64, float32,
    bfloat16 and float16 tables, torch.nn.functional.embedding elsewhere.
    docs/python.md lists what differs from nn.Embedding."""

    __module__ = "tokpos.torch"  # pickles and reprs name the public module

    def forward(self, input: Tensor) -> Tensor:
        return embedding(
            input, self.weight, self.padding_idx, self.max_norm, self.norm_type, self.scale_grad_by_freq, self.sparse
        )
