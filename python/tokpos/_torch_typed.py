"""BERT's input sum as a torch operator (private: tokpos.hf's BERT family
calls it).

    compose_typed(...)      the one way in: the kernel directly when nothing
                            needs autograd or the compiler, else the op
    tokpos::compose_typed   torch.library custom op, its fake kernel and autograd

out (B, T, D) = (token_table[ids] + type_table[type_ids]) + pos_table[position_ids]
(position_ids (B, T), or one (1, T) row shared by every b) in that order,
each addition in float32 as transformers' BertEmbeddings adds the three
looked-up rows (the core's compose_typed_forward, without its LayerNorm: the
model keeps its own). float32 tables only, as the kernel.

The backward reuses tokpos::compose_backward, once per table, each table's
rows summed as compose's backward sums them (tokpos.h states the order); a
shared position row's gradient is d_out summed over B by torch first, as a
broadcast add's backward sums it, then per row. padding_idx (token rows) and
pos_padding_idx (position rows, RoBERTa's) get no gradient, as
nn.Embedding's padding_idx.

Under forward-mode AD and torch.func the op goes through _ComposeTyped, an
autograd.Function with setup_context, jvp (the sum is linear in the three
tables: its tangent is the same sum of their tangents) and vmap (one call
per batch element); fake tensors go through the op's fake kernel.
"""

from __future__ import annotations

import torch
from torch import Tensor

from . import _core
from ._torch_ops import _compose_backward_op, _ComposeBackward, by_element, direct, plain, require_cpu, transformed
from ._torch_ops import fake_empty, require_host

KERNEL = "tokpos::compose_typed"
NAMES = ("ids", "token_table", "type_ids", "type_table", "pos_table", "position_ids")


def compose_typed_kernel(ids, token_table, type_ids, type_table, pos_table, position_ids, where=KERNEL) -> Tensor:
    """The sum in a new (B, T, D) tensor by one call of the core, which
    validates shapes, dtypes, ids, types and positions and names the problem.
    A (1, T) position row is read for every b."""
    require_cpu(where, NAMES, ids, token_table, type_ids, type_table, pos_table, position_ids)
    if ids.dim() == 2 and position_ids.dim() == 2 and position_ids.shape[0] == 1:
        position_ids = position_ids.expand(ids.shape[0], -1).contiguous()
    out = torch.empty([*ids.shape, token_table.shape[-1]], dtype=token_table.dtype, device="cpu")
    _core.compose_typed(
        out,
        plain(ids),
        plain(token_table),
        plain(type_ids),
        plain(type_table),
        plain(pos_table),
        plain(position_ids),
        KERNEL,
    )
    return out


@torch.library.custom_op("tokpos::compose_typed", mutates_args=(), device_types="cpu")
def _compose_typed_op(
    ids: Tensor,
    token_table: Tensor,
    type_ids: Tensor,
    type_table: Tensor,
    pos_table: Tensor,
    position_ids: Tensor,
    padding_idx: int,
    pos_padding_idx: int,
) -> Tensor:
    """(token_table[ids] + type_table[type_ids]) + pos_table[position_ids],
    float32; the padding indices matter to the backward only."""
    return compose_typed_kernel(ids, token_table, type_ids, type_table, pos_table, position_ids)


@_compose_typed_op.register_fake
def _compose_typed_fake(ids, token_table, type_ids, type_table, pos_table, position_ids, padding_idx, pos_padding_idx):
    require_host(KERNEL, NAMES, ids, token_table, type_ids, type_table, pos_table, position_ids)
    torch._check(token_table.dim() == 2, lambda: f"{KERNEL}: token_table must be 2-D")
    torch._check(ids.dim() in (1, 2), lambda: f"{KERNEL}: ids must be 1-D or 2-D")
    return fake_empty(
        token_table, [*ids.shape, token_table.shape[1]], token_table.dtype,
        ids, type_ids, type_table, pos_table, position_ids,
    )


def _setup_context(ctx, inputs, output):
    ids, token_table, type_ids, type_table, pos_table, position_ids, padding_idx, pos_padding_idx = inputs
    ctx.save_for_backward(ids, type_ids, position_ids)
    ctx.rows = (token_table.shape[0], type_table.shape[0], pos_table.shape[0])
    ctx.padding = (padding_idx, -1, pos_padding_idx)


def _backward(ctx, d_out, backward_op=_compose_backward_op):
    # One compose_backward per table, its index tensor as the "ids" of a token table.
    ids, type_ids, position_ids = ctx.saved_tensors[:3]
    wanted = (ctx.needs_input_grad[1], ctx.needs_input_grad[3], ctx.needs_input_grad[4])
    d_outs = [d_out, d_out, d_out]
    if ids.dim() == 2 and position_ids.dim() == 2 and position_ids.shape[0] == 1:
        # A shared row: d_out summed over B by torch first, as the backward
        # of a broadcast add (BertEmbeddings' + position_embeddings) sums it.
        d_outs[2] = d_out.sum(0)
        position_ids = position_ids.reshape(-1)
    grads = []
    for g, index, rows, padding, want in zip(d_outs, (ids, type_ids, position_ids), ctx.rows, ctx.padding, wanted):
        grads.append(backward_op(g, index, None, 0, rows, 0, padding, False)[0] if want else None)
    d_tok, d_type, d_pos = grads
    return None, d_tok, None, d_type, d_pos, None, None, None


_compose_typed_op.register_autograd(_backward, setup_context=_setup_context)


class _ComposeTyped(torch.autograd.Function):
    """tokpos::compose_typed with setup_context, backward, jvp and vmap."""

    @staticmethod
    def forward(ids, token_table, type_ids, type_table, pos_table, position_ids, padding_idx, pos_padding_idx):
        return _compose_typed_op(
            ids, token_table, type_ids, type_table, pos_table, position_ids, padding_idx, pos_padding_idx
        )

    @staticmethod
    def setup_context(ctx, inputs, output):
        _setup_context(ctx, inputs, output)
        ctx.save_for_forward(inputs[0], inputs[2], inputs[5])
        ctx.shapes = tuple((tuple(t.shape), t.dtype, t.device) for t in (inputs[1], inputs[3], inputs[4]))
        ctx.set_materialize_grads(False)  # a table without a tangent gets None in jvp, not a zero table

    @staticmethod
    def backward(ctx, d_out):
        if d_out is None:
            return (None,) * 8
        return _backward(ctx, d_out, _ComposeBackward.apply)

    @staticmethod
    def jvp(ctx, ids_t, token_t, type_ids_t, type_t, pos_t, *_):
        ids, type_ids, position_ids = ctx.saved_tensors
        tangents = [
            t if t is not None else torch.zeros(shape, dtype=dtype, device=device)
            for t, (shape, dtype, device) in zip((token_t, type_t, pos_t), ctx.shapes)
        ]
        return _ComposeTyped.apply(ids, tangents[0], type_ids, tangents[1], tangents[2], position_ids, -1, -1)

    @staticmethod
    def vmap(info, in_dims, *args):
        return by_element(_ComposeTyped.apply, info, in_dims, *args)


def compose_typed(ids, token_table, type_ids, type_table, pos_table, position_ids, padding_idx, pos_padding_idx, where):
    """The kernel directly for plain CPU tensors when nothing needs
    autograd; _ComposeTyped under forward-mode AD and torch.func; else the
    op (autograd, the compiler, fake tensors). where names the caller in the
    CPU check (a meta tensor is refused by name here)."""
    tables = (token_table, type_table, pos_table)
    tensors = (ids, token_table, type_ids, type_table, pos_table, position_ids)
    args = (*tensors, padding_idx, pos_padding_idx)
    if not torch.compiler.is_compiling():
        if direct(*tensors):
            if not (torch.is_grad_enabled() and any(t.requires_grad for t in tables)):
                return compose_typed_kernel(*tensors, where)
        elif transformed(*tensors):
            require_cpu(where, NAMES, *tensors)
            return _ComposeTyped.apply(*args)
    require_cpu(where, NAMES, *tensors)
    return _compose_typed_op(*args)
