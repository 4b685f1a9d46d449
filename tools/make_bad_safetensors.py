#!/usr/bin/env python3
"""Writes the small crafted .safetensors files under tests/data/safetensors/
that tests/safetensors_test.cc feeds to the reader, one per kind of damage,
plus two good files (a tiny GPT-2 and a tiny BERT) to check the presets.
Standard library only; run once and commit the output:
    python3 tools/make_bad_safetensors.py
"""
import json
import os
import struct

OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "data", "safetensors")


def build(header, data, header_len=None):
    text = json.dumps(header, separators=(",", ":")).encode()
    n = len(text) if header_len is None else header_len
    return struct.pack("<Q", n) + text + data


def floats(values):
    return struct.pack(f"<{len(values)}f", *values)


def entry(dtype, shape, begin, end):
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


def write(name, blob):
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(blob)


def main():
    os.makedirs(OUT, exist_ok=True)
    good = build({"w": entry("F32", [2, 2], 0, 16)}, floats([1, 2, 3, 4]))
    write("truncated.safetensors", good[:-5])  # data cut short: the range runs past the end
    write("too_short.safetensors", b"\x05\x00\x00")  # not even the 8-byte length
    write("header_past_end.safetensors", build({"w": entry("F32", [1], 0, 4)}, floats([1]), header_len=4096))
    write("unknown_dtype.safetensors", build({"w": entry("F99", [1], 0, 4)}, floats([1])))
    write("shape_mismatch.safetensors", build({"w": entry("F32", [3, 2], 0, 16)}, floats([1, 2, 3, 4])))
    write("overlap.safetensors", build({"a": entry("F32", [2], 0, 8), "b": entry("F32", [2], 4, 12)}, floats([1, 2, 3])))
    dup = b'{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}'
    write("duplicate_name.safetensors", struct.pack("<Q", len(dup)) + dup + floats([1, 2]))
    write("not_json.safetensors", struct.pack("<Q", 5) + b"{oops" + floats([1]))
    # A tiny GPT-2 (V=5, D=4, L=3) and a tiny BERT (V=6, D=4, L=5, 2 types), values k/64.
    V, D, L = 5, 4, 3
    wte = [k / 64 for k in range(V * D)]
    wpe = [-k / 32 for k in range(L * D)]
    write("tiny_gpt2.safetensors", build({"wte.weight": entry("F32", [V, D], 0, 4 * V * D),
                                          "wpe.weight": entry("F32", [L, D], 4 * V * D, 4 * (V + L) * D)},
                                         floats(wte + wpe)))
    # GPT-2 whose wpe width disagrees with wte: the preset must refuse it.
    write("gpt2_bad_width.safetensors", build({"wte.weight": entry("F32", [V, D], 0, 4 * V * D),
                                               "wpe.weight": entry("F32", [L, 3], 4 * V * D, 4 * V * D + 36)},
                                              floats(wte + [0.0] * 9)))
    V, L, Ty = 6, 5, 2
    parts = [("bert.embeddings.word_embeddings.weight", [V, D], [k / 64 for k in range(V * D)]),
             ("bert.embeddings.position_embeddings.weight", [L, D], [k / 128 for k in range(L * D)]),
             ("bert.embeddings.token_type_embeddings.weight", [Ty, D], [1.0, -1.0, 0.5, 0.25, -0.5, 2.0, 0.0, 1.0]),
             ("bert.embeddings.LayerNorm.weight", [D], [1.0, 2.0, 0.5, 1.0]),
             ("bert.embeddings.LayerNorm.bias", [D], [0.0, 0.1, -0.1, 0.0])]
    header, data = {}, b""
    for name, shape, values in parts:
        header[name] = entry("F32", shape, len(data), len(data) + 4 * len(values))
        data += floats(values)
    write("tiny_bert.safetensors", build(header, data))
    print(f"wrote {len(os.listdir(OUT))} files to {os.path.normpath(OUT)}")


if __name__ == "__main__":
    main()
