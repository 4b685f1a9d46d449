"""Helpers the tokpos modules share for the arrays and arguments they take
(kept apart from tokpos/__init__ so the topic modules it imports can use them)."""

from __future__ import annotations

import numbers
import operator

import numpy as np


def is_torch(x) -> bool:
    """x is a torch tensor (checked without importing torch)."""
    return type(x).__module__.startswith("torch") and hasattr(x, "data_ptr")


def framework(*arrays) -> str:
    """"torch" if any argument is a torch tensor, else "numpy": results come
    back in the caller's framework."""
    return "torch" if any(is_torch(a) for a in arrays if a is not None) else "numpy"


def count(name: str, value, minimum: int) -> int:
    """An integer argument >= minimum, or ValueError naming it and the limit."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    value = operator.index(value)
    if value < minimum:
        raise ValueError(f"{name} = {value} must be >= {minimum}")
    return value


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
