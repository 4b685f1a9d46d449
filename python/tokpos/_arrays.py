"""Helpers the tokpos modules share for the arrays and arguments they take
(kept apart from tokpos/__init__ so the topic modules it imports can use them)."""

from __future__ import annotations

import numbers
import operator

import numpy as np

INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1
UINT64_MAX = (1 << 64) - 1
INT32_MIN = -(1 << 31)
INT32_MAX = (1 << 31) - 1

_LIMITS = {
    INT64_MIN: "the int64 minimum, -2**63",
    INT64_MAX: "the int64 maximum, 2**63 - 1",
    UINT64_MAX: "the uint64 maximum, 2**64 - 1",
    INT32_MIN: "the int32 minimum, -2**31",
    INT32_MAX: "the int32 maximum, 2**31 - 1",
}


def is_torch(x) -> bool:
    """x is a torch tensor (checked without importing torch)."""
    return type(x).__module__.startswith("torch") and hasattr(x, "data_ptr")


def framework(*arrays) -> str:
    """"torch" if any argument is a torch tensor, else "numpy": results come
    back in the caller's framework."""
    return "torch" if any(is_torch(a) for a in arrays if a is not None) else "numpy"


def require_cpu(x, name: str, where: str = "tokpos"):
    """x, a torch tensor, unless it is on another device than the CPU (meta,
    cuda, ...): then ValueError naming it and its device. tokpos's kernels
    read and write host memory only, and a meta tensor has none to read
    (DLPack cannot even describe it)."""
    if x.device.type != "cpu":
        raise ValueError(
            f"{where}: {name} is on {x.device}, but tokpos computes on the CPU only; move it there first ({name}.cpu())"
        )
    return x


def _limit(bound: int) -> str:
    name = _LIMITS.get(bound)
    return f" ({name})" if name else ""


def count(name: str, value, minimum: int = INT64_MIN, maximum: int = INT64_MAX) -> int:
    """An integer argument in [minimum, maximum] as a Python int, or
    ValueError naming it and the limit it breaks. Every integer a tokpos
    function passes to the core goes through here, so a value the core's
    type cannot hold (int64 unless maximum says otherwise) is refused with
    the argument's name, never with a bare conversion error. bool is not an
    integer here; anything else with __index__ (numpy integers, a 0-d
    integer tensor) is."""
    if isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    try:
        value = operator.index(value)
    except TypeError:
        raise ValueError(f"{name} must be an integer, got {value!r}") from None
    if value < minimum:
        raise ValueError(f"{name} = {value} must be >= {minimum}{_limit(minimum)}")
    if value > maximum:
        raise ValueError(f"{name} = {value} must be <= {maximum}{_limit(maximum)}")
    return value


def real(name: str, value) -> float:
    """A real-number argument as a Python float (not a string, not a bool);
    the core checks its range."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a number, got {value!r}")
    return float(value)


def _is_int64(v) -> bool:
    return (
        not isinstance(v, (bool, np.bool_))
        and isinstance(v, numbers.Integral)
        and INT64_MIN <= int(v) <= INT64_MAX
    )


def index_sequence(x, name: str, *, allow_bool: bool = False) -> np.ndarray:
    """A Python integer or a (nested) list or tuple of them as a new int64
    array, for an argument that holds indices (ids, positions, lengths).
    Values are never rounded or wrapped: a float (1.9, and 1.0 too), bools
    (unless allow_bool: a mask), a value outside int64 or anything else
    raises ValueError naming the argument, the first such value and where it
    is, as numpy refuses float index arrays. An empty sequence is an empty
    int64 array."""
    try:
        a = np.asarray(x)
    except (ValueError, TypeError, OverflowError) as e:
        raise ValueError(f"{name} must be an integer or a rectangular sequence of integers ({e})") from None
    kind = a.dtype.kind
    if kind == "b" and allow_bool:
        return a.astype(np.int64)
    if kind == "i" or (kind == "u" and (a.size == 0 or int(a.max()) <= INT64_MAX)):
        return a.astype(np.int64, copy=False)
    if a.size == 0 and kind in "fO":
        return a.astype(np.int64)  # [] and [[]]: no values to judge
    # The first value that is not an int64, as the caller wrote it (numpy may
    # have turned [1, 2**63] into floats and [2**64] into objects).
    flat = np.asarray(x, dtype=object).reshape(-1)
    i = next((k for k, v in enumerate(flat) if not _is_int64(v) or kind == "b"), 0)
    value = flat[i]
    at = f" at {tuple(int(j) for j in np.unravel_index(i, a.shape))}" if a.ndim else ""
    if isinstance(value, (bool, np.bool_)):
        why = "a bool, not an index"
    elif isinstance(value, numbers.Integral):
        why = f"outside int64 [{INT64_MIN}, {INT64_MAX}]"
    elif isinstance(value, numbers.Real):
        why = "not an integer (index arguments take integers, never rounded: use an integer dtype)"
    else:
        why = "not an integer"
    raise ValueError(f"{name} holds {value!r}{at}: {why}")


def dtype_name(x) -> str:
    """x's dtype as numpy spells it ("float32", "bfloat16", ...)."""
    name = str(x.dtype)
    return name[len("torch."):] if name.startswith("torch.") else name


def empty(shape, dtype: str, fw: str):
    """An uninitialised array of dtype (a numpy name) in framework fw."""
    if fw == "torch":
        import torch

        return torch.empty(shape, dtype=getattr(torch, dtype))
    return np.empty(shape, dtype=np.dtype(dtype))
