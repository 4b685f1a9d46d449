"""tokpos: token and position embeddings, the input stage of a transformer.

The functions here take numpy arrays or torch CPU tensors and never copy
them: the compiled core (tokpos._core) reads and writes the caller's memory
through DLPack or the buffer protocol, with the GIL released while a kernel
runs. Results come back in the caller's framework: numpy in, numpy out;
torch in, torch out. An array whose innermost stride is not 1 raises
ValueError naming the argument (it is never copied silently).

Errors carry the library's message, naming (b, t), the value and the limit:
an id or position out of range raises IndexError, a bad shape, dtype or
value ValueError, a file problem OSError.

tokpos.torch (imported on demand, so torch stays optional) has the lesson's
modules as torch.nn.Modules, with autograd and torch.compile support.
"""

from __future__ import annotations

import numbers

import numpy as np

from . import _core
from ._arrays import count as _count
from ._arrays import dtype_name as _dtype_name
from ._arrays import empty as _empty
from ._arrays import INT32_MAX as _INT32_MAX
from ._arrays import INT32_MIN as _INT32_MIN
from ._arrays import framework as _framework
from ._arrays import index_sequence as _index_sequence
from ._arrays import is_torch as _is_torch
from ._arrays import require_cpu as _require_cpu
from .diagnostics import *  # noqa: F401,F403  (the lesson's diagnostics on any table)
from .diagnostics import __all__ as _diagnostics_all
from .positions import *  # noqa: F401,F403  (position ids, ALiBi)
from .quant import QuantizedTable  # noqa: F401  (ggml block tables)
from .gguf import GgufFile, GgufTensor  # noqa: F401  (llama.cpp's files)
from .quant import as_quantized as _as_quantized
from .quant import is_quantized as _is_quantized
from .rope import *  # noqa: F401,F403  (RoPE)
from .positions import __all__ as _positions_all
from .rope import __all__ as _rope_all

__version__ = _core.version()

__all__ = [
    "__version__",
    "GgufFile",
    "GgufTensor",
    "QuantizedTable",
    "compose",
    "compose_backward",
    "get_num_threads",
    "pe_sinusoidal",
    "set_num_threads",
    "sinusoidal_table",
    *_diagnostics_all,
    *_positions_all,
    *_rope_all,
]

LAYOUTS = tuple(_core.layout_names())  # the core's layout_name of every layout, in order
DTYPES = ("float32", "float16", "bfloat16")
LOOKUP_DTYPES = (*DTYPES, "float64")  # compose's tables: a float64 lookup is float64 throughout
FRAMEWORKS = ("numpy", "torch")




def _choice(name: str, value, allowed) -> str:
    if value not in allowed:
        raise ValueError(f"{name} = {value!r} is not one of {', '.join(repr(a) for a in allowed)}")
    return value


def _array(x, name: str, index: bool = False):
    """x as something the core reads without a copy: numpy arrays and torch
    tensors pass through (a tensor that requires grad is detached, which
    shares its memory; the core checks the dtype); Python sequences of
    numbers become new arrays: int64 for an index argument (ids, positions;
    a float or bool in them is a ValueError, never rounded), else numpy's
    own dtype for the values."""
    if x is None or isinstance(x, np.ndarray):
        return x
    if _is_torch(x):
        _require_cpu(x, name)
        return x.detach() if x.requires_grad else x
    if isinstance(x, (list, tuple)) or isinstance(x, numbers.Number):
        return _index_sequence(x, name) if index else np.asarray(x)
    if hasattr(x, "__dlpack__") or hasattr(x, "__array_interface__"):
        return x
    raise ValueError(f"{name} must be a numpy array or a torch CPU tensor, got {type(x).__name__}")


def _writable(x, name: str):
    """A numpy array the core writes: a read-only one (a broadcast view, a
    frozen array) raises ValueError naming it, not nanobind's TypeError."""
    if isinstance(x, np.ndarray) and not x.flags.writeable:
        raise ValueError(f"{name} is read-only; tokpos writes its result there in place")
    return x


def set_num_threads(n: int) -> None:
    """n >= 1: kernels use n threads; 0 or less: every core. Results never
    depend on the count (every kernel is bitwise identical for any count)."""
    _core.set_num_threads(_count("n", n, _INT32_MIN, _INT32_MAX))


def get_num_threads() -> int:
    """The thread count the next kernel call uses (>= 1)."""
    return _core.get_num_threads()


def pe_sinusoidal(pos: int, dim: int, hidden_dim: int) -> float:
    """The C lab's pe(pos, dim, hidden_dim): sin(angle) for even dim, cos for
    odd, angle = pos / 10000^(2*(dim//2)/hidden_dim), correctly rounded to
    float32 and returned as a Python float."""
    return _core.pe_sinusoidal(_count("pos", pos), _count("dim", dim), _count("hidden_dim", hidden_dim))



def sinusoidal_table(
    max_context: int,
    dim: int,
    *,
    base: float = 10000.0,
    layout: str = "interleaved",
    start: int = 0,
    dtype: str = "float32",
    padding_idx: int | None = None,
    min_timescale: float = 1.0,
    framework: str = "numpy",
):
    """The exact sinusoidal position table (max_context, dim): row r encodes
    position start + r, every entry the exact value rounded to nearest-even in
    dtype. layout is one of "interleaved" (the lessons' sin, cos, sin, ...),
    "halves" (Marian), "fairseq", "t2t" (tensor2tensor) or "ggml";
    docs/layouts.md gives each one's formula. padding_idx (fairseq only)
    zeroes that row; min_timescale is tensor2tensor's."""
    max_context = _count("max_context", max_context, 1)
    dim = _count("dim", dim, 1)
    start = _count("start", start, 0)
    # The core's rule for layout (the CLI's --layout and tokpos serve's layout= use it too).
    layout = _core.parse_param("layout", layout if isinstance(layout, str) else repr(layout))
    _choice("dtype", dtype, DTYPES)
    _choice("framework", framework, FRAMEWORKS)
    if framework == "numpy" and dtype == "bfloat16":
        raise ValueError('numpy has no bfloat16: use framework="torch" for a bfloat16 table')
    if padding_idx is not None:
        padding_idx = _count("padding_idx", padding_idx)
    out = _empty((max_context, dim), dtype, framework)
    _core.sinusoidal_into(out, max_context, dim, float(base), layout, start, padding_idx, float(min_timescale))
    return out




def compose(ids, token_table, pos_table=None, *, position_ids=None, start: int = 0, out=None):
    """out[b, t] = token_table[ids[b, t]] + pos_table[position], summed in
    float32 and rounded once to out's dtype. position is position_ids[b, t]
    when given, else start + t. ids (B, T) gives (B, T, D); ids (N) gives
    (N, D). pos_table None: token rows only. out (optional) is written in
    place and returned; otherwise a new array of token_table's dtype, in the
    caller's framework, is returned. A float64 lookup is float64 throughout:
    float64 tables and out, summed in double; float64 beside another dtype
    raises ValueError naming both.

    token_table may be a tokpos.QuantizedTable, or any object with ggml_type,
    data and shape (a GGUF file's tensor): each row is dequantized as ggml's
    dequantize_row_<type> does, bit for bit, and the out it returns is
    float32 (out= may be float32 or bfloat16)."""
    if _is_quantized(token_table):
        return _compose_quantized(ids, _as_quantized(token_table), pos_table, position_ids, start, out)
    ids = _array(ids, "ids", index=True)
    token_table = _array(token_table, "token_table")
    pos_table = _array(pos_table, "pos_table")
    position_ids = _array(position_ids, "position_ids", index=True)
    start = _count("start", start, 0)
    if out is None:
        dim = token_table.shape[1] if len(token_table.shape) == 2 else 0
        framework = _framework(ids, token_table, pos_table, position_ids)
        dtype = _dtype_name(token_table)
        if dtype not in LOOKUP_DTYPES:
            raise ValueError(
                f"tokpos.compose: token_table has dtype {dtype}; expected float32, bfloat16, float16 or float64"
            )
        out = _empty(tuple(ids.shape) + (dim,), dtype, framework)
    else:
        out = _writable(_array(out, "out"), "out")
    _core.compose(out, ids, token_table, pos_table, position_ids, start, -1, "tokpos.compose")
    return out


def _compose_quantized(ids, table, pos_table, position_ids, start, out):
    ids = _array(ids, "ids", index=True)
    pos_table = _array(pos_table, "pos_table")
    position_ids = _array(position_ids, "position_ids", index=True)
    start = _count("start", start, 0)
    if out is None:
        out = _empty(tuple(ids.shape) + (table.shape[1],), "float32",
                     _framework(ids, table.data, pos_table, position_ids))
    else:
        out = _writable(_array(out, "out"), "out")
    _core.compose_ggml(out, ids, table.data, table.ggml_type, table.shape[1], pos_table, position_ids, start,
                       "tokpos.compose")
    return out


def compose_backward(d_out, ids, *, d_token_table=None, d_pos_table=None, position_ids=None, start: int = 0):
    """Adds the gradient of compose into d_token_table (V, D) and d_pos_table
    (L, D), in place; either may be None. Only the rows that appear change,
    and the order of the additions is fixed: the result is bitwise identical
    for any thread count. float32 gradients and d_out, or all float64 (a
    float64 lookup's, added in double)."""
    if hasattr(d_token_table, "ggml_type"):  # a QuantizedTable or a GGUF file's tensor: raw blocks
        kind = getattr(d_token_table, "type", None) or "block"
        raise ValueError(
            f"tokpos.compose_backward: d_token_table is a {kind} table (ggml_type {d_token_table.ggml_type}): "
            "the backward is defined for float tables only (a float32 or float64 (V, D) gradient), not for ggml "
            "block types; dequantize the table to float32 to train it"
        )
    d_out = _array(d_out, "d_out")
    ids = _array(ids, "ids", index=True)
    position_ids = _array(position_ids, "position_ids", index=True)
    d_token_table = _writable(_array(d_token_table, "d_token_table"), "d_token_table")
    d_pos_table = _writable(_array(d_pos_table, "d_pos_table"), "d_pos_table")
    start = _count("start", start, 0)
    _core.compose_backward(
        d_token_table, d_pos_table, d_out, ids, position_ids, start, -1, -1, "tokpos.compose_backward"
    )
