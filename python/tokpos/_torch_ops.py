"""tokpos.torch's custom operators and the one way into the compose kernel
(private: the public names are tokpos.torch's).

    compose(...)       the modules' entry: the kernel directly when nothing
                       needs autograd or the compiler, else tokpos::compose
    tokpos::compose, tokpos::compose_backward, tokpos::token_grad_rows
                       torch.library custom ops, their fake kernels and the
                       autograd of tokpos::compose
    direct(...), transformed(...)
                       which way a call goes: the kernel on the tensors'
                       memory, the op (fake and meta tensors, a dispatch
                       mode), or an autograd.Function (forward-mode AD and
                       torch.func)
    _Compose, _ComposeBackward
                       tokpos::compose and its backward as autograd.Functions
                       with jvp and vmap, for forward-mode AD and torch.func

torch is checked first: tokpos.torch needs torch.library.custom_op (torch
2.4), and an older torch gets an ImportError naming both versions before any
newer API is touched.
"""

from __future__ import annotations

import re

MIN_TORCH = (2, 4)
_MIN_TORCH_TEXT = ".".join(map(str, MIN_TORCH))

try:
    import torch
except ModuleNotFoundError as e:
    if e.name != "torch":
        raise
    raise ModuleNotFoundError(
        f"tokpos.torch needs torch >= {_MIN_TORCH_TEXT}, which is not installed (pip install 'torch>={_MIN_TORCH_TEXT}')",
        name="torch",
    ) from None


def _version_tuple(version: str) -> tuple:
    """(major, minor) of a torch version string ("2.4.0+cpu", "2.5.0a0+git12ab", "1.13.1"); (0, 0) if unreadable."""
    m = re.match(r"\s*(\d+)\.(\d+)", str(version))
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


_FOUND = getattr(torch, "__version__", "unknown")
if _version_tuple(_FOUND) < MIN_TORCH:
    raise ImportError(
        f"tokpos.torch needs torch >= {_MIN_TORCH_TEXT} (torch.library.custom_op), but found torch {_FOUND} "
        f"at {getattr(torch, '__file__', None) or 'an unknown path'}; upgrade it (pip install 'torch>={_MIN_TORCH_TEXT}')",
        name="torch",
    )

from typing import Optional  # noqa: E402

import numpy as np  # noqa: E402
from torch import Tensor  # noqa: E402
from torch.autograd import forward_ad  # noqa: E402

from . import _core  # noqa: E402
from ._arrays import require_cpu as _require_cpu_one  # noqa: E402

F32 = torch.float32
# The where of every error the compose kernel raises, eager or not: the
# custom op cannot carry a module's name, so the eager fast path, autograd
# and torch.compile all say the op's, with the core's words after it.
KERNEL = "tokpos::compose"
COMPOSE_NAMES = ("ids", "token_table", "pos_table", "position_ids")


def require_cpu(where: str, names: tuple, *tensors) -> None:
    """ValueError naming the first tensor not on the CPU: tokpos's kernels
    read and write host memory only. Called by every entry point before a
    kernel or an operator runs, and by the operators' fake kernels (which
    torch.compile traces and which the dispatcher also runs for meta
    tensors), so a meta or device tensor is refused eagerly, under autograd
    and under torch.compile alike, and never gets an uninitialised result."""
    for name, t in zip(names, tensors):
        if t is not None and t.device.type != "cpu":
            _require_cpu_one(t, name, where)


def require_host(where: str, names: tuple, *tensors) -> None:
    """require_cpu, with the meta device allowed too: the ops' fake kernels,
    which are also their meta kernels, compute a meta tensor's shape without
    touching memory, so a meta input gives a meta result; a tensor on any
    other device (cuda, mps, ...) is a ValueError naming it."""
    for name, t in zip(names, tensors):
        if t is not None and t.device.type not in ("cpu", "meta"):
            _require_cpu_one(t, name, where)


def fake_empty(like: Tensor, shape, dtype: torch.dtype, *others) -> Tensor:
    """A fake kernel's result: an empty tensor of shape and dtype on like's
    device, or on the meta device when any of like and others is a meta
    tensor (a CPU table with meta ids gives a meta result, never an
    uninitialised CPU tensor). Under FakeTensorMode it is a fake tensor."""
    meta = any(t is not None and t.device.type == "meta" for t in (like, *others))
    return like.new_empty(shape, dtype=dtype, device="meta" if meta else like.device)


# The exact types whose memory the kernels read: a fake tensor, a functional
# tensor or any other subclass goes through the operator instead.
_PLAIN_TYPES = (Tensor, torch.nn.Parameter)
_wrapped = torch._C._functorch.is_functorch_wrapped_tensor
# A torch.func transform (grad, vmap, jvp, ...) is running: its tensors are
# wrappers without memory of their own.
_functorch_active = torch._C._functorch.peek_interpreter_stack
# The number of active dispatch modes, FakeTensorMode and the tracers' included
# (torch 2.4 has _len_torch_dispatch_stack; the fallback is the older name).
_dispatch_modes = getattr(torch._C, "_len_torch_dispatch_stack", None) or torch._C._len_torch_dispatch_mode


def transformed(*tensors) -> bool:
    """True under a forward-mode AD dual level, inside a torch.func
    transform (grad, jvp, vmap) or when a tensor is a torch.func wrapper:
    the modes that only an autograd.Function with setup_context, jvp and
    vmap serves (a custom operator's registered autograd has neither a jvp
    nor functorch support, and its kernel cannot read a wrapper's memory)."""
    if forward_ad._current_level >= 0 or _functorch_active() is not None:
        return True
    return any(t is not None and _wrapped(t) for t in tensors)


def direct(*tensors) -> bool:
    """True when the kernel may run on the tensors' memory without the
    dispatcher: each one is a plain torch.Tensor or Parameter (not a fake
    tensor or another subclass) on the CPU, and no forward-mode AD level,
    torch.func transform or dispatch mode (FakeTensorMode, a tracer, a
    counter) is active. Otherwise the call goes through the operator, whose
    fake kernel serves fake and meta tensors, or through an
    autograd.Function (transformed). Cheap: the decode step's fast path
    asks it on every call."""
    if forward_ad._current_level >= 0 or _dispatch_modes() or _functorch_active() is not None:
        return False
    for t in tensors:
        if t is not None and (type(t) not in _PLAIN_TYPES or not t.is_cpu):
            return False
    return True


def has_data(t: Tensor) -> bool:
    """True when t holds memory a kernel or an initialiser can write: not a
    meta tensor, a fake tensor, another subclass or a torch.func wrapper.
    A module built under FakeTensorMode, on the meta device or under
    torch.device("meta") has no such table and is initialised from shapes
    alone."""
    return type(t) in _PLAIN_TYPES and t.device.type != "meta" and not _wrapped(t)


def plain(t: Optional[Tensor]) -> Optional[Tensor]:
    """t as the kernels read it: detached (DLPack refuses tensors that
    require grad; detach shares the memory) and with innermost stride 1
    (copied only when it is not)."""
    if t is None:
        return None
    if t.requires_grad:
        t = t.detach()
    if t.dim() > 0 and t.stride(-1) != 1 and t.numel() > 0:
        t = t.contiguous()
    return t


def lazy_zeros(rows: int, dim: int, dtype: torch.dtype = F32) -> Tensor:
    """A zeroed float32 (rows, dim) tensor whose pages the kernel provides
    already zero: numpy's zeros is calloc, which for a large block maps fresh
    zero pages instead of writing zeros. torch.zeros writes every byte (and
    faults every page in) even though the backward then touches only the rows
    the batch used; for GPT-2's 154 MB token gradient that write is most of a
    training step's embedding time. The untouched rows stay the kernel's zero
    page until something reads them (the first read of each page is a minor
    fault, not a 4 KiB write)."""
    return torch.from_numpy(np.zeros((rows, dim), dtype=np.float64 if dtype == torch.float64 else np.float32))


def grad_dtype(d_out_dtype: torch.dtype) -> torch.dtype:
    """The type the backward adds in: float64 for a float64 table, float32
    for every other (bfloat16 and float16 gradients are rounded once at the end)."""
    return torch.float64 if d_out_dtype == torch.float64 else F32


# ---------------------------------------------------------------------------
# The kernel, called once.

# tokpos::DType codes (tokpos/dtype.h) for _core.compose_raw.
_TABLE_CODES = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2, torch.float64: 5}
_INDEX_CODES = {torch.int32: 3, torch.int64: 4}


def _raw_args(ids: Tensor, token_table: Tensor, pos_table: Optional[Tensor], position_ids: Optional[Tensor]):
    """The addresses, shapes and dtype codes of _core.compose_raw, or None
    when the tensors are not contiguous CPU tensors of the kernel's dtypes
    and agreeing shapes (then every address would not cover the extent the
    core is told, and the DLPack call, which reads strides too, takes them)."""
    tc = _TABLE_CODES.get(token_table.dtype)
    ic = _INDEX_CODES.get(ids.dtype)
    if tc is None or ic is None or token_table.dim() != 2:
        return None
    if not (token_table.is_cpu and ids.is_cpu and token_table.is_contiguous() and ids.is_contiguous()):
        return None
    nd = ids.dim()
    if nd == 2:
        B, T = ids.shape
    elif nd == 1:
        B, T = -1, ids.shape[0]
    else:
        return None
    V, D = token_table.shape
    L = pc = pp = qc = qp = 0
    if pos_table is not None:
        pc = _TABLE_CODES.get(pos_table.dtype)
        if pc is None or pos_table.dim() != 2 or pos_table.shape[1] != D:
            return None
        if not (pos_table.is_cpu and pos_table.is_contiguous()):
            return None
        L = pos_table.shape[0]
        pp = pos_table.data_ptr()
        if pp == 0:  # an empty table: 0 would mean "no table"
            return None
    if position_ids is not None:
        qc = _INDEX_CODES.get(position_ids.dtype)
        if qc is None or position_ids.shape != ids.shape:
            return None
        if not (position_ids.is_cpu and position_ids.is_contiguous()):
            return None
        qp = position_ids.data_ptr()
    return ic, B, T, tc, V, D, pp, pc, L, qp, qc


def compose_kernel(
    ids: Tensor,
    token_table: Tensor,
    pos_table: Optional[Tensor],
    position_ids: Optional[Tensor],
    start: int,
    cpu_where: str = KERNEL,
) -> Tensor:
    """out = token_table[ids] + pos_table[position] in a new tensor, by ONE
    call of the core's compose, which validates everything (dtypes, shapes,
    ids, positions) and names the problem. Contiguous CPU tensors go by
    address (_core.compose_raw: DLPack capsules cost more than a decode
    step's kernel); any other tensors by DLPack (_core.compose), after the
    check the core cannot make (every tensor on the CPU; cpu_where names
    the caller in that message). The custom op's body and the eager fast
    path both run this; tensors without memory of their own (fake, meta, a
    torch.func wrapper) go to the op instead, whose fake kernel serves
    them."""
    for t in (ids, token_table, pos_table, position_ids):
        if t is not None and (type(t) not in _PLAIN_TYPES or t.is_meta or (_functorch_active() is not None and _wrapped(t))):
            require_host(cpu_where, COMPOSE_NAMES, ids, token_table, pos_table, position_ids)
            return _compose_op(ids, token_table, pos_table, position_ids, start, -1, False)
    return _compose_kernel(ids, token_table, pos_table, position_ids, start, cpu_where)


def _compose_kernel(ids, token_table, pos_table, position_ids, start, cpu_where=KERNEL) -> Tensor:
    """compose_kernel on tensors known to hold their memory (the op's body, and
    compose() after direct())."""
    raw = _raw_args(ids, token_table, pos_table, position_ids)
    if raw is not None:
        ic, B, T, tc, V, D, pp, pc, L, qp, qc = raw
        out = torch.empty((T, D) if B < 0 else (B, T, D), dtype=token_table.dtype, device="cpu")
        _core.compose_raw(
            out.data_ptr(), ids.data_ptr(), ic, B, T, token_table.data_ptr(), tc, V, D, pp, pc, L, qp, qc, start, KERNEL
        )
        return out
    require_cpu(cpu_where, COMPOSE_NAMES, ids, token_table, pos_table, position_ids)
    shape = [*ids.shape, token_table.shape[-1]] if token_table.dim() else list(ids.shape)
    out = torch.empty(shape, dtype=token_table.dtype, device="cpu")
    _core.compose(out, plain(ids), plain(token_table), plain(pos_table), plain(position_ids), start, -1, KERNEL)
    return out


# ---------------------------------------------------------------------------
# Custom operators.
#
# tokpos::compose carries padding_idx and sparse only for its backward (they
# do not change the forward's result). tokpos::compose_backward returns both
# table gradients from one kernel call; a size of 0 means "not wanted" and
# gives a (0, D) tensor in that slot.


@torch.library.custom_op("tokpos::compose", mutates_args=(), device_types="cpu")
def _compose_op(
    ids: Tensor,
    token_table: Tensor,
    pos_table: Optional[Tensor],
    position_ids: Optional[Tensor],
    start: int,
    padding_idx: int,
    sparse: bool,
) -> Tensor:
    """out = token_table[ids] + pos_table[position] (position_ids, or
    start + t), summed in float32 and rounded once to token_table's dtype
    (float64 tables: summed in double)."""
    return _compose_kernel(ids, token_table, pos_table, position_ids, start)


@_compose_op.register_fake
def _compose_fake(ids, token_table, pos_table, position_ids, start, padding_idx, sparse):
    require_host("tokpos::compose", COMPOSE_NAMES, ids, token_table, pos_table, position_ids)
    torch._check(token_table.dim() == 2, lambda: "tokpos::compose: token_table must be 2-D")
    torch._check(ids.dim() in (1, 2), lambda: "tokpos::compose: ids must be 1-D or 2-D")
    if pos_table is not None:
        torch._check(pos_table.dim() == 2, lambda: "tokpos::compose: pos_table must be 2-D")
        torch._check(
            pos_table.shape[1] == token_table.shape[1],
            lambda: "tokpos::compose: pos_table and token_table must have the same D",
        )
    if position_ids is not None:
        torch._check(
            position_ids.shape == ids.shape, lambda: "tokpos::compose: position_ids must have the shape of ids"
        )
    shape = [*ids.shape, token_table.shape[1]]
    return fake_empty(token_table, shape, token_table.dtype, ids, pos_table, position_ids)


@torch.library.custom_op("tokpos::compose_backward", mutates_args=(), device_types="cpu")
def _compose_backward_op(
    d_out: Tensor,
    ids: Tensor,
    position_ids: Optional[Tensor],
    start: int,
    vocab_size: int,
    pos_rows: int,
    padding_idx: int,
    scale_grad_by_freq: bool = False,
) -> tuple[Tensor, Tensor]:
    """The gradients of tokpos::compose, float32 (float64 when d_out is):
    d_token_table (vocab_size, D) and d_pos_table (pos_rows, D), each summed
    per row in increasing (b, t) order. vocab_size or pos_rows 0: that
    gradient is not computed (a (0, D) tensor). padding_idx >= 0: that token
    row gets no gradient. scale_grad_by_freq: each token row's sources scaled
    by 1 / its count and added as fused multiply-adds, as torch's CPU
    backward adds them."""
    dim = d_out.shape[-1]
    acc = grad_dtype(d_out.dtype)
    d_tok = lazy_zeros(vocab_size, dim, acc)
    d_pos = lazy_zeros(pos_rows, dim, acc)
    if vocab_size or pos_rows:
        _core.compose_backward(
            d_tok if vocab_size else None,
            d_pos if pos_rows else None,
            plain(d_out.to(acc)),
            plain(ids),
            plain(position_ids),
            start,
            padding_idx,
            -1,
            "tokpos::compose_backward",
            scale_grad_by_freq,
        )
    return d_tok, d_pos


@_compose_backward_op.register_fake
def _compose_backward_fake(d_out, ids, position_ids, start, vocab_size, pos_rows, padding_idx, scale_grad_by_freq=False):
    require_host("tokpos::compose_backward", ("d_out", "ids", "position_ids"), d_out, ids, position_ids)
    dim, acc = d_out.shape[-1], grad_dtype(d_out.dtype)
    return (
        fake_empty(d_out, (vocab_size, dim), acc, ids, position_ids),
        fake_empty(d_out, (pos_rows, dim), acc, ids, position_ids),
    )


@torch.library.custom_op("tokpos::token_grad_rows", mutates_args=(), device_types="cpu")
def _token_grad_rows_op(d_out: Tensor, ids: Tensor, vocab_size: int, padding_idx: int) -> tuple[Tensor, Tensor]:
    """The token gradient as a sparse matrix: rows (U,) int64, the touched
    rows sorted and unique (padding_idx left out), and values (U, D)
    float32, the same bits the dense backward adds to a zeroed table."""
    plan = _core.row_plan(plain(ids), vocab_size, padding_idx, "tokpos::token_grad_rows")
    rows = torch.empty((plan.num_touched,), dtype=torch.int64, device="cpu")
    values = torch.empty((plan.num_touched, d_out.shape[-1]), dtype=F32, device="cpu")
    plan.touched_rows(rows)
    plan.gradient_rows(values, plain(d_out.to(F32)))
    return rows, values


@_token_grad_rows_op.register_fake
def _token_grad_rows_fake(d_out, ids, vocab_size, padding_idx):
    require_host("tokpos::token_grad_rows", ("d_out", "ids"), d_out, ids)
    # How many rows are touched depends on the ids' values, which a meta
    # tensor does not have: torch's own error for a data-dependent shape.
    touched = torch.library.get_ctx().new_dynamic_size()
    return (
        fake_empty(d_out, (touched,), torch.int64, ids),
        fake_empty(d_out, (touched, d_out.shape[-1]), F32, ids),
    )


def _compose_setup_context(ctx, inputs, output):
    ids, token_table, pos_table, position_ids, start, padding_idx, sparse = inputs
    ctx.save_for_backward(ids, position_ids)
    ctx.start = start
    ctx.padding_idx = padding_idx
    ctx.sparse = sparse
    ctx.vocab_size = token_table.shape[0]
    ctx.token_dtype = token_table.dtype
    ctx.pos_rows = pos_table.shape[0] if pos_table is not None else 0
    ctx.pos_dtype = pos_table.dtype if pos_table is not None else None


def _sparse_token_grad(ctx, d_out, ids):
    """The token table's gradient as a coalesced sparse COO tensor (sparse=True)."""
    rows, values = _token_grad_rows_op(d_out, ids, ctx.vocab_size, ctx.padding_idx)
    return torch.sparse_coo_tensor(
        rows.unsqueeze(0),
        values.to(ctx.token_dtype),
        (ctx.vocab_size, d_out.shape[-1]),
        is_coalesced=True,
        check_invariants=False,
    )


def _compose_backward(ctx, d_out):
    ids, position_ids = ctx.saved_tensors
    want_tok = ctx.needs_input_grad[1]
    want_pos = ctx.needs_input_grad[2]
    d_tok = d_pos = None
    if want_tok and ctx.sparse:
        d_tok = _sparse_token_grad(ctx, d_out, ids)
        want_tok = False
    if want_tok or want_pos:
        g_tok, g_pos = _compose_backward_op(
            d_out,
            ids,
            position_ids,
            ctx.start,
            ctx.vocab_size if want_tok else 0,
            ctx.pos_rows if want_pos else 0,
            ctx.padding_idx,
        )
        if want_tok:
            d_tok = g_tok.to(ctx.token_dtype)
        if want_pos:
            d_pos = g_pos.to(ctx.pos_dtype)
    return None, d_tok, d_pos, None, None, None, None


_compose_op.register_autograd(_compose_backward, setup_context=_compose_setup_context)


# The backward of tokpos::compose_backward (a double backward): the scatter
# is linear in d_out, and its adjoint is a lookup of the incoming gradients,
# g_tok's rows at ids (padding_idx's row zeroed, each row scaled by 1 / its
# count under scale_grad_by_freq) plus g_pos's rows at the positions, by the
# same tokpos::compose, so every order of derivative goes through the kernels.


def _compose_backward_setup_context(ctx, inputs, output):
    d_out, ids, position_ids, start, vocab_size, pos_rows, padding_idx, scale_grad_by_freq = inputs
    ctx.save_for_backward(ids, position_ids)
    ctx.start, ctx.padding_idx, ctx.scale = start, padding_idx, scale_grad_by_freq
    ctx.vocab_size, ctx.pos_rows, ctx.d_out_dtype = vocab_size, pos_rows, d_out.dtype


def _position_rows(ids: Tensor, start: int) -> Tensor:
    """The positions start + t of ids' shape (the rows a composer without
    position_ids reads), on ids' device."""
    return (torch.arange(ids.shape[-1], dtype=torch.int64, device=ids.device) + start).expand(ids.shape)


def _compose_backward_backward(ctx, g_tok, g_pos):
    ids, position_ids = ctx.saved_tensors
    if not ctx.needs_input_grad[0]:
        return None, None, None, None, None, None, None, None
    return _scatter_adjoint(ctx, g_tok, g_pos, ids, position_ids, _compose_op), None, None, None, None, None, None, None


def _scatter_adjoint(ctx, g_tok, g_pos, ids, position_ids, lookup):
    """d_out's gradient from the gradients of compose_backward's two
    results: lookup (the op, or _Compose.apply under torch.func) of g_tok's
    rows at ids plus g_pos's at the positions."""
    tok = g_tok if ctx.vocab_size else None
    pos = g_pos if ctx.pos_rows else None
    if tok is not None and (ctx.padding_idx >= 0 or ctx.scale):
        keep = torch.ones(ctx.vocab_size, dtype=tok.dtype, device=tok.device)
        if ctx.scale:
            counts = torch.zeros(ctx.vocab_size, dtype=torch.int64, device=ids.device).index_add_(
                0, ids.reshape(-1).long(), torch.ones(ids.numel(), dtype=torch.int64, device=ids.device)
            )
            keep = (1.0 / counts.clamp(min=1).double()).to(tok.dtype)
        if ctx.padding_idx >= 0:
            keep[ctx.padding_idx] = 0
        tok = tok * keep.unsqueeze(1)
    if tok is None:  # positions only: the position rows looked up as a table
        rows = position_ids if position_ids is not None else _position_rows(ids, ctx.start)
        d_d_out = lookup(rows, pos, None, None, 0, -1, False)
    else:
        d_d_out = lookup(ids, tok, pos, position_ids, ctx.start, -1, False)
    return d_d_out.to(ctx.d_out_dtype)


_compose_backward_op.register_autograd(_compose_backward_backward, setup_context=_compose_backward_setup_context)


# ---------------------------------------------------------------------------
# Forward-mode AD and torch.func.
#
# A custom operator's registered autograd serves backward (and double
# backward) only: it has no jvp, so under forward_ad a dual table would come
# back with no tangent, and torch.func refuses it (its autograd.Function has
# no setup_context). _Compose and _ComposeBackward are the same two ops as
# autograd.Functions with setup_context, jvp and vmap: compose is linear in
# both tables, so its tangent is compose of the tangents (embedding(ids,
# dT) + dP[positions]), and compose_backward is linear in d_out, its tangent
# compose_backward of d_out's tangent. vmap runs one call per batch element.


def by_element(apply, info, in_dims, *args):
    """vmap of apply(*args) as one call per batch element, each argument
    selected along its in_dim (None: shared by every element), the results
    stacked along dim 0 (a tuple of results stacked one by one)."""
    outs = [
        apply(*(a if d is None else a.select(d, b) for a, d in zip(args, in_dims)))
        for b in range(info.batch_size)
    ]
    if isinstance(outs[0], tuple):
        return tuple(torch.stack(o) for o in zip(*outs)), (0,) * len(outs[0])
    return torch.stack(outs), 0


class _Compose(torch.autograd.Function):
    """tokpos::compose with setup_context, backward, jvp and vmap (see above)."""

    @staticmethod
    def forward(ids, token_table, pos_table, position_ids, start, padding_idx, sparse):
        return _compose_op(ids, token_table, pos_table, position_ids, start, padding_idx, sparse)

    @staticmethod
    def setup_context(ctx, inputs, output):
        _compose_setup_context(ctx, inputs, output)
        ctx.save_for_forward(inputs[0], inputs[3])
        ctx.set_materialize_grads(False)  # a table without a tangent gets None in jvp, not a zero table

    @staticmethod
    def backward(ctx, d_out):
        ids, position_ids = ctx.saved_tensors
        want_tok, want_pos = ctx.needs_input_grad[1], ctx.needs_input_grad[2]
        d_tok = d_pos = None
        if d_out is None:
            return None, None, None, None, None, None, None
        if want_tok and ctx.sparse:
            d_tok = _sparse_token_grad(ctx, d_out, ids)
            want_tok = False
        if want_tok or want_pos:
            g_tok, g_pos = _ComposeBackward.apply(
                d_out, ids, position_ids, ctx.start, ctx.vocab_size if want_tok else 0,
                ctx.pos_rows if want_pos else 0, ctx.padding_idx, False,
            )
            if want_tok:
                d_tok = g_tok.to(ctx.token_dtype)
            if want_pos:
                d_pos = g_pos.to(ctx.pos_dtype)
        return None, d_tok, d_pos, None, None, None, None

    @staticmethod
    def jvp(ctx, ids_t, token_t, pos_t, *_):
        ids, position_ids = ctx.saved_tensors
        if token_t is None:  # only the position table has a tangent: its rows
            rows = position_ids if position_ids is not None else _position_rows(ids, ctx.start)
            return _Compose.apply(rows, pos_t, None, None, 0, -1, False).to(ctx.token_dtype)
        if pos_t is None:  # only the token table has one
            return _Compose.apply(ids, token_t, None, None, 0, -1, False)
        return _Compose.apply(ids, token_t, pos_t, position_ids, ctx.start, -1, False)

    @staticmethod
    def vmap(info, in_dims, *args):
        return by_element(_Compose.apply, info, in_dims, *args)


class _ComposeBackward(torch.autograd.Function):
    """tokpos::compose_backward with setup_context, backward (the adjoint
    lookup), jvp and vmap, so every order of torch.func derivative of a
    composer goes through the kernels."""

    @staticmethod
    def forward(d_out, ids, position_ids, start, vocab_size, pos_rows, padding_idx, scale_grad_by_freq):
        return _compose_backward_op(
            d_out, ids, position_ids, start, vocab_size, pos_rows, padding_idx, scale_grad_by_freq
        )

    @staticmethod
    def setup_context(ctx, inputs, output):
        _compose_backward_setup_context(ctx, inputs, output)
        ctx.save_for_forward(inputs[1], inputs[2])
        ctx.inputs = inputs[3:]

    @staticmethod
    def backward(ctx, g_tok, g_pos):
        ids, position_ids = ctx.saved_tensors
        d_d_out = None
        if ctx.needs_input_grad[0]:
            d_d_out = _scatter_adjoint(ctx, g_tok, g_pos, ids, position_ids, _Compose.apply)
        return d_d_out, None, None, None, None, None, None, None

    @staticmethod
    def jvp(ctx, d_out_t, *_):
        ids, position_ids = ctx.saved_tensors
        return _ComposeBackward.apply(d_out_t, ids, position_ids, *ctx.inputs)

    @staticmethod
    def vmap(info, in_dims, *args):
        return by_element(_ComposeBackward.apply, info, in_dims, *args)


# ---------------------------------------------------------------------------
# The modules' entry point.


def compose(
    ids: Tensor,
    token_table: Tensor,
    pos_table: Optional[Tensor],
    position_ids: Optional[Tensor],
    start: int,
    padding_idx: int,
    sparse: bool,
    where: str,
) -> Tensor:
    """The modules' one way in: compose_kernel directly for plain CPU
    tensors when nothing needs autograd (the inference fast path: one kernel
    call plus the output's allocation, no dispatcher); _Compose under
    forward-mode AD and torch.func; else the custom op (autograd, the
    compiler, fake and meta tensors, which its fake kernel serves from
    shapes alone: a meta input gives a meta result). All end in the core's
    one validation, so an error reads the same either way; where names the
    module only in the device check, made before the op runs."""
    if not torch.compiler.is_compiling():
        if direct(ids, token_table, pos_table, position_ids):
            if not (
                torch.is_grad_enabled()
                and (token_table.requires_grad or (pos_table is not None and pos_table.requires_grad))
            ):
                return _compose_kernel(ids, token_table, pos_table, position_ids, start, where)
        elif transformed(ids, token_table, pos_table, position_ids):
            require_host(where, COMPOSE_NAMES, ids, token_table, pos_table, position_ids)
            return _Compose.apply(ids, token_table, pos_table, position_ids, start, padding_idx, sparse)
    require_host(where, COMPOSE_NAMES, ids, token_table, pos_table, position_ids)
    return _compose_op(ids, token_table, pos_table, position_ids, start, padding_idx, sparse)
