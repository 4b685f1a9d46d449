"""Position ids and ALiBi (docs/positions.md).

Every function takes numpy arrays or torch CPU tensors and returns the same
framework's arrays; the C++ core (tokpos/positions.h) checks every value
before it writes, and bad input raises ValueError naming the value, where it
is and its limit.
"""

from __future__ import annotations

import numbers

import numpy as np

from . import _core
from ._arrays import INT64_MAX as _INT64_MAX
from ._arrays import count as _count
from ._arrays import dtype_name as _dtype_name
from ._arrays import framework as _framework
from ._arrays import index_sequence as _index_sequence
from ._arrays import is_torch as _is_torch
from ._arrays import real as _real
from ._arrays import require_cpu as _require_cpu

__all__ = [
    "position_ids_from_mask",
    "roberta_position_ids",
    "packed_position_ids",
    "cu_seqlens_from_position_ids",
    "alibi_slopes",
    "alibi_bias",
]





def _check_int64_max(x, name: str, unsigned: bool) -> None:
    """An unsigned 64-bit array x (numpy or torch) holds nothing above int64's
    maximum, or ValueError naming it: it becomes int64, which would wrap."""
    if unsigned and 0 not in tuple(x.shape) and int(x.max()) > _INT64_MAX:
        raise ValueError(f"{name} holds {int(x.max())}, above the int64 maximum {_INT64_MAX}")


def _index_array(x, name: str, allow_bool: bool = False):
    """x as an int32 or int64 array the core reads: numpy arrays and torch
    tensors of those dtypes pass through; other integer arrays (and bool
    ones where allow_bool: an attention mask) become new int64 arrays;
    Python sequences go through _arrays.index_sequence (a float or bool in
    them is a ValueError, never rounded). Float arrays are refused."""
    expected = "integers (int32 or int64) or bool" if allow_bool else "integers (int32 or int64)"
    if _is_torch(x):
        import torch

        x = _require_cpu(x, name).detach()
        if x.dtype in (torch.int32, torch.int64):
            return x
        if (x.dtype == torch.bool and allow_bool) or not (
            x.dtype == torch.bool or x.is_floating_point() or x.is_complex()
        ):
            _check_int64_max(x, name, x.dtype == torch.uint64)
            return x.to(torch.int64)
        raise ValueError(f"{name} has dtype {_dtype_name(x)}; expected {expected}")
    if isinstance(x, (list, tuple, numbers.Number)):
        return _index_sequence(x, name, allow_bool=allow_bool)
    if not isinstance(x, np.ndarray):
        if hasattr(x, "__array_interface__") or hasattr(x, "__array__"):
            x = np.asarray(x)
        else:
            raise ValueError(f"{name} must be a numpy array or a torch CPU tensor, got {type(x).__name__}")
    if x.dtype in (np.int32, np.int64):
        return x
    if (x.dtype == np.bool_ and allow_bool) or np.issubdtype(x.dtype, np.integer):
        _check_int64_max(x, name, x.dtype == np.uint64)
        return x.astype(np.int64)
    raise ValueError(f"{name} has dtype {x.dtype}; expected {expected}")


def _empty(shape, dtype: str, framework: str):
    if framework == "torch":
        import torch

        return torch.empty(shape, dtype=getattr(torch, dtype))
    return np.empty(shape, dtype=np.dtype(dtype))


# The value transformers puts at pads (mask 0) when it makes position ids
# for generation; see position_ids_from_mask.
TRANSFORMERS_PAD_POSITION = 0


def position_ids_from_mask(attention_mask, num_new_tokens=None, pad_value=TRANSFORMERS_PAD_POSITION):
    """transformers' generation rule (GPT-2, Llama, ...): attention_mask
    (B, S) covers the cached tokens and the new ones; along each row the
    position is cumsum(mask) - 1, and pad_value where mask is 0 (a pad).
    Returns the last num_new_tokens columns (all S when None) as int64 (B, T).

    pad_value defaults to 0, what transformers 5.x puts at pads:
    GenerationMixin._prepare_position_ids_for_generation does
    ``attention_mask.long().cumsum(-1) - 1`` then
    ``masked_fill(attention_mask == 0, 0)`` (transformers/generation/utils.py,
    5.24). transformers 4.x's prepare_inputs_for_generation (GPT-2, Llama, ...)
    did ``masked_fill_(attention_mask == 0, 1)``: pass pad_value=1 for that
    (and for tokpos releases before this argument). Real tokens get the same
    positions either way; only the pads' rows differ."""
    pad_value = _count("pad_value", pad_value)
    mask = _index_array(attention_mask, "attention_mask", allow_bool=True)
    if len(mask.shape) != 2:
        raise ValueError(f"attention_mask must be 2-D (B, S), got shape {tuple(mask.shape)}")
    batch, width = (int(d) for d in mask.shape)
    new = width if num_new_tokens is None else _count("num_new_tokens", num_new_tokens, 0)
    if new > width:
        raise ValueError(f"num_new_tokens = {new} must be <= S = {width} (the mask's columns)")
    out = _empty((batch, new), "int64", _framework(mask))
    _core.position_ids_from_mask(out, mask, pad_value)
    return out


def roberta_position_ids(input_ids, padding_idx, past_length=0):
    """RoBERTa / XLM-R: (cumsum(ids != padding_idx) + past_length) *
    (ids != padding_idx) + padding_idx along each row of input_ids (B, S) or
    (S); int64, the shape of input_ids."""
    ids = _index_array(input_ids, "input_ids")
    padding_idx = _count("padding_idx", padding_idx, 0)
    past_length = _count("past_length", past_length, 0)
    out = _empty(tuple(ids.shape), "int64", _framework(ids))
    _core.roberta_position_ids(out, ids, padding_idx, past_length)
    return out


def packed_position_ids(cu_seqlens, start=0):
    """Positions of packed documents (flash-attn varlen): document d holds
    tokens [cu_seqlens[d], cu_seqlens[d + 1]) and its positions run start,
    start + 1, ... cu_seqlens (int32 or int64) starts at 0, never decreases
    and ends at N; returns int64 (N,)."""
    cu = _index_array(cu_seqlens, "cu_seqlens")
    start = _count("start", start, 0)
    n = int(cu[-1]) if len(cu.shape) == 1 and cu.shape[0] > 0 else 0
    out = _empty((max(n, 0),), "int64", _framework(cu))
    _core.packed_position_ids(out, cu, start)
    return out


def cu_seqlens_from_position_ids(position_ids):
    """The inverse of packed_position_ids: a document starts at index 0 and
    wherever position_ids[i] != position_ids[i - 1] + 1 (position_ids (N), or
    (B, S) read row-major). Returns int32 (documents + 1,): 0, each later
    document's start, N (flash-attn's cu_seqlens; [0] when N == 0)."""
    pos = _index_array(position_ids, "position_ids")
    count = _core.packed_document_count(pos)
    out = _empty((count + 1,), "int32", _framework(pos))
    _core.cu_seqlens_from_position_ids(out, pos)
    return out


def alibi_slopes(num_heads, max_bias=8.0):
    """ALiBi's head slopes as float64 (H,): the paper's get_slopes (its
    closest-power-of-two interleave for other head counts), with 8
    generalised to max_bias as MPT's gen_slopes and ggml do."""
    num_heads = _count("num_heads", num_heads, 1)
    return np.asarray(_core.alibi_slopes(num_heads, _real("max_bias", max_bias)), dtype=np.float64)


_MODES = {"causal": 0, "symmetric": 1}
_DTYPES = ("float32", "float16", "bfloat16")


def _slopes(slopes):
    if _is_torch(slopes):
        s = _require_cpu(slopes, "slopes").detach().double().numpy()
    else:
        s = np.asarray(slopes, dtype=np.float64)
    if s.ndim != 1:
        raise ValueError(f"slopes must be 1-D (H,), got shape {s.shape}")
    return np.ascontiguousarray(s)


def alibi_bias(slopes, q_positions, k_positions, *, mode="causal", dtype="float32", out=None):
    """The ALiBi bias (H, Tq, Tk) between query positions q_positions (Tq)
    and key positions k_positions (Tk) under slopes (H). mode "causal":
    slope * (k - q) where k <= q, -inf where k > q; "symmetric":
    -slope * |q - k|. Computed in double and rounded once to dtype (float32,
    float16 or bfloat16; bfloat16 needs torch). Positions must be >= 0.
    out (optional) is written in place and returned; otherwise the result is
    a new array in the inputs' framework (torch if any is a tensor)."""
    if mode not in _MODES:
        raise ValueError(f"mode = {mode!r} is not one of 'causal', 'symmetric'")
    s = _slopes(slopes)
    q = _index_array(q_positions, "q_positions")
    k = _index_array(k_positions, "k_positions")
    if out is None:
        if dtype not in _DTYPES:
            raise ValueError(f"dtype = {dtype!r} is not one of 'float32', 'float16', 'bfloat16'")
        framework = _framework(slopes, q, k)
        if dtype == "bfloat16" and framework != "torch":
            raise ValueError("dtype = 'bfloat16' needs torch tensors (numpy has no bfloat16); pass torch positions")
        out = _empty((s.shape[0], int(q.shape[0]) if len(q.shape) == 1 else 0,
                      int(k.shape[0]) if len(k.shape) == 1 else 0), dtype, framework)
    elif isinstance(out, np.ndarray) and not out.flags.writeable:
        raise ValueError("out is read-only; tokpos writes its result there in place")
    target = _require_cpu(out, "out").detach() if _is_torch(out) else out  # shares out's memory
    _core.alibi_bias(target, s, q, k, _MODES[mode])
    return out
