"""Vocab-parallel embeddings over torch.distributed (Megatron-LM's
VocabParallelEmbedding), exported by tokpos.torch:

    VocabParallelEmbedding  each rank holds a (S, D) shard of the (V, D) token table
    VocabParallelComposer   shard rows + position rows, combined across ranks

Rank r of a world of n holds the global rows [r*S, (r+1)*S), S =
ceil(V_padded / n), V_padded = V rounded up to a multiple of
pad_vocab_to_multiple_of (Megatron's make_vocab_size_divisible_by). Rows at or
past V are padding: zero, never read, never given a gradient.

Forward: each rank writes its partial (B, T, D) float32 output with
_core.compose_shard (its own rows, zeros elsewhere) and the partials are
summed: all_reduce (the output replicated on every rank; its backward is the
identity, as Megatron's reduce_from_tensor_model_parallel_region), or with
sequence_parallel=True reduce_scatter over T (each rank gets its T/n slice;
the backward is an all_gather over T). Exactly one partial is nonzero at each
element, so the sum is the owner's row bit for bit (a -0 may become +0).

Positions are added after the reduction, by every rank to its own (reduced)
output, as Megatron does: the sum then equals the one-table fused kernel's
float32 sum bit for bit, and the replicated position table's gradient is
computed from the full d_out on every rank (in sequence-parallel mode from
the all-gathered d_out the token gradient needs anyway), so it is the
one-process gradient, identical on every rank, with no extra communication.

The autograd is a torch.autograd.Function (a custom op cannot carry a process
group argument); the kernels it calls are the core's shard ops. It has
setup_context, jvp and vmap, and its backward is an autograd.Function too,
so forward-mode AD and torch.func (jvp, grad, jacrev, jacfwd, hessian, vmap)
get the tangents and gradients by the same kernels and collectives (the
output is linear in the tables: the tangent is the same function of their
tangents, and the backward's backward is the forward). Meta and fake
tensors (and FakeTensorMode around real ones) give outputs and gradients of
the right shape from shapes alone, with no kernel and no communication, and
a module built on the meta device or inside FakeTensorMode draws nothing
(the has_data test of _torch_ops, as TokenEmbedding's). A graph tracer
(make_fx, torch.export) is refused by name.

Every id is checked against [0, V) by the kernel before any communication:
ids being the same on every rank (they are replicated, as in Megatron), a bad
id raises the same IndexError on every rank and no rank waits in a
collective. Positions are checked by the same kernel call, before communication too.
"""

from __future__ import annotations

import os
from typing import Optional

import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch._subclasses.fake_tensor import FakeTensor

from . import _core
from ._arrays import INT64_MIN as _INT64_MIN
from ._arrays import real as _real
from ._torch_modules import PositionalEmbedding as _PositionalEmbedding
from ._torch_modules import check_composer_parts as _check_composer_parts
from ._torch_modules import check_int as _check_int
from ._torch_modules import check_seed as _check_seed
from ._torch_ops import by_element as _by_element
from ._torch_ops import fake_empty as _fake_empty
from ._torch_ops import has_data as _has_data
from ._torch_ops import lazy_zeros as _lazy_zeros
from ._torch_ops import plain as _plain
from ._torch_ops import require_host as _require_host

__all__ = ["VocabParallelComposer", "VocabParallelEmbedding"]

_F32 = torch.float32

# Whether the group's backend reduce-scatters (gloo does in torch 2.x; one
# that raises is remembered and gets all_reduce + a local slice instead).
_NO_REDUCE_SCATTER: set = set()


def _group_info(group, where: str):
    if not dist.is_available():
        raise RuntimeError(f"{where}: torch.distributed is not available in this torch build")
    if not dist.is_initialized():
        raise RuntimeError(
            f"{where}: torch.distributed is not initialised; call torch.distributed.init_process_group(...) "
            "first (torchrun sets the environment it reads)"
        )
    world = dist.get_world_size(group)
    rank = dist.get_rank(group)
    if rank < 0:
        raise RuntimeError(f"{where}: this process is not a member of the given process group")
    return world, rank


def _backend_key(group):
    return id(group) if group is not None else None


def _reduce_scatter_t(partial_tbd: Tensor, world: int, group) -> Tensor:
    """Sums the ranks' (T, B, D) partials and returns this rank's (T/n, B, D)
    slice: reduce_scatter_tensor where the backend has it, else all_reduce
    and a local slice."""
    T = partial_tbd.shape[0]
    chunk = T // world
    key = _backend_key(group)
    if key not in _NO_REDUCE_SCATTER:
        out = partial_tbd.new_empty((chunk, *partial_tbd.shape[1:]))
        try:
            dist.reduce_scatter_tensor(out, partial_tbd, op=dist.ReduceOp.SUM, group=group)
            return out
        except (RuntimeError, NotImplementedError) as e:  # the backend lacks it: every rank gets here
            if "not support" not in str(e).lower() and not isinstance(e, NotImplementedError):
                raise
            _NO_REDUCE_SCATTER.add(key)
    dist.all_reduce(partial_tbd, op=dist.ReduceOp.SUM, group=group)
    rank = dist.get_rank(group)
    return partial_tbd[rank * chunk : (rank + 1) * chunk].clone()


def _gather_t(local_bsd: Tensor, world: int, group) -> Tensor:
    """All-gathers (B, T/n, D) slices over T into a (B, T, D) view of a
    (T, B, D) buffer (innermost stride 1)."""
    B, chunk, D = local_bsd.shape
    full = local_bsd.new_empty((chunk * world, B, D))
    dist.all_gather_into_tensor(full, local_bsd.transpose(0, 1).contiguous(), group=group)
    return full.permute(1, 0, 2)


_NAMES = ("ids", "weight", "position.weight", "position_ids")
_wrapped = torch._C._functorch.is_functorch_wrapped_tensor


def _graph_tracer() -> bool:
    """True while make_fx or torch.export records a graph (their proxy
    mode, pre-dispatch included): the collectives are no operator such a
    graph can hold, and a graph of the shapes alone would compute nothing."""
    from torch.fx.experimental.proxy_tensor import get_proxy_mode

    return get_proxy_mode() is not None


def _refuse(where: str, names: tuple, tensors: tuple) -> None:
    """RuntimeError under a graph tracer, or for a tensor that holds no
    memory of its own and is neither meta nor fake (a torch.func wrapper
    the autograd.Functions did not unwrap, another subclass)."""
    if _graph_tracer():
        raise RuntimeError(
            f"{where}: tracing into a graph (torch.export, make_fx) is not supported: the reduction across "
            "ranks is no operator a graph can hold; call the module eagerly"
        )
    for name, t in zip(names, tensors):
        if t is not None and not (_has_data(t) or t.device.type == "meta" or isinstance(t, FakeTensor)):
            what = "a torch.func transform's wrapper" if _wrapped(t) else f"a {type(t).__name__}"
            raise RuntimeError(
                f"{where}: {name} is {what}, which is not supported here: only plain CPU tensors (computed on), "
                "meta tensors and fake tensors (FakeTensorMode; shapes alone) are"
            )


def _shapes_only(where: str, tensors: tuple, shape: tuple) -> Tensor:
    """The result of a call on tensors without data (meta or fake tensors,
    or real ones under FakeTensorMode): an empty float32 tensor of shape,
    meta when any input is (fake_empty), fake under FakeTensorMode. Nothing
    is read or communicated."""
    _refuse(where, _NAMES, tensors)
    ids, shard, pos_table, position_ids = tensors
    if shard.dim() != 2:
        raise ValueError(f"{where}: weight must be 2-D, got {shard.dim()}-D")
    if pos_table is not None and (pos_table.dim() != 2 or pos_table.shape[1] != shard.shape[1]):
        raise ValueError(f"{where}: the position table must be (L, {shard.shape[1]}), got {tuple(pos_table.shape)}")
    if position_ids is not None and position_ids.shape != ids.shape:
        raise ValueError(
            f"{where}: position_ids must have the shape of ids {tuple(ids.shape)}, got {tuple(position_ids.shape)}"
        )
    return _fake_empty(shard, shape, _F32, ids, pos_table, position_ids)


def _compose_values(ids, shard, pos_table, position_ids, start, vpe, sp) -> Tensor:
    """reduce(compose_shard(ids, shard)) + pos rows: (B, T, D), or (B, T/n, D)
    with sequence_parallel. Linear in (shard, pos_table). Tensors without
    data (meta, fake) give _shapes_only's result, without communication."""
    B, T = ids.shape
    D = shard.shape[-1]
    world, rank, group = vpe.world_size, vpe.rank, vpe.group
    where = "tokpos.torch.VocabParallelComposer" if pos_table is not None else "tokpos.torch.VocabParallelEmbedding"
    tensors = (ids, shard, pos_table, position_ids)
    shape = (B, T // world if sp else T, D)
    if not all(t is None or _has_data(t) for t in tensors):
        return _shapes_only(where, tensors, shape)
    # The partial is written T-major when it is reduce-scattered over T,
    # so the collective's dim 0 is T; compose_shard writes the (B, T, D)
    # view of it (innermost stride 1).
    buf = torch.empty((T, B, D) if sp else (B, T, D), dtype=_F32, device="cpu")
    if not _has_data(buf):  # a fake mode around real tensors: no memory to write
        return _shapes_only(where, tensors, shape)
    if _graph_tracer():
        _refuse(where, (), ())
    partial = buf.permute(1, 0, 2) if sp else buf
    # The kernel checks the ids, and the positions (start + t, or
    # position_ids) against the position table's L rows, before any
    # communication and alike on every rank. It gets a table of L zero
    # rows for that (a stride-0 view of one row: x + 0 is x, bar a -0,
    # which the sum may make +0 anyway); the real rows are added after
    # the reduction.
    zeros = None
    if pos_table is not None:
        zeros = torch.zeros((1, D), dtype=_F32).expand(pos_table.shape[0], D)
    _core.compose_shard(
        partial, _plain(ids), _plain(shard), vpe.vocab_size, vpe.row_begin, zeros, _plain(position_ids),
        start, where,
    )
    if sp:
        chunk = T // world
        t0 = rank * chunk
        out = _reduce_scatter_t(buf, world, group).permute(1, 0, 2)  # (B, chunk, D)
    else:
        dist.all_reduce(buf, op=dist.ReduceOp.SUM, group=group)
        out, t0, chunk = buf, 0, T
    if pos_table is not None:
        pos = _plain(pos_table)
        if position_ids is None:
            rows = pos[start + t0 : start + t0 + chunk].to(_F32).unsqueeze(0)
        else:
            rows = pos[_plain(position_ids)[:, t0 : t0 + chunk]].to(_F32)
        out = torch.add(out, rows, out=torch.empty((B, chunk, D), dtype=_F32)) if sp else out.add_(rows)
    elif sp:
        out = out.contiguous()
    return out


def _compose_grads(d_out, ids, position_ids, start, vpe, sp, shard_dtype, pos_rows, pos_dtype):
    """The transpose of _compose_values: (d_shard (S, D) in shard_dtype,
    d_pos (pos_rows, D) in pos_dtype), pos_rows 0 or shard_dtype None for a
    gradient not wanted (a (0, D) tensor in its slot). With sequence_parallel
    the T slices are all-gathered first. Meta or fake d_out: the shapes
    alone, without communication."""
    D = d_out.shape[-1]
    rows = vpe.shard_rows if shard_dtype is not None else 0
    tensors = (d_out, ids, position_ids)
    if not all(t is None or _has_data(t) for t in tensors) or not _has_data(torch.empty(0)):
        # meta or fake tensors, or FakeTensorMode around real ones
        _refuse("tokpos.torch.VocabParallelComposer.backward", ("d_out", "ids", "position_ids"), tensors)
        return (
            _fake_empty(d_out, (rows, D), shard_dtype or _F32, ids, position_ids),
            _fake_empty(d_out, (pos_rows, D), pos_dtype or _F32, ids, position_ids),
        )
    if _graph_tracer():
        _refuse("tokpos.torch.VocabParallelComposer.backward", (), ())
    d_out = d_out.to(_F32)
    if sp:
        # Backward of the reduce-scatter: every rank needs the whole d_out.
        d_full = _gather_t(d_out.contiguous(), vpe.world_size, vpe.group)
    else:
        # Backward of the all-reduce: the identity (d_out is replicated).
        d_full = d_out if d_out.stride(-1) == 1 else d_out.contiguous()
    d_shard = _lazy_zeros(rows, D) if rows else None
    d_pos = _lazy_zeros(pos_rows, D) if pos_rows else None
    _core.compose_shard_backward(
        d_shard,
        d_pos,
        d_full,
        _plain(ids),
        vpe.vocab_size,
        vpe.row_begin,
        _plain(position_ids),
        start,
        -1,
        "tokpos.torch.VocabParallelComposer.backward",
    )
    if d_shard is None:
        d_shard = torch.empty((0, D), dtype=_F32)
    elif shard_dtype != _F32:
        d_shard = d_shard.to(shard_dtype)
    if d_pos is None:
        d_pos = torch.empty((0, D), dtype=_F32)
    elif pos_dtype != _F32:
        d_pos = d_pos.to(pos_dtype)
    return d_shard, d_pos


class _VocabParallelCompose(torch.autograd.Function):
    """out = reduce(compose_shard(ids, shard)) + pos rows.

    apply(ids (B, T), shard (S, D), pos_table (L, D) or None, position_ids
    (B, T) or None, start, vpe, sp) -> (B, T, D), or (B, T/n, D) with
    sequence_parallel sp. With setup_context, so forward-mode AD and
    torch.func take it: jvp is the same function of the tables' tangents
    (it is linear in them), with the same collectives, so every rank must
    give a tangent to the same call (a missing one is a zero table); the
    backward is _VocabParallelComposeBackward, whose own backward is this
    function again; vmap is one call per batch element, each with its
    collectives."""

    @staticmethod
    def forward(ids, shard, pos_table, position_ids, start, vpe, sp):
        return _compose_values(ids, shard, pos_table, position_ids, start, vpe, sp)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ids, shard, pos_table, position_ids, start, vpe, sp = inputs
        ctx.save_for_backward(ids, position_ids)
        ctx.save_for_forward(ids, position_ids)
        ctx.args = (start, vpe, sp)
        ctx.pos_rows = 0 if pos_table is None else pos_table.shape[0]
        ctx.pos_dtype = None if pos_table is None else pos_table.dtype
        ctx.shard_dtype = shard.dtype
        ctx.shard_shape = tuple(shard.shape)

    @staticmethod
    def backward(ctx, d_out):
        ids, position_ids = ctx.saved_tensors
        want_shard = ctx.needs_input_grad[1]
        want_pos = ctx.needs_input_grad[2]
        if d_out is None or not (want_shard or want_pos):
            return None, None, None, None, None, None, None
        d_shard, d_pos = _VocabParallelComposeBackward.apply(
            d_out, ids, position_ids, *ctx.args, ctx.shard_dtype if want_shard else None,
            ctx.pos_rows if want_pos else 0, ctx.pos_dtype,
        )
        return None, d_shard if want_shard else None, d_pos if want_pos else None, None, None, None, None

    @staticmethod
    def jvp(ctx, ids_t, shard_t, pos_t, *_):
        ids, position_ids = ctx.saved_tensors
        if shard_t is None:
            shard_t = torch.zeros(ctx.shard_shape, dtype=ctx.shard_dtype, device=ids.device)
        if ctx.pos_rows and pos_t is None:
            pos_t = torch.zeros((ctx.pos_rows, ctx.shard_shape[1]), dtype=ctx.pos_dtype, device=ids.device)
        return _VocabParallelCompose.apply(ids, shard_t, pos_t, position_ids, *ctx.args)

    @staticmethod
    def vmap(info, in_dims, *args):
        return _by_element(_VocabParallelCompose.apply, info, in_dims, *args)


class _VocabParallelComposeBackward(torch.autograd.Function):
    """_compose_grads as an autograd.Function: linear in d_out, so its jvp
    is itself on the tangent and its backward is _VocabParallelCompose on
    the gradients (the transpose of a transpose), which is what torch.func's
    grad, jacrev and hessian need."""

    @staticmethod
    def forward(d_out, ids, position_ids, start, vpe, sp, shard_dtype, pos_rows, pos_dtype):
        return _compose_grads(d_out, ids, position_ids, start, vpe, sp, shard_dtype, pos_rows, pos_dtype)

    @staticmethod
    def setup_context(ctx, inputs, output):
        d_out, ids, position_ids = inputs[:3]
        ctx.save_for_backward(ids, position_ids)
        ctx.save_for_forward(ids, position_ids)
        ctx.args = inputs[3:]
        ctx.d_out_dtype = d_out.dtype
        ctx.shapes = tuple((tuple(t.shape), t.dtype) for t in output)

    @staticmethod
    def backward(ctx, g_shard, g_pos):
        ids, position_ids = ctx.saved_tensors
        if not ctx.needs_input_grad[0]:
            return (None,) * 9
        start, vpe, sp, shard_dtype, pos_rows, pos_dtype = ctx.args
        (shard_shape, sdt), (pos_shape, pdt) = ctx.shapes
        if shard_dtype is None:  # its slot is a (0, D) tensor: no rows, so no contribution
            shard_shape, sdt, g_shard = (vpe.shard_rows, shard_shape[1]), _F32, None
        if g_shard is None:
            g_shard = torch.zeros(shard_shape, dtype=sdt, device=ids.device)
        if pos_rows == 0:
            g_pos = None
        elif g_pos is None:
            g_pos = torch.zeros(pos_shape, dtype=pdt, device=ids.device)
        d_d_out = _VocabParallelCompose.apply(ids, g_shard, g_pos, position_ids, start, vpe, sp)
        return d_d_out.to(ctx.d_out_dtype), None, None, None, None, None, None, None, None

    @staticmethod
    def jvp(ctx, d_out_t, *_):
        ids, position_ids = ctx.saved_tensors
        return _VocabParallelComposeBackward.apply(d_out_t, ids, position_ids, *ctx.args)

    @staticmethod
    def vmap(info, in_dims, *args):
        return _by_element(_VocabParallelComposeBackward.apply, info, in_dims, *args)


def _check_ids(ids, where: str) -> Tensor:
    """ids as the modules reshape them (a CPU tensor, (B, T) or (T)); the
    kernel checks the rest (dtype, values) before any communication."""
    if not isinstance(ids, Tensor):
        raise ValueError(f"{where}: ids must be a torch tensor, got {type(ids).__name__}")
    if ids.dim() not in (1, 2):
        raise ValueError(f"{where}: ids must be (B, T) or (T), got {ids.dim()}-D")
    _require_host(where, ("ids",), ids)
    return ids


class VocabParallelEmbedding(nn.Module):
    """One rank's shard of a (vocab_size, dim) token table.

    weight is the (S, D) float32 shard of global rows [row_begin, row_begin +
    S), S = ceil(V_padded / world_size); rows at or past vocab_size are
    padding (zero, no gradient). Initialised as rows [row_begin, row_begin +
    S) of tokpos.torch.TokenEmbedding(vocab_size, dim, seed=seed,
    init_std=init_std) bit for bit. forward(ids) gives the whole (B, T, D)
    output on every rank (all_reduce of the shards' partials).

    group None is the default process group (torch.distributed must be
    initialised). ids must be the same on every rank of the group.

    device is the shard's (torch.nn.Embedding's factory argument):
    device="meta", torch.device("meta") as a context, torch.nn.utils.skip_init
    and FakeTensorMode build the module from shapes alone, drawing nothing;
    its values come later (to_empty, then reset_parameters or
    load_state_dict). A meta or fake input gives a meta or fake output of
    the right shape, with no communication."""

    def __init__(
        self,
        vocab_size: int,
        dim: int,
        *,
        group=None,
        pad_vocab_to_multiple_of: int = 1,
        seed: int = 0,
        init_std: float = 0.02,
        device=None,
    ) -> None:
        super().__init__()
        self._setup(vocab_size, dim, group, pad_vocab_to_multiple_of)
        self.seed = _check_seed(seed)
        self.init_std = _real("init_std", init_std)
        self.weight = nn.Parameter(torch.zeros((self.shard_rows, self.dim), dtype=_F32, device=device))
        self.reset_parameters()

    def _setup(self, vocab_size, dim, group, pad_vocab_to_multiple_of) -> None:
        where = "tokpos.torch.VocabParallelEmbedding"
        self.vocab_size = _check_int("vocab_size", vocab_size, 1)
        self.dim = _check_int("dim", dim, 1)
        self.pad_vocab_to_multiple_of = _check_int("pad_vocab_to_multiple_of", pad_vocab_to_multiple_of, 1)
        self.group = group
        self.world_size, self.rank = _group_info(group, where)
        self.row_begin, self.shard_rows = _core.vocab_shard_range(
            self.vocab_size, self.pad_vocab_to_multiple_of, self.world_size, self.rank
        )
        # The real rows this rank holds: global [row_begin, row_end).
        self.row_end = max(self.row_begin, min(self.row_begin + self.shard_rows, self.vocab_size))
        self.padded_vocab_size = self.shard_rows * self.world_size

    @property
    def num_real_rows(self) -> int:
        return self.row_end - self.row_begin

    def reset_parameters(self) -> None:
        """Redraws the shard's real rows from (seed, TOKEN_TABLE_STREAM) at
        their global offsets; padding rows are zero. init_std is checked as
        the C++ modules check it on every rank, one without real rows too, so
        all ranks raise the same error. A meta or fake weight (shapes alone)
        is left as it is."""
        if not _has_data(self.weight):
            return
        with torch.no_grad():
            shard = torch.zeros((self.shard_rows, self.dim), dtype=_F32, device="cpu")
            if not _has_data(shard):  # a fake mode around a real module: nothing real to draw into
                return
            n = self.num_real_rows
            _core.init_table(
                shard[:n], self.seed, _core.TOKEN_TABLE_STREAM, self.init_std, self.row_begin * self.dim,
                "tokpos.torch.VocabParallelEmbedding",
            )
            self.weight.copy_(shard)

    def forward(self, ids: Tensor) -> Tensor:
        """ids (B, T) -> (B, T, D); (N) -> (N, D); the same on every rank."""
        ids = _check_ids(ids, "tokpos.torch.VocabParallelEmbedding")
        _require_host("tokpos.torch.VocabParallelEmbedding", ("weight",), self.weight)
        flat = ids.dim() == 1
        ids2 = ids.unsqueeze(0) if flat else ids
        out = _VocabParallelCompose.apply(ids2, self.weight, None, None, 0, self, False)
        return out.squeeze(0) if flat else out

    # -- safetensors ---------------------------------------------------------

    @classmethod
    def from_safetensors(
        cls, path, tensor_name: str, *, group=None, pad_vocab_to_multiple_of: int = 1
    ) -> "VocabParallelEmbedding":
        """The shard of the (V, D) table tensor_name in the safetensors file
        path (F32, F16 or BF16, converted to float32 exactly), read by the
        C++ reader (tokpos/safetensors.h): it validates the whole header,
        and only the rank's rows are read from the file (pread), so a file
        truncated meanwhile is an error, never a signal. A path that is
        missing or not a regular file (a FIFO is refused at once, without
        waiting for a writer), a corrupt header or a byte range past the end
        of the file raise OSError; an absent tensor, another dtype or a
        shape that is not 2-D raise ValueError. Under FakeTensorMode the
        header is read and validated, and the module is built from its
        shapes alone (a fake shard, no rows read)."""
        where = "tokpos.torch.VocabParallelEmbedding.from_safetensors"
        f = _core.SafetensorsFile.open(os.fsdecode(path))
        dtype, shape = f.info(tensor_name)
        if dtype not in ("F32", "F16", "BF16"):
            raise ValueError(f"{where}: {tensor_name!r} has dtype {dtype}; only F32, F16 and BF16 are supported")
        if len(shape) != 2 or shape[0] < 1 or shape[1] < 1:
            raise ValueError(f"{where}: {tensor_name!r} has shape {list(shape)}; a (vocab_size, dim) table is needed")
        V, D = shape
        module = cls.__new__(cls)
        nn.Module.__init__(module)
        module._setup(V, D, group, pad_vocab_to_multiple_of)
        module.seed = 0
        module.init_std = 0.0
        shard = torch.zeros((module.shard_rows, D), dtype=_F32, device="cpu")
        n = module.num_real_rows
        if n and _has_data(shard):
            f.read_rows(tensor_name, module.row_begin, shard[:n])
        module.weight = nn.Parameter(shard)
        return module

    def full_table(self, dst: Optional[int] = 0) -> Optional[Tensor]:
        """The (V, D) table gathered from every rank, padding rows dropped:
        on the group rank dst only (None elsewhere), or on every rank with
        dst=None. A collective: every rank must call it. A meta or fake
        shard (no values) is a RuntimeError, on every rank alike."""
        shard = self.weight.detach().contiguous()
        if not _has_data(shard) or not _has_data(torch.empty(0)):
            raise RuntimeError(
                "tokpos.torch.VocabParallelEmbedding.full_table: the shard has no values to gather (a meta or "
                "fake tensor, or a FakeTensorMode is active); give it values first (to_empty, load_state_dict)"
            )
        if dst is None:
            parts = [torch.empty_like(shard) for _ in range(self.world_size)]
            dist.all_gather(parts, shard, group=self.group)
        else:
            parts = [torch.empty_like(shard) for _ in range(self.world_size)] if self.rank == dst else None
            root = dst if self.group is None else dist.get_global_rank(self.group, dst)
            dist.gather(shard, parts, dst=root, group=self.group)
            if self.rank != dst:
                return None
        return torch.cat(parts)[: self.vocab_size]

    def save_safetensors(self, path, tensor_name: str) -> None:
        """Gathers the shards to group rank 0, which writes the (V, D)
        float32 table as tensor_name in one safetensors file at path with
        the C++ writer (tokpos::write_safetensors), atomically: a temporary
        file beside the target, fsync, rename. As every tokpos writer, it
        follows a symbolic link and replaces the file the link ends in (the
        link stays), keeps an existing file's permission bits, gives a new
        file 0666 & ~umask, and refuses a path that is not a regular file (a
        FIFO, a directory, a device) or a link to nothing, leaving it as it
        was. A collective: every rank must call it, and every rank returns
        after the file is complete, or raises OSError if rank 0 could not
        write it."""
        where = "tokpos.torch.VocabParallelEmbedding.save_safetensors"
        table = self.full_table(dst=0)
        failure = [None]
        if self.rank == 0:
            try:
                _core.write_safetensors(os.fsdecode(path), [(tensor_name, table.contiguous())], {})
            except Exception as e:  # noqa: BLE001 (reported to every rank below)
                failure = [f"{type(e).__name__}: {e}"]
                error = e
        src = dist.get_global_rank(self.group, 0) if self.group is not None else 0
        dist.broadcast_object_list(failure, src=src, group=self.group)
        if failure[0] is not None:
            if self.rank == 0:
                raise error
            raise OSError(f"{where}: rank 0 could not write {os.fspath(path)!r}: {failure[0]}")

    def extra_repr(self) -> str:
        s = (
            f"{self.vocab_size}, {self.dim}, rank={self.rank}/{self.world_size}, "
            f"rows=[{self.row_begin}, {self.row_begin + self.shard_rows})"
        )
        if self.pad_vocab_to_multiple_of != 1:
            s += f", pad_vocab_to_multiple_of={self.pad_vocab_to_multiple_of}"
        return s


class VocabParallelComposer(nn.Module):
    """The input stage over a vocab-parallel table: composer(ids) = token
    rows (from every rank's shard, summed across ranks) + position rows.

    Without sequence_parallel every rank gets the whole (B, T, D) output.
    With sequence_parallel=True rank r gets the T slice [r*T/n, (r+1)*T/n)
    as (B, T/n, D) (T must divide by the world size). The position table
    (replicated on every rank) is added after the reduction; its gradient is
    the whole batch's on every rank (no all-reduce of it is needed, and none
    must be added)."""

    def __init__(
        self,
        vocab_parallel_embedding: VocabParallelEmbedding,
        positional_embedding: _PositionalEmbedding,
        *,
        sequence_parallel: bool = False,
    ) -> None:
        super().__init__()
        _check_composer_parts(
            vocab_parallel_embedding, VocabParallelEmbedding, "vocab_parallel_embedding", positional_embedding
        )
        self.token = vocab_parallel_embedding
        self.position = positional_embedding
        self.sequence_parallel = bool(sequence_parallel)

    def forward(self, ids: Tensor, *, position_ids: Optional[Tensor] = None, start: int = 0) -> Tensor:
        """ids (B, T) (or (T)) -> (B, T, D) (or (T, D)); with
        sequence_parallel (B, T/n, D) (or (T/n, D))."""
        where = "tokpos.torch.VocabParallelComposer"
        ids = _check_ids(ids, where)
        _require_host(where, ("token.weight", "position.weight"), self.token.weight, self.position.weight)
        start = _check_int("start", start, _INT64_MIN)  # an int64 for the kernel, which checks its range
        flat = ids.dim() == 1
        ids2 = ids.unsqueeze(0) if flat else ids
        T = ids2.shape[1]
        world = self.token.world_size
        if self.sequence_parallel and T % world:
            raise ValueError(
                f"{where}: sequence_parallel needs the sequence length T = {T} to divide by the world size {world}"
            )
        pos2 = None
        if position_ids is not None:
            if not isinstance(position_ids, Tensor):
                raise ValueError(f"{where}: position_ids must be a torch tensor, got {type(position_ids).__name__}")
            _require_host(where, ("position_ids",), position_ids)
            pos2 = position_ids.unsqueeze(0) if flat and position_ids.dim() == 1 else position_ids
        # The kernel checks ids and positions before any communication.
        out = _VocabParallelCompose.apply(
            ids2, self.token.weight, self.position.weight, pos2, start, self.token, self.sequence_parallel
        )
        return out.squeeze(0) if flat else out
