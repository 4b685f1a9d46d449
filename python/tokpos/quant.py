"""Token tables in ggml's types, as llama.cpp's GGUF files hold them
(token_embd.weight in Q8_0, Q6_K, Q4_K, ...): tokpos.QuantizedTable, which
tokpos.compose reads directly, dequantizing each looked-up row as ggml's
dequantize_row_<type> does, bit for bit, and adding the position row in the
same pass (docs/gguf.md)."""

from __future__ import annotations

import operator

import numpy as np

from . import _core
from ._arrays import count as _count
from ._arrays import dtype_name as _dtype_name
from ._arrays import is_torch as _is_torch

__all__ = ["QuantizedTable"]

# ggml's type table, from the core (tokpos/ggml_type.h): value -> (name, block_size, type_size).
_TYPES = {value: (name, block, size) for value, name, block, size in _core.ggml_types()}
_BY_NAME = {name.lower(): value for value, (name, _, _) in _TYPES.items()}
# The types a token table may have (tokpos/ops.h, QuantizedTable).
TOKEN_TABLE_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1",
                     "q2_K", "q3_K", "q4_K", "q5_K", "q6_K", "q8_K")


def _type_value(ggml_type) -> int:
    """ggml's value for ggml_type: an integer (gguf's GGMLQuantizationType
    is one) or a name in any case ("q8_0", "Q8_0", "Q4_K")."""
    if isinstance(ggml_type, str):
        value = _BY_NAME.get(ggml_type.lower())
        if value is None:
            raise ValueError(
                f"tokpos.QuantizedTable: ggml_type = {ggml_type!r} is not a ggml type name; "
                f"token tables take {', '.join(TOKEN_TABLE_TYPES)}"
            )
        return value
    if isinstance(ggml_type, (bool, np.bool_)):
        raise TypeError(f"tokpos.QuantizedTable: ggml_type must be an integer or a name, got {ggml_type!r}")
    try:
        value = operator.index(ggml_type)
    except TypeError:
        raise TypeError(
            f"tokpos.QuantizedTable: ggml_type must be an integer or a name, got {type(ggml_type).__name__}"
        ) from None
    return _count("ggml_type", value, -(1 << 31), (1 << 31) - 1)


def _blocks(data, name: str = "data"):
    """data as the (V, row_bytes) uint8 array it must be, never copied."""
    if not (isinstance(data, np.ndarray) or _is_torch(data)):
        raise TypeError(
            f"tokpos.QuantizedTable: {name} must be a numpy array or a torch CPU tensor of uint8 bytes, "
            f"got {type(data).__name__}"
        )
    if _is_torch(data) and data.device.type != "cpu":
        raise ValueError(f"tokpos.QuantizedTable: {name} is on {data.device}; tokpos reads CPU memory only")
    if _dtype_name(data) != "uint8":
        raise ValueError(
            f"tokpos.QuantizedTable: {name} has dtype {_dtype_name(data)}; expected uint8, the raw ggml blocks"
        )
    if len(data.shape) != 2:
        raise ValueError(
            f"tokpos.QuantizedTable: {name} has shape {tuple(data.shape)}; expected (V, row_bytes), one row per token"
        )
    return data


class QuantizedTable:
    """A (V, D) token table in one of ggml's types: data holds the raw
    blocks, (V, row_bytes) uint8 (numpy or torch, never copied), row v the
    blocks of token v; ggml_type is ggml's value (an int, or a name such as
    "q8_0" or "Q6_K"); dim is D (None: row_bytes / the type's block bytes *
    its block size). Types: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1,
    q2_K, q3_K, q4_K, q5_K, q6_K, q8_K. The core checks the type, that D is a
    whole number of blocks and that row_bytes is D's row (ValueError naming
    the type and its block size). Attributes: data, ggml_type (int), type
    (ggml's name), shape (V, D). tokpos.compose takes it (or any object with
    ggml_type, data and shape) as its token table; there is no backward."""

    __slots__ = ("data", "ggml_type", "type", "shape")

    def __init__(self, data, ggml_type, dim=None):
        value = _type_value(ggml_type)
        data = _blocks(data)
        V, row_bytes = (int(n) for n in data.shape)
        if dim is None:
            if value not in _TYPES or _TYPES[value][0] not in TOKEN_TABLE_TYPES:
                dim = 0  # the core names the bad type below
            else:
                name, block, size = _TYPES[value]
                if row_bytes % size != 0:
                    raise ValueError(
                        f"tokpos.QuantizedTable: data has {row_bytes} bytes per row, not a whole number of "
                        f"{name} blocks of {size} bytes"
                    )
                dim = row_bytes // size * block
        else:
            dim = _count("dim", dim, 0)
        # The core's checks, on an empty batch: the type, D's blocks, the row bytes.
        _core.compose_ggml(np.empty((0, dim), np.float32), np.empty((0,), np.int64), data, value, dim,
                           None, None, 0, "tokpos.QuantizedTable")
        self.data = data
        self.ggml_type = value
        self.type = _TYPES[value][0]
        self.shape = (V, dim)

    def __repr__(self) -> str:
        return f"QuantizedTable(type={self.type!r}, shape={self.shape})"


def as_quantized(table) -> QuantizedTable:
    """table itself, or a QuantizedTable over any object with ggml_type,
    data and shape (V, D) (a GGUF file's tensor); data may also be its bytes
    flat, which are viewed as (V, row_bytes)."""
    if isinstance(table, QuantizedTable):
        return table
    shape = tuple(int(n) for n in table.shape)
    if len(shape) != 2:
        raise ValueError(f"tokpos.compose: token_table has shape {shape}; a token table is (V, D)")
    data = table.data
    if (isinstance(data, np.ndarray) or _is_torch(data)) and len(data.shape) == 1 and shape[0] > 0:
        if data.shape[0] % shape[0] != 0:
            raise ValueError(
                f"tokpos.compose: token_table.data holds {data.shape[0]} bytes, not {shape[0]} rows of equal size"
            )
        data = data.view(shape[0], -1) if _is_torch(data) else data.reshape(shape[0], -1)
    q = QuantizedTable(data, table.ggml_type, dim=shape[1])
    if q.shape != shape:
        raise ValueError(f"tokpos.compose: token_table.data has {q.shape[0]} rows but token_table.shape is {shape}")
    return q


def is_quantized(table) -> bool:
    """table is a QuantizedTable or looks like one (ggml_type, data, shape)."""
    return isinstance(table, QuantizedTable) or all(hasattr(table, a) for a in ("ggml_type", "data", "shape"))
