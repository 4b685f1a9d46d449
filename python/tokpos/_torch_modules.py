"""tokpos.torch's embedding modules (private: the public names are
tokpos.torch's): TokenEmbedding, LearnedPositionalEmbedding,
SinusoidalPositionalEmbedding and EmbeddingComposer, each forward one call
of _torch_ops.compose, and the argument helpers they share with the
vocab-parallel modules."""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor, nn

from . import _core, sinusoidal_table
from ._arrays import INT64_MAX as _INT64_MAX
from ._arrays import INT64_MIN as _INT64_MIN
from ._arrays import UINT64_MAX as _UINT64_MAX
from ._arrays import count as _count
from ._arrays import real as _real
from ._torch_embedding import embedding as _embedding
from ._torch_ops import F32 as _F32
from ._torch_ops import compose as _compose
from ._torch_ops import has_data as _has_data
from ._torch_ops import transformed as _transformed

_TABLE_DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.float64)


def check_int(name: str, value, minimum: int, maximum: int = _INT64_MAX) -> int:
    """tokpos._arrays.count: an integer in [minimum, maximum] (int64 unless
    said otherwise), or ValueError naming it and the limit."""
    return _count(name, value, minimum, maximum)


def check_seed(seed) -> int:
    """A table's seed: any uint64 (the Philox key, as the C++ modules take it)."""
    return _count("seed", seed, 0, _UINT64_MAX)


def _table(module: nn.Module) -> Tensor:
    """module.weight (a parameter or a buffer) read straight from the
    module's dicts: nn.Module.__getattr__ costs more than the decode step's
    kernel. Eager only (torch.compile traces the attribute)."""
    weight = module._parameters.get("weight")
    return weight if weight is not None else module._buffers["weight"]


def table_dtype(dtype, where: str) -> torch.dtype:
    """A module's table dtype: float32 by default, or one the kernels take."""
    if dtype is None:
        return _F32
    if dtype not in _TABLE_DTYPES:
        raise ValueError(f"{where}: dtype {dtype} is not float32, bfloat16, float16 or float64")
    return dtype


def _draw_into(weight: Tensor, seed: int, stream: int, init_std: float, where: str) -> Optional[Tensor]:
    """A float32 CPU table of weight's shape from N(0, init_std^2), or None
    when weight has no values to receive (a meta or fake tensor: a module
    built under FakeTensorMode or on the meta device is its shapes alone,
    and its values come later, from load_state_dict or a reset_parameters
    after to_empty). The core checks init_std as the C++ modules do (finite
    and >= 0), before it draws."""
    if not _has_data(weight):
        return None
    t = torch.empty(tuple(weight.shape), dtype=_F32, device="cpu")
    if not _has_data(t):  # a fake mode around a real module: nothing real to draw into
        return None
    _core.init_table(t, seed, stream, init_std, 0, where)
    return t


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
    On a device tokpos has no kernels for (CUDA, MPS, meta) the lookup is
    torch.nn.functional.embedding on that device, as for tokpos.torch.Embedding;
    a CPU table with meta ids gives a meta result.

    device and dtype are torch.nn.Embedding's factory arguments: the table's
    device (device="meta", or torch.device("meta") as a context, builds the
    module from shapes alone, as deferred initialisation does; so does
    FakeTensorMode) and dtype (float32 by default, or bfloat16, float16,
    float64: drawn in float32 and rounded once).
    """

    __module__ = "tokpos.torch"  # pickles and reprs name the public module

    def __init__(
        self,
        vocab_size: int,
        dim: int,
        *,
        padding_idx: Optional[int] = None,
        seed: int = 0,
        init_std: float = 0.02,
        sparse: bool = False,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        vocab_size = check_int("vocab_size", vocab_size, 1)
        dim = check_int("dim", dim, 1)
        self.seed = check_seed(seed)
        self.init_std = _real("init_std", init_std)
        self._setup(vocab_size, dim, padding_idx, sparse)
        dtype = table_dtype(dtype, "tokpos.torch.TokenEmbedding")
        self.weight = nn.Parameter(torch.empty((vocab_size, dim), dtype=dtype, device=device))
        self.reset_parameters()

    def _setup(self, vocab_size: int, dim: int, padding_idx: Optional[int], sparse: bool) -> None:
        self.vocab_size = vocab_size
        self.dim = dim
        if padding_idx is not None:
            padding_idx = check_int("padding_idx", padding_idx, _INT64_MIN)
            if not -vocab_size <= padding_idx < vocab_size:
                raise ValueError(f"padding_idx {padding_idx} is outside [-{vocab_size}, {vocab_size})")
            if padding_idx < 0:
                padding_idx += vocab_size
        self.padding_idx = padding_idx
        self.sparse = bool(sparse)

    def reset_parameters(self) -> None:
        """Redraws weight from (seed, TOKEN_TABLE_STREAM) and zeroes the
        padding row; a meta or fake weight (shapes alone) is left as it is."""
        with torch.no_grad():
            table = _draw_into(
                self.weight, self.seed, _core.TOKEN_TABLE_STREAM, self.init_std, "tokpos.torch.TokenEmbedding"
            )
            if table is None:
                return
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
        compiling = torch.compiler.is_compiling()
        weight = self.weight if compiling else _table(self)
        # forward-mode AD and torch.func (checked eagerly: Dynamo does not
        # trace the check): Embedding's lookup, the same kernels; another
        # device (CUDA, MPS, meta): torch.nn.functional.embedding there (a CPU
        # table with meta ids: the meta result of a meta table).
        if weight.device.type != "cpu" or ids.device.type != "cpu" or (not compiling and _transformed(weight, ids)):
            return _embedding(ids, weight, self.padding_idx, sparse=self.sparse)
        return _compose(ids, weight, None, None, 0, pad, self.sparse, "tokpos.torch.TokenEmbedding")

    def extra_repr(self) -> str:
        s = f"{self.vocab_size}, {self.dim}"
        if self.padding_idx is not None:
            s += f", padding_idx={self.padding_idx}"
        if self.sparse:
            s += ", sparse=True"
        return s


class PositionalEmbedding(nn.Module):
    """Shared forward of the position tables (weight is the (L, D) table:
    a parameter or a buffer)."""

    max_context_length: int
    dim: int
    weight: Tensor

    def forward(self, positions, *, start: int = 0) -> Tensor:
        """positions an int T: rows start .. start+T-1, (T, D). positions a
        (B, T) (or (N)) integer tensor: table[positions], (B, T, D). A
        position at or past max_context_length raises IndexError (the
        kernel's, naming the position, its (b, t) and the limit)."""
        where = f"tokpos.torch.{type(self).__name__}"
        weight = self.weight if torch.compiler.is_compiling() else _table(self)
        # The table is the kernel's position table, so its range check and
        # its words are the positions' own. The token side is one row of
        # -0.0, the exact identity of float addition: out is the table's rows
        # bit for bit (and its gradient the table's alone). Both are made on
        # the table's device (a meta table gives a meta result), so a
        # torch.device context around a CPU module does not move them.
        zero_row = torch.full((1, weight.shape[-1]), -0.0, dtype=weight.dtype, device=weight.device)
        if not isinstance(positions, Tensor):
            T = check_int("seq_len", positions, 0)
            start = check_int("start", start, 0)
            ids = torch.zeros(T, dtype=torch.int64, device=weight.device)
            return _compose(ids, zero_row, weight, None, start, -1, False, where)
        ids = torch.zeros(positions.shape, dtype=torch.int64, device=weight.device)
        return _compose(ids, zero_row, weight, positions, 0, -1, False, where)

    def extra_repr(self) -> str:
        return f"{self.max_context_length}, {self.dim}"


class LearnedPositionalEmbedding(PositionalEmbedding):
    """A trained (max_context_length, D) position table (GPT-2's wpe).

    weight is drawn from N(0, init_std^2) by tokpos's documented Philox
    generator (stream POSITION_TABLE_STREAM): the same seed gives the same
    table as the C++ tokpos::LearnedPositionalEmbedding. device and dtype
    as TokenEmbedding's (device="meta" builds it from shapes alone)."""

    __module__ = "tokpos.torch"  # pickles and reprs name the public module

    def __init__(
        self, max_context_length: int, dim: int, *, seed: int = 0, init_std: float = 0.02, device=None, dtype=None
    ) -> None:
        super().__init__()
        self.max_context_length = check_int("max_context_length", max_context_length, 1)
        self.dim = check_int("dim", dim, 1)
        self.seed = check_seed(seed)
        self.init_std = _real("init_std", init_std)
        dtype = table_dtype(dtype, "tokpos.torch.LearnedPositionalEmbedding")
        self.weight = nn.Parameter(torch.empty((self.max_context_length, self.dim), dtype=dtype, device=device))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Redraws weight from (seed, POSITION_TABLE_STREAM); a meta or fake
        weight (shapes alone) is left as it is."""
        with torch.no_grad():
            table = _draw_into(
                self.weight, self.seed, _core.POSITION_TABLE_STREAM, self.init_std,
                "tokpos.torch.LearnedPositionalEmbedding",
            )
            if table is not None:
                self.weight.copy_(table)


class SinusoidalPositionalEmbedding(PositionalEmbedding):
    """The fixed sinusoidal table (max_context_length, D): for "interleaved"
    (the lesson's), entry (p, i) is sin(angle) for even i and cos(angle) for
    odd i, angle = p / base^(2*(i//2)/D), each the exact value rounded to
    float32 (tokpos.sinusoidal_table; other layouts as documented there).

    The table is a non-persistent buffer (recomputed, not saved in
    state_dict): the module has no parameters and gets no gradient. Built
    on the meta device (device="meta", torch.device("meta") as a context)
    or under FakeTensorMode the buffer is its shape alone; moved from there
    to a real device (to_empty, to) the table is computed there."""

    __module__ = "tokpos.torch"  # pickles and reprs name the public module

    def __init__(
        self, max_context_length: int, dim: int, *, base: float = 10000.0, layout: str = "interleaved", device=None
    ) -> None:
        super().__init__()
        self.max_context_length = check_int("max_context_length", max_context_length, 1)
        self.dim = check_int("dim", dim, 1)
        self.base = float(base)
        self.layout = layout
        shell = torch.empty((self.max_context_length, self.dim), dtype=_F32, device=device)
        self.register_buffer("weight", self._table_like(shell) if _has_data(shell) else shell, persistent=False)

    def _table_like(self, like: Tensor) -> Tensor:
        """The table, computed on the CPU, on like's device and in like's dtype."""
        table = sinusoidal_table(
            self.max_context_length, self.dim, base=self.base, layout=self.layout, framework="torch"
        )
        return table.to(device=like.device, dtype=like.dtype)

    def _apply(self, fn, *args, **kwargs):
        before = self._buffers.get("weight")
        module = super()._apply(fn, *args, **kwargs)
        after = self._buffers.get("weight")
        if before is not None and after is not None and not _has_data(before) and _has_data(after):
            self._buffers["weight"] = self._table_like(after)  # from shapes alone to a real device: the values
        return module

    def extra_repr(self) -> str:
        return f"{self.max_context_length}, {self.dim}, base={self.base}, layout={self.layout!r}"


def check_composer_parts(token, token_class: type, token_name: str, positional) -> None:
    """A composer's two modules, checked when it is built (before any
    forward reaches the kernel): of the right classes, with one D."""
    if not isinstance(token, token_class):
        raise ValueError(f"{token_name} must be a tokpos.torch.{token_class.__name__}")
    if not isinstance(positional, PositionalEmbedding):
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

    __module__ = "tokpos.torch"  # pickles and reprs name the public module

    def __init__(self, token_embedding: TokenEmbedding, positional_embedding: PositionalEmbedding) -> None:
        super().__init__()
        check_composer_parts(token_embedding, TokenEmbedding, "token_embedding", positional_embedding)
        self.token = token_embedding
        self.position = positional_embedding

    def forward(self, ids: Tensor, *, position_ids: Optional[Tensor] = None, start: int = 0) -> Tensor:
        """ids (B, T) (or (N)) -> (B, T, D) (or (N, D))."""
        where = "tokpos.torch.EmbeddingComposer"
        if torch.compiler.is_compiling():
            tok, pos = self.token, self.position
            tok_w, pos_w = tok.weight, pos.weight
        else:
            modules = self._modules
            tok, pos = modules["token"], modules["position"]
            tok_w, pos_w = _table(tok), _table(pos)
        pad = -1 if tok.padding_idx is None else tok.padding_idx
        if type(start) is not int or not _INT64_MIN <= start <= _INT64_MAX:
            start = check_int("start", start, _INT64_MIN)  # an int64 for the kernel, which checks its range
        return _compose(ids, tok_w, pos_w, position_ids, start, pad, tok.sparse, where)
