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


def gguf_bytes(strings, tensors, alignment=32, shift=0):
    """A GGUF v3 file built here byte by byte: STRING key/values given as
    bytes, then f32 tensors (name bytes, (rows, D) float32 array), each at the
    next multiple of `alignment` (`shift` bytes further for the first)."""
    import struct

    def s(b):
        return struct.pack("<Q", len(b)) + b

    kvs = [s(k) + struct.pack("<I", 8) + s(v) for k, v in strings]
    if alignment != 32:
        kvs.append(s(b"general.alignment") + struct.pack("<II", 4, alignment))
    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs)) + b"".join(kvs)
    offsets, at = [], shift
    for _, a in tensors:
        offsets.append(at)
        at = -(-(at + a.nbytes) // alignment) * alignment
    for (name, a), off in zip(tensors, offsets):
        rows, dim = a.shape
        out += s(name) + struct.pack("<IQQIQ", 2, dim, rows, 0, off)
    out += b"\0" * (-len(out) % alignment)
    data = bytearray()
    for (_, a), off in zip(tensors, offsets):
        data += b"\0" * (off - len(data)) + np.ascontiguousarray(a, np.float32).tobytes()
    return out + bytes(data)


KEY = b"evil.\xff\x1b]0;title\x07"
VALUE = b"v\xc3(\x1b[31mred\r\0nul"
NAME = b"tok\xfe"


def test_bytes_that_are_not_utf8_read_as_backslashreplace(tmp_path):
    """The rule of tokpos/gguf.h: valid UTF-8 as it is, each other byte as
    \\xNN: no UnicodeDecodeError, no U+FFFD, the same text as the CLI's JSON."""
    wte = np.arange(12, dtype=np.float32).reshape(3, 4)
    path = tmp_path / "bytes.gguf"
    path.write_bytes(gguf_bytes([(b"general.architecture", b"llama"), (KEY, VALUE), (b"list", b"x")],
                                [(b"token_embd.weight", wte), (NAME, wte[:1] * 2)]))
    f = tokpos.GgufFile(path)
    key = KEY.decode("utf-8", "backslashreplace")
    assert key == "evil.\\xff\x1b]0;title\x07"
    assert list(f.metadata) == ["general.architecture", key, "list"]
    assert f.metadata[key] == VALUE.decode("utf-8", "backslashreplace") == "v\\xc3(\x1b[31mred\r\0nul"
    assert "\ufffd" not in f.metadata[key]
    name = NAME.decode("utf-8", "backslashreplace")
    assert list(f.tensors) == ["token_embd.weight", name]
    np.testing.assert_array_equal(f.tensor(name).numpy(), wte[:1] * 2)
    np.testing.assert_array_equal(tokpos.compose([[2, 0]], f.tensor("token_embd.weight"))[0], wte[[2, 0]])
    if os.environ.get("TOKPOS_CLI"):
        import json
        import subprocess

        r = subprocess.run([os.environ["TOKPOS_CLI"], "inspect", "--json", str(path)], capture_output=True)
        assert r.returncode == 0, r.stderr
        j = json.loads(r.stdout)
        assert list(j["metadata"]) == list(f.metadata)
        assert [j["metadata"][k]["value"] for k in j["metadata"]] == list(f.metadata.values())
        assert [t["name"] for t in j["tensors"]] == list(f.tensors)


def test_names_that_read_as_the_same_text_are_an_oserror_naming_the_file_and_offset(tmp_path):
    wte = np.zeros((2, 4), np.float32)
    path = tmp_path / "twins.gguf"
    path.write_bytes(gguf_bytes([(b"a\xff", b"1"), (b"a\\xff", b"2")], [(b"t", wte)]))
    with pytest.raises(OSError, match=r"twins\.gguf: at byte 47: key 'a\\xff' reads as 'a\\xff'.* as kv 0 does"):
        tokpos.GgufFile(path)
    path.write_bytes(gguf_bytes([], [(b"w\\xff", wte), (b"w\xff", wte)]))
    with pytest.raises(OSError, match=r"twins\.gguf: at byte \d+: tensor name 'w\\xff' reads as 'w\\xff'"):
        tokpos.GgufFile(path)


@pytest.mark.parametrize("shift", [0, 1, 2, 3])
def test_f32_tables_the_alignment_leaves_unaligned_compose(tmp_path, shift):
    """general.alignment 1 may leave an f32 table at an odd address: its data
    is then an aligned copy, and compose reads it as numpy() does."""
    wte = np.random.default_rng(shift).standard_normal((5, 4)).astype(np.float32)
    path = tmp_path / "align1.gguf"
    path.write_bytes(gguf_bytes([(b"general.architecture", b"llama")], [(b"token_embd.weight", wte)], 1, shift))
    f = tokpos.GgufFile(path)
    assert f.alignment == 1
    t = f.tensor("token_embd.weight")
    assert t.data.ctypes.data % 4 == 0
    np.testing.assert_array_equal(t.numpy(), wte)
    np.testing.assert_array_equal(tokpos.compose([[4, 0, 2]], t)[0], wte[[4, 0, 2]])


def test_the_backward_of_a_block_table_names_its_type():
    f = tokpos.GgufFile(DATA / "token_embd_q8_0.gguf")
    table = f.tensor("token_embd.weight")
    d_out = np.ones((1, 2, table.shape[1]), np.float32)
    for t in (table, tokpos.QuantizedTable(table.data, "q8_0")):
        with pytest.raises(ValueError, match=r"d_token_table is a q8_0 table \(ggml_type 8\): the backward is "
                                             r"defined for float tables only"):
            tokpos.compose_backward(d_out, [[0, 1]], d_token_table=t)


@pytest.mark.parametrize("n", [0, 3])
def test_files_too_short_for_a_magic_are_named_as_gguf(tmp_path, n):
    path = tmp_path / "short.gguf"
    path.write_bytes(b"GGU"[:n])
    with pytest.raises(OSError, match=rf"short\.gguf: at byte 0: magic needs 4 bytes but the file ends at byte {n}"):
        tokpos.GgufFile(path)
