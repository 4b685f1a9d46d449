"""GGUF files, llama.cpp's model format: tokpos.GgufFile maps a file and
validates all of it first (the C++ reader, tokpos/gguf.h: counts, strings,
value types, alignment, every tensor's dims, type, blocks and data range,
unique names and keys; a bad file is an OSError naming the file, the byte
offset, the field, the value and its limit). Keys, string values and tensor
names are str: the file's bytes decoded as UTF-8, each byte that is not
UTF-8 written \\xNN (errors="backslashreplace"), the same text as the C++
reader's gguf_text and `tokpos inspect --json`. Tensor data is a read-only
uint8 view of the mapping (an f32, f16 or bf16 tensor that the file's
general.alignment leaves unaligned for its elements is copied to aligned
memory), and a tensor goes straight to tokpos.compose as its token table:

    f = tokpos.GgufFile("model.gguf")
    out = tokpos.compose(ids, f.tensor("token_embd.weight"))   # (B, T, D) float32
"""

from __future__ import annotations

import os

import numpy as np

from . import _core
from .quant import _TYPES  # ggml's type table, from the core

__all__ = ["GgufFile", "GgufTensor"]


class GgufTensor:
    """One tensor of a GGUF file. name; ggml_type (ggml's value) and type
    (its name: "f32", "q8_0", "q6_K", ...); dims as the file stores them
    (ne[0], the row length, first); shape in numpy's order (rows first: a
    token table is (V, D)); nbytes; offset (where its data starts in the
    file); data, its bytes as a read-only (rows, row_bytes) uint8 array over
    the mapping (it keeps the mapping alive; an aligned copy for f32, f16 or
    bf16 data the file's alignment leaves unaligned). tokpos.compose takes it as a
    token table (the types a QuantizedTable takes)."""

    __slots__ = ("name", "ggml_type", "type", "dims", "shape", "nbytes", "offset", "data")

    def __init__(self, name, ggml_type, type_name, dims, offset, nbytes, data):
        self.name = name
        self.ggml_type = ggml_type
        self.type = type_name
        self.dims = tuple(dims)
        self.shape = tuple(reversed(self.dims))
        self.nbytes = nbytes
        self.offset = offset
        self.data = data

    def numpy(self) -> np.ndarray:
        """The values as float32, of shape `shape`: an f32 tensor is viewed in
        place (read-only); any other type a token table may have is
        dequantized as ggml's dequantize_row_<type> does (the lookup
        tokpos.compose does, of every row, bit for bit)."""
        if self.type == "f32":
            return self.data.view(np.float32).reshape(self.shape)
        rows, dim = self.data.shape[0], self.dims[0]
        out = np.empty((rows, dim), np.float32)
        _core.compose_ggml(out, np.arange(rows, dtype=np.int64), self.data, self.ggml_type, dim, None, None, 0,
                           "tokpos.GgufTensor.numpy")
        return out.reshape(self.shape)

    def __repr__(self) -> str:
        return f"GgufTensor({self.name!r}, type={self.type!r}, shape={self.shape}, nbytes={self.nbytes})"


class GgufFile:
    """A GGUF v2 or v3 file, mapped and validated whole on opening (OSError
    for a bad or unreadable file, naming it). Attributes: path, version,
    alignment, metadata (key -> value in the file's order: int, float, bool,
    str, or a list of them, nested for arrays of arrays), metadata_types (key
    -> GGUF type name, "ARRAY[STRING]" for an array), tensors (name ->
    GgufTensor, in the file's order). Keys, strings and names that are not
    UTF-8 come with those bytes as \\xNN (backslashreplace). tensor(name)
    is one tensor; a name the file lacks is a ValueError listing some it
    has. The file must not be truncated while mapped (the OS then kills the
    process with SIGBUS)."""

    def __init__(self, path):
        self._file = _core.GgufFile.open(os.fspath(path))
        self.path = os.fspath(path)
        self.version = self._file.version
        self.alignment = self._file.alignment
        self.metadata = {}
        self.metadata_types = {}
        for key, type_, value in self._file.metadata():
            self.metadata[key] = value
            self.metadata_types[key] = type_
        self.tensors = {}
        for i, (name, ggml_type, dims, offset, nbytes) in enumerate(self._file.tensors()):
            self.tensors[name] = GgufTensor(
                name, ggml_type, _TYPES.get(ggml_type, ("?",))[0], dims, offset, nbytes,
                self._file.tensor_data_at(i),
            )

    def tensor(self, name: str) -> GgufTensor:
        t = self.tensors.get(name)
        if t is None:
            self._file.tensor_data(name)  # the reader's message: the missing name and some present
        return t

    def __repr__(self) -> str:
        return f"GgufFile({self.path!r}, version={self.version}, {len(self.tensors)} tensors, {len(self.metadata)} keys)"
