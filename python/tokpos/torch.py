"""tokpos.torch: the lesson's embedding modules as torch.nn.Modules.

    TokenEmbedding                 (V, D) token table, ids -> (B, T, D)
    LearnedPositionalEmbedding     (L, D) trained position table
    SinusoidalPositionalEmbedding  (L, D) fixed table, a buffer (no parameters)
    EmbeddingComposer              token rows + position rows in one fused kernel
    RotaryEmbedding                RoPE of queries and keys (apply_rope, a function too)

Every forward runs tokpos's compiled kernels on the tensors' own memory (no
copies). Autograd goes through custom operators in the "tokpos" namespace
(torch.ops.tokpos.compose, .compose_backward, .token_grad_rows,
.apply_rope), registered
with torch.library.custom_op, so the modules work under autograd and under
torch.compile(fullgraph=True), and each op passes torch.library.opcheck.

Gradients are accumulated in float32 in a fixed order: each table row sums
its contributions in increasing (b, t) order, bitwise identical for any
thread count (tokpos.set_num_threads) and equal to torch.nn.Embedding's
where torch sums in the same order. A table of another dtype (bfloat16,
float16) gets its gradient computed in float32 and rounded once.

When no gradient is needed (grad mode off, or no table requires grad) and
the call is not being compiled, forward calls the kernel directly, skipping
the operator dispatch: the decode step of a generation loop costs one kernel
call plus an output allocation.

Only CPU tensors are supported; ids are int32 or int64, tables float32,
bfloat16 or float16.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import torch
from torch import Tensor, nn

from . import _core, sinusoidal_table
from . import rope as _rope
from ._arrays import INT64_MAX as _INT64_MAX
from ._arrays import INT64_MIN as _INT64_MIN
from ._arrays import UINT64_MAX as _UINT64_MAX
from ._arrays import count as _count
from ._arrays import real as _real
from ._arrays import require_cpu as _require_cpu_one

__all__ = [
    "EmbeddingComposer",
    "LearnedPositionalEmbedding",
    "RotaryEmbedding",
    "SinusoidalPositionalEmbedding",
    "TokenEmbedding",
    "VocabParallelComposer",
    "VocabParallelEmbedding",
    "apply_rope",
]

_F32 = torch.float32


def _require_cpu(where: str, names: tuple, *tensors) -> None:
    """ValueError naming the first tensor not on the CPU: tokpos's kernels
    read and write host memory only. Called by every entry point before a
    kernel or an operator runs, and by the operators' fake kernels (which
    torch.compile traces and which the dispatcher also runs for meta
    tensors), so a meta or device tensor is refused eagerly, under autograd
    and under torch.compile alike, and never gets an uninitialised result."""
    for name, t in zip(names, tensors):
        if t is not None and t.device.type != "cpu":
            _require_cpu_one(t, name, where)


_COMPOSE_NAMES = ("ids", "token_table", "pos_table", "position_ids")


def _plain(t: Optional[Tensor]) -> Optional[Tensor]:
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


def _view(t: Tensor):
    """t as a numpy view (no copy) for the inference fast path; bfloat16,
    which numpy lacks, stays a tensor (read through DLPack)."""
    if t.requires_grad:
        t = t.detach()
    return t if t.dtype is torch.bfloat16 else t.numpy()


def _out_shape(ids: Tensor, table: Tensor) -> list:
    return [*ids.shape, table.shape[1]]


def _compose_into(
    out: Tensor,
    ids: Tensor,
    token_table: Tensor,
    pos_table: Optional[Tensor],
    position_ids: Optional[Tensor],
    start: int,
    where: str,
) -> Tensor:
    _core.compose(
        out, _plain(ids), _plain(token_table), _plain(pos_table), _plain(position_ids), start, -1, where
    )
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
    start + t), summed in float32 and rounded once to token_table's dtype."""
    out = torch.empty(_out_shape(ids, token_table), dtype=token_table.dtype)
    return _compose_into(out, ids, token_table, pos_table, position_ids, start, "tokpos::compose")


@_compose_op.register_fake
def _compose_fake(ids, token_table, pos_table, position_ids, start, padding_idx, sparse):
    _require_cpu("tokpos::compose", _COMPOSE_NAMES, ids, token_table, pos_table, position_ids)
    torch._check(token_table.dim() == 2, lambda: "tokpos::compose: token_table must be 2-D")
    torch._check(ids.dim() in (1, 2), lambda: "tokpos::compose: ids must be 1-D or 2-D")
    return token_table.new_empty(_out_shape(ids, token_table))


def _lazy_zeros(rows: int, dim: int) -> Tensor:
    """A zeroed float32 (rows, dim) tensor whose pages the kernel provides
    already zero: numpy's zeros is calloc, which for a large block maps fresh
    zero pages instead of writing zeros. torch.zeros writes every byte (and
    faults every page in) even though the backward then touches only the rows
    the batch used; for GPT-2's 154 MB token gradient that write is most of a
    training step's embedding time. The untouched rows stay the kernel's zero
    page until something reads them (the first read of each page is a minor
    fault, not a 4 KiB write)."""
    return torch.from_numpy(np.zeros((rows, dim), dtype=np.float32))


@torch.library.custom_op("tokpos::compose_backward", mutates_args=(), device_types="cpu")
def _compose_backward_op(
    d_out: Tensor,
    ids: Tensor,
    position_ids: Optional[Tensor],
    start: int,
    vocab_size: int,
    pos_rows: int,
    padding_idx: int,
) -> tuple[Tensor, Tensor]:
    """The float32 gradients of tokpos::compose: d_token_table (vocab_size, D)
    and d_pos_table (pos_rows, D), each summed per row in increasing (b, t)
    order. vocab_size or pos_rows 0: that gradient is not computed (a (0, D)
    tensor). padding_idx >= 0: that token row gets no gradient."""
    dim = d_out.shape[-1]
    d_tok = _lazy_zeros(vocab_size, dim)
    d_pos = _lazy_zeros(pos_rows, dim)
    if vocab_size or pos_rows:
        _core.compose_backward(
            d_tok if vocab_size else None,
            d_pos if pos_rows else None,
            _plain(d_out.to(_F32)),
            _plain(ids),
            _plain(position_ids),
            start,
            padding_idx,
            -1,
            "tokpos::compose_backward",
        )
    return d_tok, d_pos


@_compose_backward_op.register_fake
def _compose_backward_fake(d_out, ids, position_ids, start, vocab_size, pos_rows, padding_idx):
    _require_cpu("tokpos::compose_backward", ("d_out", "ids", "position_ids"), d_out, ids, position_ids)
    dim = d_out.shape[-1]
    return d_out.new_empty((vocab_size, dim), dtype=_F32), d_out.new_empty((pos_rows, dim), dtype=_F32)


@torch.library.custom_op("tokpos::token_grad_rows", mutates_args=(), device_types="cpu")
def _token_grad_rows_op(d_out: Tensor, ids: Tensor, vocab_size: int, padding_idx: int) -> tuple[Tensor, Tensor]:
    """The token gradient as a sparse matrix: rows (U,) int64, the touched
    rows sorted and unique (padding_idx left out), and values (U, D)
    float32, the same bits the dense backward adds to a zeroed table."""
    plan = _core.row_plan(_plain(ids), vocab_size, padding_idx, "tokpos::token_grad_rows")
    rows = torch.empty((plan.num_touched,), dtype=torch.int64)
    values = torch.empty((plan.num_touched, d_out.shape[-1]), dtype=_F32)
    plan.touched_rows(rows)
    plan.gradient_rows(values, _plain(d_out.to(_F32)))
    return rows, values


@_token_grad_rows_op.register_fake
def _token_grad_rows_fake(d_out, ids, vocab_size, padding_idx):
    _require_cpu("tokpos::token_grad_rows", ("d_out", "ids"), d_out, ids)
    touched = torch.library.get_ctx().new_dynamic_size()
    return (
        d_out.new_empty((touched,), dtype=torch.int64),
        d_out.new_empty((touched, d_out.shape[-1]), dtype=_F32),
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


def _compose_backward(ctx, d_out):
    ids, position_ids = ctx.saved_tensors
    want_tok = ctx.needs_input_grad[1]
    want_pos = ctx.needs_input_grad[2]
    d_tok = d_pos = None
    if want_tok and ctx.sparse:
        rows, values = _token_grad_rows_op(d_out, ids, ctx.vocab_size, ctx.padding_idx)
        d_tok = torch.sparse_coo_tensor(
            rows.unsqueeze(0),
            values.to(ctx.token_dtype),
            (ctx.vocab_size, d_out.shape[-1]),
            is_coalesced=True,
            check_invariants=False,
        )
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


# ---------------------------------------------------------------------------
# Module helpers.


def _needs_grad(token_table: Tensor, pos_table: Optional[Tensor]) -> bool:
    return torch.is_grad_enabled() and (
        token_table.requires_grad or (pos_table is not None and pos_table.requires_grad)
    )


def _compose(
    ids: Tensor,
    token_table: Tensor,
    pos_table: Optional[Tensor],
    position_ids: Optional[Tensor],
    start: int,
    padding_idx: int,
    sparse: bool,
    where: str,
) -> Tensor:
    """The modules' one entry point: the custom op when autograd or the
    compiler needs it, else the kernel directly (the inference fast path)."""
    if torch.compiler.is_compiling() or _needs_grad(token_table, pos_table):
        _require_cpu(where, _COMPOSE_NAMES, ids, token_table, pos_table, position_ids)
        return _compose_op(ids, token_table, pos_table, position_ids, start, padding_idx, sparse)
    out = _compose_raw(ids, token_table, pos_table, position_ids, start, where)
    if out is not None:
        return out
    # Not the decode step's contiguous CPU tensors (the raw path took those).
    _require_cpu(where, _COMPOSE_NAMES, ids, token_table, pos_table, position_ids)
    out = torch.empty(_out_shape(ids, token_table), dtype=token_table.dtype)
    try:
        # numpy views cross into the core faster than DLPack capsules.
        _core.compose(
            out.numpy() if out.dtype is not torch.bfloat16 else out,
            _view(ids),
            _view(token_table),
            None if pos_table is None else _view(pos_table),
            None if position_ids is None else _view(position_ids),
            start,
            -1,
            where,
        )
    except (TypeError, ValueError):
        # Not a CPU tensor, an innermost stride other than 1 (ids may be any
        # view, as torch.nn.Embedding allows), or a real error: the checked
        # path copies what needs it and lets the core name the problem.
        _compose_into(out, ids, token_table, pos_table, position_ids, start, where)
    return out


# tokpos::DType codes (tokpos/dtype.h) for _core.compose_raw.
_TABLE_CODES = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2}
_INDEX_CODES = {torch.int32: 3, torch.int64: 4}


def _contiguous_cpu(t: Tensor) -> bool:
    return t.is_cpu and t.is_contiguous()


def _compose_raw(
    ids: Tensor,
    token_table: Tensor,
    pos_table: Optional[Tensor],
    position_ids: Optional[Tensor],
    start: int,
    where: str,
) -> Optional[Tensor]:
    """The decode step's path: the kernel over the tensors' addresses, read
    here with their shapes and dtypes (cheaper than DLPack capsules). Only
    for contiguous CPU tensors whose shapes agree (so every address covers
    the extent the core is told); anything else returns None and takes the
    checked path, which names the problem."""
    tc = _TABLE_CODES.get(token_table.dtype)
    ic = _INDEX_CODES.get(ids.dtype)
    if tc is None or ic is None or token_table.dim() != 2:
        return None
    if not (_contiguous_cpu(token_table) and _contiguous_cpu(ids)):
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
        if pc is None or pos_table.dim() != 2 or pos_table.shape[1] != D or not _contiguous_cpu(pos_table):
            return None
        L = pos_table.shape[0]
        pp = pos_table.data_ptr()
        if pp == 0:  # an empty table: 0 would mean "no table"
            return None
    if position_ids is not None:
        qc = _INDEX_CODES.get(position_ids.dtype)
        if qc is None or position_ids.shape != ids.shape or not _contiguous_cpu(position_ids):
            return None
        qp = position_ids.data_ptr()
    out = torch.empty((T, D) if B < 0 else (B, T, D), dtype=token_table.dtype)
    _core.compose_raw(
        out.data_ptr(), ids.data_ptr(), ic, B, T, token_table.data_ptr(), tc, V, D, pp, pc, L, qp, qc, start, where
    )
    return out


def _position_error(where: str, limit: int, position_ids: Optional[Tensor], start: int, T: int) -> Optional[str]:
    """The message for the first position at or past limit, in (b, t) order,
    or None if every position is below it."""
    if position_ids is None:
        if start + T <= limit:
            return None
        t = max(0, limit - start)
        b, pos = 0, start + t
    else:
        p = position_ids.detach().reshape(-1, position_ids.shape[-1]) if position_ids.dim() else position_ids
        bad = (p >= limit).nonzero()
        if bad.numel() == 0:
            return None
        b, t = (int(v) for v in bad[0])
        pos = int(p[b, t])
        if position_ids.dim() == 1:
            b = 0
    return f"{where}: position {pos} at (b={b}, t={t}) is at or past max_context_length {limit}"


def _table(module: nn.Module) -> Tensor:
    """module.weight (a parameter or a buffer) read straight from the
    module's dicts: nn.Module.__getattr__ costs more than the decode step's
    kernel. Eager only (torch.compile traces the attribute)."""
    weight = module._parameters.get("weight")
    return weight if weight is not None else module._buffers["weight"]


def _check_int(name: str, value, minimum: int, maximum: int = _INT64_MAX) -> int:
    """tokpos._arrays.count: an integer in [minimum, maximum] (int64 unless
    said otherwise), or ValueError naming it and the limit."""
    return _count(name, value, minimum, maximum)


def _check_seed(seed) -> int:
    """A table's seed: any uint64 (the Philox key, as the C++ modules take it)."""
    return _count("seed", seed, 0, _UINT64_MAX)


def _draw(rows: int, dim: int, seed: int, stream: int, init_std: float, where: str) -> Tensor:
    """A (rows, dim) float32 CPU table from N(0, init_std^2); the core checks
    init_std as the C++ modules do (finite and >= 0), before it draws."""
    t = torch.empty((rows, dim), dtype=_F32, device="cpu")
    _core.init_table(t, seed, stream, init_std, 0, where)
    return t


# ---------------------------------------------------------------------------
# Modules.


class TokenEmbedding(nn.Module):
    """The (V, D) token table: forward(ids) gives table[ids], (B, T) ids to
    (B, T, D), (N) ids to (N, D).

    weight is drawn from N(0, init_std^2) by tokpos's documented Philox
    generator (stream TOKEN_TABLE_STREAM): the same seed gives the same
    table as the C++ tokpos::TokenEmbedding. padding_idx (as in
    torch.nn.Embedding; negative counts from the end) zeroes that row at
    init, and the row never receives a gradient. sparse=True makes the
    weight's gradient a sparse COO tensor holding only the touched rows
    (torch.nn.Embedding's sparse=True; not supported under torch.compile).
    An id outside [0, V) raises IndexError naming the id, its (b, t) and V.
    """

    def __init__(
        self,
        vocab_size: int,
        dim: int,
        *,
        padding_idx: Optional[int] = None,
        seed: int = 0,
        init_std: float = 0.02,
        sparse: bool = False,
    ) -> None:
        super().__init__()
        vocab_size = _check_int("vocab_size", vocab_size, 1)
        dim = _check_int("dim", dim, 1)
        self.seed = _check_seed(seed)
        self.init_std = _real("init_std", init_std)
        self._setup(vocab_size, dim, padding_idx, sparse)
        self.weight = nn.Parameter(torch.empty((vocab_size, dim), dtype=_F32))
        self.reset_parameters()

    def _setup(self, vocab_size: int, dim: int, padding_idx: Optional[int], sparse: bool) -> None:
        self.vocab_size = vocab_size
        self.dim = dim
        if padding_idx is not None:
            padding_idx = _check_int("padding_idx", padding_idx, _INT64_MIN)
            if not -vocab_size <= padding_idx < vocab_size:
                raise ValueError(f"padding_idx {padding_idx} is outside [-{vocab_size}, {vocab_size})")
            if padding_idx < 0:
                padding_idx += vocab_size
        self.padding_idx = padding_idx
        self.sparse = bool(sparse)

    def reset_parameters(self) -> None:
        """Redraws weight from (seed, TOKEN_TABLE_STREAM) and zeroes the padding row."""
        with torch.no_grad():
            table = _draw(
                self.vocab_size, self.dim, self.seed, _core.TOKEN_TABLE_STREAM, self.init_std,
                "tokpos.torch.TokenEmbedding",
            )
            if self.padding_idx is not None:
                table[self.padding_idx].zero_()
            self.weight.copy_(table)

    @classmethod
    def from_pretrained(
        cls, weight: Tensor, freeze: bool = False, padding_idx: Optional[int] = None, sparse: bool = False
    ) -> "TokenEmbedding":
        """A module over an existing (V, D) table, sharing its memory
        (module.weight.data_ptr() == weight.data_ptr()). As in PyTorch, the
        padding row is kept as given but never receives a gradient; freeze
        makes the weight not require grad."""
        if not isinstance(weight, Tensor) or weight.dim() != 2:
            raise ValueError("from_pretrained needs a 2-D (vocab_size, dim) tensor")
        module = cls.__new__(cls)
        nn.Module.__init__(module)
        module.seed = 0
        module.init_std = 0.0
        module._setup(weight.shape[0], weight.shape[1], padding_idx, sparse)
        module.weight = nn.Parameter(weight, requires_grad=not freeze)
        return module

    def forward(self, ids: Tensor) -> Tensor:
        """ids (B, T) -> (B, T, D); ids (N) -> (N, D)."""
        pad = -1 if self.padding_idx is None else self.padding_idx
        weight = self.weight if torch.compiler.is_compiling() else _table(self)
        return _compose(ids, weight, None, None, 0, pad, self.sparse, "tokpos.torch.TokenEmbedding")

    def extra_repr(self) -> str:
        s = f"{self.vocab_size}, {self.dim}"
        if self.padding_idx is not None:
            s += f", padding_idx={self.padding_idx}"
        if self.sparse:
            s += ", sparse=True"
        return s


class _PositionalEmbedding(nn.Module):
    """Shared forward of the position tables (weight is the (L, D) table:
    a parameter or a buffer)."""

    max_context_length: int
    dim: int
    weight: Tensor

    def forward(self, positions, *, start: int = 0) -> Tensor:
        """positions an int T: rows start .. start+T-1, (T, D). positions a
        (B, T) (or (N)) integer tensor: table[positions], (B, T, D). A
        position at or past max_context_length raises IndexError naming the
        position, its (b, t) and the limit."""
        where = f"tokpos.torch.{type(self).__name__}"
        L = self.max_context_length
        if isinstance(positions, Tensor):
            if torch.compiler.is_compiling():
                return _compose(positions, self.weight, None, None, 0, -1, False, where)
            try:
                return _compose(positions, _table(self), None, None, 0, -1, False, where)
            except IndexError:
                if positions.dtype in (torch.int32, torch.int64) and positions.dim() in (1, 2):
                    message = _position_error(where, L, positions, 0, positions.shape[-1])
                    if message is not None:
                        raise IndexError(message) from None
                raise
        T = _check_int("seq_len", positions, 0)
        start = _check_int("start", start, 0)
        if not torch.compiler.is_compiling():
            message = _position_error(where, L, None, start, T)
            if message is not None:
                raise IndexError(message)
        return self.weight[start : start + T].clone()

    def extra_repr(self) -> str:
        return f"{self.max_context_length}, {self.dim}"


class LearnedPositionalEmbedding(_PositionalEmbedding):
    """A trained (max_context_length, D) position table (GPT-2's wpe).

    weight is drawn from N(0, init_std^2) by tokpos's documented Philox
    generator (stream POSITION_TABLE_STREAM): the same seed gives the same
    table as the C++ tokpos::LearnedPositionalEmbedding."""

    def __init__(self, max_context_length: int, dim: int, *, seed: int = 0, init_std: float = 0.02) -> None:
        super().__init__()
        self.max_context_length = _check_int("max_context_length", max_context_length, 1)
        self.dim = _check_int("dim", dim, 1)
        self.seed = _check_seed(seed)
        self.init_std = _real("init_std", init_std)
        self.weight = nn.Parameter(torch.empty((self.max_context_length, self.dim), dtype=_F32))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Redraws weight from (seed, POSITION_TABLE_STREAM)."""
        with torch.no_grad():
            self.weight.copy_(
                _draw(
                    self.max_context_length, self.dim, self.seed, _core.POSITION_TABLE_STREAM, self.init_std,
                    "tokpos.torch.LearnedPositionalEmbedding",
                )
            )


class SinusoidalPositionalEmbedding(_PositionalEmbedding):
    """The fixed sinusoidal table (max_context_length, D): for "interleaved"
    (the lesson's), entry (p, i) is sin(angle) for even i and cos(angle) for
    odd i, angle = p / base^(2*(i//2)/D), each the exact value rounded to
    float32 (tokpos.sinusoidal_table; other layouts as documented there).

    The table is a non-persistent buffer (recomputed, not saved in
    state_dict): the module has no parameters and gets no gradient."""

    def __init__(
        self, max_context_length: int, dim: int, *, base: float = 10000.0, layout: str = "interleaved"
    ) -> None:
        super().__init__()
        self.max_context_length = _check_int("max_context_length", max_context_length, 1)
        self.dim = _check_int("dim", dim, 1)
        self.base = float(base)
        self.layout = layout
        table = sinusoidal_table(
            self.max_context_length, self.dim, base=self.base, layout=layout, framework="torch"
        )
        self.register_buffer("weight", table, persistent=False)

    def extra_repr(self) -> str:
        return f"{self.max_context_length}, {self.dim}, base={self.base}, layout={self.layout!r}"


def _check_composer_parts(token, token_class: type, token_name: str, positional) -> None:
    """A composer's two modules: of the right classes, with one D."""
    if not isinstance(token, token_class):
        raise ValueError(f"{token_name} must be a tokpos.torch.{token_class.__name__}")
    if not isinstance(positional, _PositionalEmbedding):
        raise ValueError(
            "positional_embedding must be a tokpos.torch LearnedPositionalEmbedding or SinusoidalPositionalEmbedding"
        )
    if token.dim != positional.dim:
        raise ValueError(f"{token_name} has dim {token.dim} but positional_embedding has dim {positional.dim}")


class EmbeddingComposer(nn.Module):
    """The input stage: composer(ids) = token rows + position rows, (B, T, D),
    computed by one fused kernel (each element summed in float32, rounded
    once to the token table's dtype).

    Positions are start + t (0 .. T-1 by default, the same for every row of
    the batch), or position_ids (B, T) for padded or packed batches. The
    composer's parameters are its two modules' (token, then position)."""

    def __init__(self, token_embedding: TokenEmbedding, positional_embedding: _PositionalEmbedding) -> None:
        super().__init__()
        _check_composer_parts(token_embedding, TokenEmbedding, "token_embedding", positional_embedding)
        self.token = token_embedding
        self.position = positional_embedding

    def forward(self, ids: Tensor, *, position_ids: Optional[Tensor] = None, start: int = 0) -> Tensor:
        """ids (B, T) (or (N)) -> (B, T, D) (or (N, D))."""
        where = "tokpos.torch.EmbeddingComposer"
        if torch.compiler.is_compiling():
            tok, pos = self.token, self.position
            pad = -1 if tok.padding_idx is None else tok.padding_idx
            return _compose(ids, tok.weight, pos.weight, position_ids, start, pad, tok.sparse, where)
        modules = self._modules
        tok, pos = modules["token"], modules["position"]
        pad = -1 if tok.padding_idx is None else tok.padding_idx
        if type(start) is not int or not 0 <= start <= _INT64_MAX:
            start = _check_int("start", start, 0)
        T = ids.shape[-1] if ids.dim() else 0
        if position_ids is None:
            message = _position_error(where, pos.max_context_length, None, start, T)
            if message is not None:
                raise IndexError(message)
        try:
            return _compose(ids, _table(tok), _table(pos), position_ids, start, pad, tok.sparse, where)
        except IndexError:
            if (
                position_ids is not None
                and position_ids.dtype in (torch.int32, torch.int64)
                and position_ids.dim() in (1, 2)
            ):
                message = _position_error(where, pos.max_context_length, position_ids, 0, T)
                if message is not None:
                    raise IndexError(message) from None
            raise


# ---------------------------------------------------------------------------
# RoPE.
#
# tokpos::apply_rope is linear in x: forward(x) = a * R(x), R the rotation of
# each pair by its angle and a the attention factor (dims past rotary_dim are
# copied). Its gradient is a * R^T(grad), which the same op computes with
# inverse flipped (inverse negates sin and keeps a), so the backward is one
# more call of the op, itself differentiable. positions and inv_freq get no
# gradient.


def _apply_rope_new(x, positions, inv_freq, layout, rotary_dim, attention_factor, inverse) -> Tensor:
    """The rotation of x into a new contiguous tensor of x's shape and dtype:
    the custom op's body and the inference path both run it."""
    out = torch.empty(x.shape, dtype=x.dtype)
    _rope.apply_rope(
        _plain(x),
        _plain(positions),
        inv_freq,
        layout=layout,
        rotary_dim=rotary_dim,
        attention_factor=attention_factor,
        inverse=inverse,
        out=out,
    )
    return out


@torch.library.custom_op("tokpos::apply_rope", mutates_args=(), device_types="cpu")
def _apply_rope_op(
    x: Tensor,
    positions: Tensor,
    inv_freq: Tensor,
    layout: str,
    rotary_dim: Optional[int],
    attention_factor: float,
    inverse: bool,
) -> Tensor:
    """tokpos.apply_rope(x, positions, inv_freq, ...) into a new contiguous
    tensor of x's shape and dtype."""
    return _apply_rope_new(x, positions, inv_freq, layout, rotary_dim, attention_factor, inverse)


@_apply_rope_op.register_fake
def _apply_rope_fake(x, positions, inv_freq, layout, rotary_dim, attention_factor, inverse):
    torch._check(x.dim() in (3, 4), lambda: "tokpos::apply_rope: x must be (T, H, D) or (B, T, H, D)")
    torch._check(
        positions.dim() == x.dim() - 2, lambda: "tokpos::apply_rope: positions must be (T) or (B, T), as x"
    )
    torch._check(inv_freq.dim() == 1, lambda: "tokpos::apply_rope: inv_freq must be 1-D")
    return x.new_empty(x.shape)


def _apply_rope_setup_context(ctx, inputs, output):
    x, positions, inv_freq, layout, rotary_dim, attention_factor, inverse = inputs
    ctx.save_for_backward(positions, inv_freq)
    ctx.layout = layout
    ctx.rotary_dim = rotary_dim
    ctx.attention_factor = attention_factor
    ctx.inverse = inverse


def _apply_rope_backward(ctx, d_out):
    positions, inv_freq = ctx.saved_tensors
    d_x = None
    if ctx.needs_input_grad[0]:
        d_x = _apply_rope_op(
            d_out, positions, inv_freq, ctx.layout, ctx.rotary_dim, ctx.attention_factor, not ctx.inverse
        )
    return d_x, None, None, None, None, None, None


_apply_rope_op.register_autograd(_apply_rope_backward, setup_context=_apply_rope_setup_context)


def apply_rope(
    x: Tensor,
    positions: Tensor,
    inv_freq,
    *,
    layout: str = "half",
    rotary_dim: Optional[int] = None,
    attention_factor: float = 1.0,
    inverse: bool = False,
) -> Tensor:
    """tokpos.apply_rope with autograd: a new tensor, x rotated by RoPE.

    x (B, T, H, D) with positions (B, T), or (T, H, D) with positions (T)
    (a (B, H, T, D) tensor goes in as x.transpose(1, 2)); x float32,
    bfloat16 or float16, positions int32 or int64; inv_freq the float64
    frequencies of tokpos.rope_frequencies (a tensor or a numpy array). The
    first rotary_dim = 2 * len(inv_freq) dims of each head rotate, in the
    "half" (transformers' rotate_half) or "interleaved" (GPT-J, Meta) pairs;
    cos and sin are multiplied by attention_factor. The gradient of x is the
    transposed rotation times attention_factor; positions and inv_freq get
    none. Bad arguments raise ValueError, positions out of range IndexError."""
    if not isinstance(x, Tensor):
        raise ValueError(f"tokpos.torch.apply_rope: x must be a torch tensor, got {type(x).__name__}")
    if not isinstance(positions, Tensor):
        raise ValueError(
            f"tokpos.torch.apply_rope: positions must be a torch tensor, got {type(positions).__name__}"
        )
    if isinstance(inv_freq, np.ndarray):
        inv_freq = torch.from_numpy(inv_freq)
    elif not isinstance(inv_freq, Tensor):
        raise ValueError(
            f"tokpos.torch.apply_rope: inv_freq must be a tensor or a numpy array, got {type(inv_freq).__name__}"
        )
    if layout not in _rope.ROPE_LAYOUTS:
        raise ValueError(f"tokpos.torch.apply_rope: layout = {layout!r} is not one of 'half', 'interleaved'")
    if rotary_dim is not None:
        rotary_dim = _check_int("tokpos.torch.apply_rope: rotary_dim", rotary_dim, 0)
    if isinstance(attention_factor, bool) or not isinstance(attention_factor, (int, float)):
        raise ValueError(f"tokpos.torch.apply_rope: attention_factor = {attention_factor!r} must be a number")
    attention_factor = float(attention_factor)
    for name, t in (("x", x), ("positions", positions), ("inv_freq", inv_freq)):
        if t.device.type != "cpu":
            raise ValueError(f"tokpos.torch.apply_rope: {name} is on {t.device}; only CPU tensors are supported")
    inverse = bool(inverse)
    if torch.compiler.is_compiling() or (torch.is_grad_enabled() and x.requires_grad):
        return _apply_rope_op(x, positions, inv_freq, layout, rotary_dim, attention_factor, inverse)
    # Inference: the kernel directly, without the dispatcher.
    return _apply_rope_new(x, positions, inv_freq, layout, rotary_dim, attention_factor, inverse)


_SEQ_LEN_TYPES = ("dynamic", "longrope")
_DTYPE_NAMES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}


class RotaryEmbedding(nn.Module):
    """RoPE for queries and keys: rope(x, positions) rotates the first dim
    dims of each head of x (B, T, H, Dh) or (T, H, Dh), Dh >= dim (Dh > dim
    is partial rotary: the rest pass through), with tokpos.torch.apply_rope.

    inv_freq (dim/2,) and attention_factor are tokpos.rope_frequencies(dim,
    base=base, scaling=scaling): scaling a transformers rope_scaling /
    rope_parameters dict ("default", "linear", "dynamic", "yarn", "longrope",
    "llama3"); base None means scaling's "rope_theta", else 10000. inv_freq
    is a float64 non-persistent buffer (recomputed, not in state_dict; it
    stays float64 when the module is converted with .to(dtype), .half() and
    the like), and the module has no parameters.

    "dynamic" and "longrope" frequencies depend on the current sequence
    length: their forward and cos_sin need seq_len= (transformers passes
    max(position_ids) + 1) and raise ValueError without it; those calls
    compute the frequencies in Python, outside torch.compile's graph. Other
    types ignore seq_len."""

    def __init__(self, dim: int, base: Optional[float] = None, scaling: Optional[dict] = None, layout: str = "half"):
        super().__init__()
        self.dim = _check_int("dim", dim, 2)
        if layout not in _rope.ROPE_LAYOUTS:
            raise ValueError(f"tokpos.torch.RotaryEmbedding: layout = {layout!r} is not one of 'half', 'interleaved'")
        self.layout = layout
        self.scaling = None if scaling is None else dict(scaling)
        inv_freq, self.attention_factor = _rope.rope_frequencies(self.dim, base=base, scaling=self.scaling)
        self.base = base
        self.rope_type = "default" if scaling is None else _rope._scaling_type(self.scaling)
        self._inv_freq64 = inv_freq
        self._by_seq_len: dict = {}
        self.register_buffer("inv_freq", torch.from_numpy(inv_freq.copy()), persistent=False)

    def _apply(self, fn, *args, **kwargs):
        module = super()._apply(fn, *args, **kwargs)
        inv = self._buffers["inv_freq"]
        if inv.dtype != torch.float64:
            self._buffers["inv_freq"] = torch.from_numpy(self._inv_freq64.copy()).to(inv.device)
        return module

    def _frequencies(self, seq_len: Optional[int], where: str):
        """(inv_freq, attention_factor) for this call."""
        if self.rope_type not in _SEQ_LEN_TYPES:
            return self.inv_freq, self.attention_factor
        if seq_len is None:
            raise ValueError(
                f"{where}: rope type {self.rope_type!r} depends on the sequence length: pass seq_len= "
                "(the current length, e.g. max(positions) + 1)"
            )
        seq_len = _check_int("seq_len", seq_len, 0)
        hit = self._by_seq_len.get(seq_len)
        if hit is None:
            inv, factor = _rope.rope_frequencies(self.dim, base=self.base, scaling=self.scaling, seq_len=seq_len)
            hit = (torch.from_numpy(inv), factor)
            self._by_seq_len = {seq_len: hit}
        return hit

    def forward(self, x: Tensor, positions: Tensor, *, seq_len: Optional[int] = None) -> Tensor:
        """x (B, T, H, Dh) with positions (B, T), or (T, H, Dh) with (T) -> x rotated, a new tensor."""
        inv_freq, factor = self._frequencies(seq_len, "tokpos.torch.RotaryEmbedding")
        return apply_rope(x, positions, inv_freq, layout=self.layout, rotary_dim=self.dim, attention_factor=factor)

    def cos_sin(self, positions: Tensor, *, dtype=torch.float32, seq_len: Optional[int] = None):
        """(cos, sin), each positions.shape + (dim,), as transformers' rotary
        embedding returns them (tokpos.rope_cos_sin): the values forward
        uses, times attention_factor, converted to dtype."""
        name = dtype if dtype in _DTYPE_NAMES.values() else _DTYPE_NAMES.get(dtype)
        if name is None:
            raise ValueError(f"tokpos.torch.RotaryEmbedding.cos_sin: dtype {dtype} is not float32, bfloat16 or float16")
        if isinstance(positions, Tensor):
            _require_cpu("tokpos.torch.RotaryEmbedding.cos_sin", ("positions",), positions)
        inv_freq, factor = self._frequencies(seq_len, "tokpos.torch.RotaryEmbedding.cos_sin")
        return _rope.rope_cos_sin(
            positions, inv_freq, layout=self.layout, attention_factor=factor, dtype=name
        )

    def extra_repr(self) -> str:
        s = f"{self.dim}, rope_type={self.rope_type!r}, layout={self.layout!r}"
        if self.attention_factor != 1.0:
            s += f", attention_factor={self.attention_factor}"
        return s


# Vocab-parallel modules over torch.distributed (docs/scale-out.md).
from ._parallel import VocabParallelComposer, VocabParallelEmbedding  # noqa: E402
