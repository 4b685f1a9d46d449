"""The seed lesson's diagnostics on any (L, D) position table.

adjacent_cosine, cosine_by_offset and relative_position_fit take a numpy
array, a torch tensor (any device the tensor can be copied from: torch is
never imported unless a tensor is given) or a nested sequence of floats, of
any float dtype: float16, bfloat16 (torch), float32 or float64. The values are
rounded to float32 first, as the C++ functions (tokpos/diagnostics.h) take
float32 tables; every sum is then done in double, and the results are
float64. A float64 table is therefore measured as its float32 rounding (for
tables of values near 1 that moves a cosine by about 1e-7).
"""

from __future__ import annotations

import numbers
import operator

import numpy as np

from . import _core
from ._arrays import is_torch as _is_torch

__all__ = ["RelativeFit", "adjacent_cosine", "cosine_by_offset", "relative_position_fit"]

RelativeFit = _core.RelativeFit

_FLOATS = "float16, bfloat16 (torch), float32 or float64"


def _table(table, where: str) -> np.ndarray:
    """table as a C-contiguous float32 (L, D) numpy array, or TypeError (not
    a float table) / ValueError (not 2-D, or empty) naming it."""
    if _is_torch(table):
        if table.device.type == "meta":
            raise ValueError(f"{where}: table is on meta, which holds no values to measure")
        if not table.is_floating_point():
            raise TypeError(f"{where}: table has dtype {table.dtype}; expected a float dtype, {_FLOATS}")
        import torch  # a tensor was given, so torch is already imported

        array = table.detach().to(device="cpu", dtype=torch.float32).contiguous().numpy()
    else:
        try:
            array = np.asarray(table)
        except (TypeError, ValueError) as e:
            raise TypeError(f"{where}: table must be a numpy array or a torch tensor of floats ({e})") from None
        if array.dtype.kind != "f":
            raise TypeError(f"{where}: table has dtype {array.dtype}; expected a float dtype, {_FLOATS}")
    if array.ndim != 2:
        raise ValueError(
            f"{where}: table has {array.ndim} dimensions, shape {tuple(array.shape)}; expected 2, (L, D)"
        )
    if array.shape[0] < 1 or array.shape[1] < 1:
        raise ValueError(f"{where}: table has shape (L, D) = {tuple(array.shape)}; L and D must be >= 1")
    return np.ascontiguousarray(array, dtype=np.float32)


def _offset(name: str, value, low: int, high: int, where: str) -> int:
    """An integer in [low, high], or TypeError / ValueError naming it and the limits."""
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{where}: {name} = {value!r} is a bool, not an integer")
    try:
        value = operator.index(value)
    except TypeError:
        raise TypeError(f"{where}: {name} = {value!r} is not an integer") from None
    if not low <= value <= high:
        raise ValueError(f"{where}: {name} = {value} is outside [{low}, {high}] (the table has L = {high + 1} rows)")
    return value


def adjacent_cosine(table) -> np.ndarray:
    """cos(row p, row p + 1) for p = 0 .. L - 2: L - 1 float64 values (none for L = 1)."""
    return np.asarray(_core.adjacent_cosine(_table(table, "adjacent_cosine")), dtype=np.float64)


def cosine_by_offset(table, offsets) -> np.ndarray:
    """The mean over p of cos(row p, row p + k), as float64.

    offsets an int K: the values for k = 0 .. K (K + 1 of them, k = 0 giving
    1 for rows that are not zero); a sequence of ints: the value at each k
    given, in that order (repeats allowed). Every k must be in [0, L - 1].
    """
    where = "cosine_by_offset"
    t = _table(table, where)
    top = t.shape[0] - 1
    if isinstance(offsets, np.ndarray) and offsets.ndim == 0:
        offsets = offsets.item()
    if isinstance(offsets, (numbers.Integral, np.integer)) and not isinstance(offsets, (bool, np.bool_)):
        k = _offset("offsets", offsets, 0, top, where)
        return np.asarray(_core.cosine_by_offset(t, k), dtype=np.float64)
    if isinstance(offsets, (str, bytes)) or not hasattr(offsets, "__iter__"):
        raise TypeError(f"{where}: offsets = {offsets!r} is neither an int nor a sequence of ints")
    items = offsets.tolist() if isinstance(offsets, np.ndarray) else list(offsets)
    ks = [_offset(f"offsets[{i}]", k, 0, top, where) for i, k in enumerate(items)]
    if not ks:
        return np.zeros(0, dtype=np.float64)
    values = np.asarray(_core.cosine_by_offset(t, max(ks)), dtype=np.float64)
    return values[ks]


def relative_position_fit(table, k: int, *, layout: str = "interleaved") -> RelativeFit:
    """How well PE(p + k) = R_k PE(p) holds, R_k one least-squares 2x2 rotation
    per sin/cos column pair of `layout` (tokpos.LAYOUTS; the interleaved pairs
    for a learned table), fitted over p in [0, L - k). Returns a RelativeFit:
    offset (k), pairs (column pairs fitted), max_residual (the largest
    |PE(p+k) - R_k PE(p)| of any entry) and relative (max_residual over the
    largest |entry| of the fitted columns). k must be in [0, L - 1]."""
    where = "relative_position_fit"
    t = _table(table, where)
    k = _offset("k", k, 0, t.shape[0] - 1, where)
    if not isinstance(layout, str):
        raise TypeError(f"{where}: layout = {layout!r} is not a string; one of {', '.join(_core.layout_names())}")
    try:
        layout = _core.parse_param("layout", layout)  # the core's rule, the one sinusoidal_table uses
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from None
    return _core.relative_position_fit(t, k, layout)
