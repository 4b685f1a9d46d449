#!/usr/bin/env python3
"""Writes the GGUF test files of tests/data/gguf with llama.cpp's own writer.

The files are written by the PyPI package `gguf` (gguf-py, llama.cpp's
Python reader and writer), and what tests/gguf_test.cc checks them against is
read back by that package's GGUFReader into expected.json: each tensor's
name, ggml type, dims (ne[0] first), offset, byte count and an FNV-1a 64
hash of its bytes, and each key's type and value. Nothing here uses tokpos.

  gpt2_tiny.gguf       general.architecture "gpt2", token_embd.weight (16 x 8)
                       and position_embd.weight (12 x 8) in f32, and a value of
                       every GGUF type: scalars, strings, arrays of strings, of
                       ints, of floats, of bools, and an array of arrays.
  token_embd_TYPE.gguf token_embd.weight (4 x 256) in TYPE, for f16, bf16, q8_0,
                       q4_0, q4_1, q5_0, q5_1 (quantized by gguf-py from
                       random floats) and q2_K, q3_K, q4_K, q5_K, q6_K, q8_K
                       (random block bytes with valid scales, declared with
                       raw_dtype: gguf-py cannot quantize these). alignment 64
                       in the q8_0 file, to cover general.alignment.
  dequant/TYPE.npy     gguf.quants.dequantize of each token_embd.weight, as
                       float32 (4 x 256), where gguf-py defines it (not q8_K).

Run: python tools/make_gguf_data.py [OUT_DIR] (default tests/data/gguf).
"""
import importlib.metadata
import json
import os
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q
from gguf import GGUFValueType as VT

V, D, L = 16, 8, 12
ROWS, COLS = 4, 256


def fnv1a64(data: bytes) -> str:
    h = 0xCBF29CE484222325
    for b in data:
        h ^= b
        h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def random_blocks(rng, qtype, rows, cols):
    """Random block bytes for qtype with each scale a valid, small fp16 (f32 for q8_K)."""
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    n = rows * cols // block
    b = rng.integers(0, 256, size=(n, size), dtype=np.uint8)

    def half_at(off):
        d = rng.uniform(0.001, 0.05, size=n).astype(np.float16)
        b[:, off:off + 2] = d.view(np.uint8).reshape(n, 2)

    if qtype == Q.Q2_K:  # scales[16]; qs[64]; half d, dmin
        half_at(80), half_at(82)
    elif qtype == Q.Q3_K:  # hmask[32]; qs[64]; scales[12]; half d
        half_at(108)
    elif qtype in (Q.Q4_K, Q.Q5_K):  # half d, dmin; ...
        half_at(0), half_at(2)
    elif qtype == Q.Q6_K:  # ql[128]; qh[64]; int8 scales[16]; half d
        half_at(208)
    elif qtype == Q.Q8_K:  # float d; int8 qs[256]; int16 bsums[16] (the sums of 16 qs each)
        d = rng.uniform(0.001, 0.05, size=n).astype(np.float32)
        b[:, 0:4] = d.view(np.uint8).reshape(n, 4)
        qs = b[:, 4:260].view(np.int8).astype(np.int16)
        b[:, 260:292] = qs.reshape(n, 16, 16).sum(axis=2).astype(np.int16).view(np.uint8).reshape(n, 32)
    else:
        raise ValueError(qtype)
    return b.reshape(rows, cols // block * size)


def value_json(field):
    """A GGUFReader field as {type, element_type, types, value}. `types` is the
    reader's list (ARRAY, then the element type, down every nesting level);
    the reader flattens an array of arrays into one list of its leaves."""
    types = [VT(t).name for t in field.types]
    return {"type": types[0], "element_type": types[1] if len(types) > 1 else None, "types": types,
            "value": field.contents()}


def read_back(path):
    r = gguf.GGUFReader(path)
    out = {"data_offset": int(r.data_offset), "alignment": int(r.alignment), "metadata": [], "tensors": []}
    for name, field in r.fields.items():
        if name.startswith("GGUF."):
            continue  # the reader's own entries for the header
        out["metadata"].append({"key": name, **value_json(field)})
    for t in r.tensors:
        raw = bytes(np.asarray(t.data).view(np.uint8).reshape(-1))
        out["tensors"].append({
            "name": t.name, "ggml_type": int(t.tensor_type), "type_name": t.tensor_type.name,
            "dims": [int(x) for x in t.shape],  # ne[0] first, as in the file
            "offset": int(t.data_offset - r.data_offset), "nbytes": int(t.n_bytes),
            "fnv1a64": fnv1a64(raw), "first_bytes": raw[:8].hex()})
    return out


def write_gpt2(path, rng):
    w = gguf.GGUFWriter(path, "gpt2")
    w.add_name("tiny")
    w.add_context_length(L)
    w.add_embedding_length(D)
    w.add_uint8("test.uint8", 200)
    w.add_int8("test.int8", -100)
    w.add_uint16("test.uint16", 60000)
    w.add_int16("test.int16", -30000)
    w.add_uint32("test.uint32", 4000000000)
    w.add_int32("test.int32", -2000000000)
    w.add_float32("test.float32", 0.15625)
    w.add_bool("test.bool", True)
    w.add_string("test.string", "grüße, GGUF")
    w.add_uint64("test.uint64", 18000000000000000000)
    w.add_int64("test.int64", -9000000000000000000)
    w.add_float64("test.float64", -2.5e-300)
    w.add_array("tokenizer.ggml.tokens", [f"tok{i}" for i in range(V - 1)] + [""])
    w.add_key_value("tokenizer.ggml.token_type", [1] * (V - 2) + [3, 4], VT.ARRAY, sub_type=VT.INT32)
    w.add_key_value("test.array_uint64", [0, 1, 2**64 - 1], VT.ARRAY, sub_type=VT.UINT64)
    w.add_key_value("test.array_float32", [0.5, -1.25, 3.0], VT.ARRAY, sub_type=VT.FLOAT32)
    w.add_array("test.array_bool", [True, False, True])
    w.add_array("test.array_of_arrays", [[1, 2], [3], [4, 5, 6]])
    w.add_tensor("token_embd.weight", rng.standard_normal((V, D)).astype(np.float32))
    w.add_tensor("position_embd.weight", rng.standard_normal((L, D)).astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_token_table(path, qtype, rng, dequant_dir):
    w = gguf.GGUFWriter(path, "llama")
    if qtype == Q.Q8_0:
        w.add_custom_alignment(64)
    w.add_uint32("llama.embedding_length", COLS)
    floats = rng.standard_normal((ROWS, COLS)).astype(np.float32)
    if qtype == Q.F16:
        w.add_tensor("token_embd.weight", floats.astype(np.float16))
        data = floats.astype(np.float16).view(np.uint8)
    elif qtype in (Q.BF16, Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1):
        data = gguf.quants.quantize(floats, qtype)
        w.add_tensor("token_embd.weight", data, raw_dtype=qtype)
    else:
        data = random_blocks(rng, qtype, ROWS, COLS)
        w.add_tensor("token_embd.weight", data, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    if qtype != Q.Q8_K:
        values = gguf.quants.dequantize(np.ascontiguousarray(data).view(np.uint8), qtype)
        np.save(os.path.join(dequant_dir, qtype.name.lower() + ".npy"),
                values.reshape(ROWS, COLS).astype(np.float32))


TYPES = [Q.F16, Q.BF16, Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q2_K, Q.Q3_K, Q.Q4_K, Q.Q5_K, Q.Q6_K, Q.Q8_K]


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "tests", "data", "gguf")
    dequant_dir = os.path.join(out, "dequant")
    os.makedirs(dequant_dir, exist_ok=True)
    rng = np.random.default_rng(27)
    files = {}
    path = os.path.join(out, "gpt2_tiny.gguf")
    write_gpt2(path, rng)
    files["gpt2_tiny.gguf"] = read_back(path)
    for qtype in TYPES:
        name = f"token_embd_{qtype.name.lower()}.gguf"
        write_token_table(os.path.join(out, name), qtype, rng, dequant_dir)
        files[name] = read_back(os.path.join(out, name))
    with open(os.path.join(out, "expected.json"), "w") as f:
        json.dump({"writer": "gguf-py " + importlib.metadata.version("gguf"),
                   "files": files}, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
