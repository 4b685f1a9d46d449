"""tokpos.GgufFile against llama.cpp's own Python package, gguf (gguf-py):
the files of tests/data/gguf (written by tools/make_gguf_data.py with
gguf's GGUFWriter) and files written here, read back by tokpos and by
gguf's GGUFReader, must agree on every key, type and value and on every
tensor's name, type, dims, offset and bytes; the token rows tokpos looks up
straight from a file's blocks equal gguf.quants.dequantize of the same rows
(q8_K, which gguf-py cannot dequantize, against ggml's formula d * qs)."""

from __future__ import annotations

import gc
import os
import pathlib
import threading

import numpy as np
import pytest

import tokpos

gguf = pytest.importorskip("gguf", reason="llama.cpp's gguf package (pip install gguf) is the reference here")

DATA = pathlib.Path(__file__).resolve().parents[1] / "data" / "gguf"
FILES = sorted(p.name for p in DATA.glob("*.gguf"))


def reader_value(field):
    """A GGUFReader field's value as plain Python, arrays as lists."""
    vt = gguf.GGUFValueType
    if field.types[0] == vt.ARRAY:
        if len(field.types) > 2 and field.types[1] == vt.ARRAY:
            return None  # nested: compared flattened below
        return field.contents()
    return field.contents()


def flatten(v):
    if isinstance(v, list):
        return [x for e in v for x in flatten(e)]
    return [v]


def reference_rows(t) -> np.ndarray:
    """gguf-py's float32 values of a reader tensor, (rows, ne[0])."""
    ne0 = int(t.shape[0])
    raw = np.asarray(t.data)
    if t.tensor_type == gguf.GGMLQuantizationType.Q8_K:
        blocks = raw.view(np.uint8).reshape(-1, 292)
        d = blocks[:, 0:4].copy().view(np.float32)  # (n, 1)
        qs = blocks[:, 4:260].view(np.int8).astype(np.float32)
        return (d * qs).astype(np.float32).reshape(-1, ne0)
    return np.asarray(gguf.quants.dequantize(raw, t.tensor_type), dtype=np.float32).reshape(-1, ne0)


@pytest.mark.parametrize("name", FILES)
def test_metadata_and_tensors_equal_what_gguf_py_reads(name):
    path = DATA / name
    f = tokpos.GgufFile(path)
    r = gguf.GGUFReader(str(path))
    assert f.version == 3
    assert f.alignment == r.alignment
    keys = [k for k in r.fields if not k.startswith("GGUF.")]
    assert list(f.metadata) == keys
    for key in keys:
        field = r.fields[key]
        want = reader_value(field)
        got = f.metadata[key]
        type_name = field.types[0].name
        if type_name == "ARRAY":
            assert f.metadata_types[key] == f"ARRAY[{field.types[1].name}]", key
            if want is None:
                assert flatten(got) == list(field.contents()) or flatten(got) == flatten(field.contents()), key
                continue
        else:
            assert f.metadata_types[key] == type_name, key
        assert got == want, key
    assert list(f.tensors) == [t.name for t in r.tensors]
    for t in r.tensors:
        g = f.tensor(t.name)
        assert g.ggml_type == int(t.tensor_type)
        assert g.type.lower() == t.tensor_type.name.lower()
        assert g.dims == tuple(int(n) for n in t.shape)
        assert g.shape == tuple(reversed(g.dims))
        assert g.nbytes == int(t.n_bytes)
        assert g.offset == int(t.data_offset)
        assert g.data.dtype == np.uint8 and not g.data.flags.writeable
        assert g.data.tobytes() == np.asarray(t.data).tobytes()


@pytest.mark.parametrize("name", [n for n in FILES if n.startswith("token_embd_")])
def test_compose_from_a_file_equals_gguf_dequantize(name):
    path = DATA / name
    f = tokpos.GgufFile(path)
    (t,) = [t for t in gguf.GGUFReader(str(path)).tensors if t.name == "token_embd.weight"]
    want = reference_rows(t)
    V, D = want.shape
    table = f.tensor("token_embd.weight")
    assert table.shape == (V, D)
    ids = np.array([[3, 0, 2], [1, 3, 3]], dtype=np.int64)
    pos = np.random.default_rng(7).standard_normal((8, D)).astype(np.float32)
    out = tokpos.compose(ids, table, pos)
    assert out.dtype == np.float32 and out.shape == (2, 3, D)
    np.testing.assert_array_equal(out, want[ids] + pos[np.arange(3)])
    np.testing.assert_array_equal(table.numpy(), want)


def test_a_gpt2_file_written_by_gguf_py_composes_as_gpt2_does(tmp_path):
    """token_embd.weight in q8_0 and position_embd.weight in f32, as
    llama.cpp's GPT-2 conversion lays them out, written here by GGUFWriter."""
    rng = np.random.default_rng(3)
    V, D, L = 50, 64, 16
    wte = (rng.standard_normal((V, D)) * 0.1).astype(np.float32)
    wpe = (rng.standard_normal((L, D)) * 0.01).astype(np.float32)
    q = gguf.quants.quantize(wte, gguf.GGMLQuantizationType.Q8_0)
    path = tmp_path / "gpt2.gguf"
    w = gguf.GGUFWriter(str(path), "gpt2")
    w.add_context_length(L)
    w.add_embedding_length(D)
    w.add_tensor("token_embd.weight", q, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    w.add_tensor("position_embd.weight", wpe)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    f = tokpos.GgufFile(path)
    assert f.metadata["general.architecture"] == "gpt2"
    assert f.metadata["gpt2.context_length"] == L
    tok, pos = f.tensor("token_embd.weight"), f.tensor("position_embd.weight")
    assert (tok.type, tok.shape, pos.type, pos.shape) == ("q8_0", (V, D), "f32", (L, D))
    ids = rng.integers(0, V, size=(3, 5))
    want_tok = gguf.quants.dequantize(q, gguf.GGMLQuantizationType.Q8_0).reshape(V, D)
    out = tokpos.compose(ids, tok, pos.numpy(), start=4)
    np.testing.assert_array_equal(out, want_tok[ids] + wpe[4:9])
    assert np.shares_memory(pos.numpy(), pos.data)  # f32 is viewed in place


def test_tensor_data_outlives_the_file_object():
    f = tokpos.GgufFile(DATA / "gpt2_tiny.gguf")
    data = f.tensor("token_embd.weight").data
    want = data.tobytes()
    del f
    gc.collect()
    assert data.tobytes() == want  # the array holds the mapping


def test_bad_files_are_refused_by_name(tmp_path):
    good = (DATA / "gpt2_tiny.gguf").read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(good[: len(good) - 100])
    with pytest.raises(OSError, match=r"cut\.gguf.*data range"):
        tokpos.GgufFile(cut)
    bad_magic = tmp_path / "magic.gguf"
    bad_magic.write_bytes(b"GGUX" + good[4:])
    with pytest.raises(OSError, match=r"magic"):
        tokpos.GgufFile(bad_magic)
    with pytest.raises(OSError, match="No such file"):
        tokpos.GgufFile(tmp_path / "missing.gguf")
    fifo = tmp_path / "fifo.gguf"
    os.mkfifo(fifo)
    done = []
    t = threading.Thread(target=lambda: done.append(pytest.raises(OSError, tokpos.GgufFile, fifo)))
    t.start()
    t.join(10)
    assert done, "opening a FIFO waited for a writer"
    assert "not a regular file" in str(done[0].value)
    f = tokpos.GgufFile(DATA / "gpt2_tiny.gguf")
    with pytest.raises(ValueError, match=r"no tensor named 'output.weight'.*token_embd.weight"):
        f.tensor("output.weight")
    with pytest.raises(IndexError, match=r"token id 16 .* outside \[0, 16\)"):
        tokpos.compose(np.array([[16]]), f.tensor("token_embd.weight"))
