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
"""

from __future__ import annotations

import torch
from torch import Tensor

from . import _core
from ._torch_ops import _compose_backward_op, plain, require_cpu

KERNEL = "tokpos::compose_typed"
NAMES = ("ids", "token_table", "type_ids", "type_table", "pos_table", "position_ids")


def compose_typed_kernel(ids, token_table, type_ids, type_table, pos_table, position_ids, where=KERNEL) -> Tensor:
    """The sum in a new (B, T, D) tensor by one call of the core, which
    validates shapes, dtypes, ids, types and positions and names the problem.
    A (1, T) position row is read for every b."""
    require_cpu(where, NAMES, ids, token_table, type_ids, type_table, pos_table, position_ids)
    if ids.dim() == 2 and position_ids.dim() == 2 and position_ids.shape[0] == 1:
        position_ids = position_ids.expand(ids.shape[0], -1).contiguous()
    out = torch.empty([*ids.shape, token_table.shape[-1]], dtype=token_table.dtype)
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
    require_cpu(KERNEL, NAMES, ids, token_table, type_ids, type_table, pos_table, position_ids)
    torch._check(token_table.dim() == 2, lambda: f"{KERNEL}: token_table must be 2-D")
    torch._check(ids.dim() in (1, 2), lambda: f"{KERNEL}: ids must be 1-D or 2-D")
    return token_table.new_empty([*ids.shape, token_table.shape[1]])


def _setup_context(ctx, inputs, output):
    ids, token_table, type_ids, type_table, pos_table, position_ids, padding_idx, pos_padding_idx = inputs
    ctx.save_for_backward(ids, type_ids, position_ids)
    ctx.rows = (token_table.shape[0], type_table.shape[0], pos_table.shape[0])
    ctx.padding = (padding_idx, -1, pos_padding_idx)


def _backward(ctx, d_out):
    # One compose_backward per table, its index tensor as the "ids" of a token table.
    ids, type_ids, position_ids = ctx.saved_tensors
    wanted = (ctx.needs_input_grad[1], ctx.needs_input_grad[3], ctx.needs_input_grad[4])
    d_outs = [d_out, d_out, d_out]
    if ids.dim() == 2 and position_ids.dim() == 2 and position_ids.shape[0] == 1:
        # A shared row: d_out summed over B by torch first, as the backward
        # of a broadcast add (BertEmbeddings' + position_embeddings) sums it.
        d_outs[2] = d_out.sum(0)
        position_ids = position_ids.reshape(-1)
    grads = []
    for g, index, rows, padding, want in zip(d_outs, (ids, type_ids, position_ids), ctx.rows, ctx.padding, wanted):
        grads.append(_compose_backward_op(g, index, None, 0, rows, 0, padding)[0] if want else None)
    d_tok, d_type, d_pos = grads
    return None, d_tok, None, d_type, d_pos, None, None, None


_compose_typed_op.register_autograd(_backward, setup_context=_setup_context)


def compose_typed(ids, token_table, type_ids, type_table, pos_table, position_ids, padding_idx, pos_padding_idx, where):
    """The op when autograd or the compiler needs it, else the kernel
    directly; where names the caller in the CPU check."""
    tables = (token_table, type_table, pos_table)
    if torch.compiler.is_compiling() or (torch.is_grad_enabled() and any(t.requires_grad for t in tables)):
        require_cpu(where, NAMES, ids, token_table, type_ids, type_table, pos_table, position_ids)
        return _compose_typed_op(
            ids, token_table, type_ids, type_table, pos_table, position_ids, padding_idx, pos_padding_idx
        )
    return compose_typed_kernel(ids, token_table, type_ids, type_table, pos_table, position_ids, where)
