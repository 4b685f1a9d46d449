"""tokpos.QuantizedTable and tokpos.compose over ggml block tables, against
llama.cpp's own Python package, gguf (gguf.quants): for every token-table
type, rows of blocks made by gguf.quants.quantize (where gguf-py can quantize
the type) and of random raw blocks with finite scales, composed with a
position table, equal gguf.quants.dequantize of the same rows plus the
position rows, bit for bit. Every type also goes through a GGUF file
written by gguf's GGUFWriter and mapped by its GGUFReader, read in place.

gguf-py computes in numpy, with the operations of ggml's C dequantize_row_*
in the same order ((d * sc) * q, the min subtracted last, float32
throughout), so the two agree to the bit for every type it has. It has no
q8_K (quants.dequantize raises NotImplementedError): that type is checked
against ggml's C formula, y = d * qs with d a float32, written here."""

from __future__ import annotations

import types

import numpy as np
import pytest

import tokpos

gguf = pytest.importorskip("gguf", reason="llama.cpp's gguf package (pip install gguf) is the reference here")

Q = gguf.GGMLQuantizationType
QUANTIZED = ["q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q2_K", "q3_K", "q4_K", "q5_K", "q6_K", "q8_K"]
PLAIN = ["f16", "bf16", "f32"]
# gguf.quants.quantize has these (the K types it can only dequantize).
GGUF_QUANTIZES = {"q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "f16", "bf16", "f32"}

# Where each block type keeps its float scales (ggml-common.h's block_* structs), as
# (byte offset, kind): random bytes elsewhere are valid quants, but a random scale could
# be a NaN or an infinity.
SCALES = {
    "q8_0": [(0, "f16")], "q4_0": [(0, "f16")], "q5_0": [(0, "f16")],
    "q4_1": [(0, "f16"), (2, "f16")], "q5_1": [(0, "f16"), (2, "f16")],
    "q2_K": [(80, "f16"), (82, "f16")], "q3_K": [(108, "f16")],
    "q4_K": [(0, "f16"), (2, "f16")], "q5_K": [(0, "f16"), (2, "f16")],
    "q6_K": [(208, "f16")], "q8_K": [(0, "f32")],
}


def qtype(name: str):
    return Q[name.upper()]


def sizes(name: str) -> tuple[int, int]:
    """(elements, bytes) of one block, as gguf-py has them."""
    return gguf.GGML_QUANT_SIZES[qtype(name)]


def quantized_rows(name: str, V: int, D: int, rng) -> np.ndarray:
    """(V, row_bytes) uint8: gguf.quants.quantize of random float rows."""
    x = (rng.standard_normal((V, D)) * 0.7).astype(np.float32)
    q = gguf.quants.quantize(x, qtype(name))
    return np.ascontiguousarray(q).view(np.uint8).reshape(V, -1)


def random_rows(name: str, V: int, D: int, rng) -> np.ndarray:
    """(V, row_bytes) uint8: random block bytes whose scales are finite
    (subnormal halves included)."""
    block, nbytes = sizes(name)
    rows = rng.integers(0, 256, size=(V * D // block, nbytes), dtype=np.uint8)
    for offset, kind in SCALES[name]:
        mag = rng.standard_normal(rows.shape[0]) * np.exp2(rng.integers(-26, 4, size=rows.shape[0]))
        v = mag.astype(np.float16 if kind == "f16" else np.float32)
        rows[:, offset:offset + v.itemsize] = v.view(np.uint8).reshape(-1, v.itemsize)
    return rows.reshape(V, -1)


def dequantized(name: str, rows: np.ndarray) -> np.ndarray:
    """The reference rows (N, D) float32: gguf.quants.dequantize, or for
    q8_K, which gguf-py lacks, ggml's dequantize_row_q8_K: y = d * qs."""
    if name == "q8_K":
        blocks = rows.reshape(-1, sizes(name)[1])
        d = blocks[:, 0:4].copy().view(np.float32)  # (n, 1)
        qs = blocks[:, 4:260].copy().view(np.int8).astype(np.float32)
        return (d * qs).reshape(rows.shape[0], -1)
    return gguf.quants.dequantize(rows, qtype(name)).reshape(rows.shape[0], -1).astype(np.float32, copy=False)


def assert_same_bits(got, want):
    got, want = np.ascontiguousarray(got), np.ascontiguousarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


def cases():
    for name in QUANTIZED + PLAIN:
        if name in GGUF_QUANTIZES:
            yield pytest.param(name, "quantize", id=f"{name}-quantize")
        if name in QUANTIZED:
            yield pytest.param(name, "random", id=f"{name}-random")


@pytest.mark.parametrize("name,source", list(cases()))
def test_rows_equal_gguf_dequantize_plus_positions(name, source):
    rng = np.random.default_rng(sum(map(ord, name + source)))
    block, _ = sizes(name)
    V, D, B, T, L, start = 9, 2 * max(block, 32), 3, 7, 12, 4
    rows = (quantized_rows if source == "quantize" else random_rows)(name, V, D, rng)
    table = tokpos.QuantizedTable(rows, name)
    assert table.shape == (V, D)
    assert table.ggml_type == int(qtype(name)) and table.type.lower() == name.lower()
    ids = rng.integers(0, V, size=(B, T))
    pos = rng.uniform(-1, 1, size=(L, D)).astype(np.float32)

    want_tok = dequantized(name, rows[ids.reshape(-1)]).reshape(B, T, D)
    assert_same_bits(tokpos.compose(ids, table), want_tok)
    want = want_tok + pos[start:start + T][None, :, :]
    got = tokpos.compose(ids, table, pos, start=start)
    assert got.dtype == np.float32
    assert_same_bits(got, want)


@pytest.mark.parametrize("name", QUANTIZED + PLAIN)
def test_a_gguf_file_written_by_gguf_py_read_back_in_place(name, tmp_path):
    # llama.cpp's writer puts the table in a file; its reader maps it; tokpos reads the mapped rows.
    rng = np.random.default_rng(sum(map(ord, name)))
    block, _ = sizes(name)
    V, D = 6, 2 * max(block, 32)
    rows = (quantized_rows if name in GGUF_QUANTIZES else random_rows)(name, V, D, rng)
    path = tmp_path / "model.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_tensor("token_embd.weight", rows, raw_dtype=qtype(name))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    tensor = next(t for t in gguf.GGUFReader(str(path)).tensors if t.name == "token_embd.weight")
    data = tensor.data.view(np.uint8)  # f32 and f16 come back typed, the block types as bytes
    table = tokpos.QuantizedTable(data, tensor.tensor_type)
    assert table.shape == (V, D) and table.data.ctypes.data == tensor.data.ctypes.data
    ids = np.array([[5, 0, 2, 2]])
    pos = rng.uniform(-1, 1, size=(4, D)).astype(np.float32)
    assert_same_bits(tokpos.compose(ids, table, pos)[0], dequantized(name, np.asarray(data)[ids[0]]) + pos)


def test_q8_k_is_not_in_gguf_py():
    # Why q8_K is compared with ggml's C formula instead: gguf-py cannot dequantize it.
    rows = random_rows("q8_K", 1, 256, np.random.default_rng(0))
    with pytest.raises(NotImplementedError):
        gguf.quants.dequantize(rows, Q.Q8_K)


def test_flat_ids_and_position_ids():
    rng = np.random.default_rng(3)
    rows = random_rows("q6_K", 5, 512, rng)
    table = tokpos.QuantizedTable(rows, Q.Q6_K)
    ids = np.array([4, 0, 0, 2, 3, 1], dtype=np.int32)
    position_ids = np.array([7, 1, 0, 7, 2, 5])
    pos = rng.uniform(-1, 1, size=(8, 512)).astype(np.float32)
    got = tokpos.compose(ids, table, pos, position_ids=position_ids)
    assert got.shape == (6, 512)
    assert_same_bits(got, dequantized("q6_K", rows[ids]) + pos[position_ids])
    # The same ids as (B, T) = (2, 3).
    got2 = tokpos.compose(ids.reshape(2, 3), table, pos, position_ids=position_ids.reshape(2, 3))
    assert_same_bits(got2.reshape(6, 512), got)


def test_bfloat16_out_is_the_float32_sum_rounded_once():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    for name in ("q8_0", "q4_K"):
        rows = random_rows(name, 6, 256, rng)
        ids = np.array([[5, 1, 1, 0]])
        pos = rng.uniform(-1, 1, size=(4, 256)).astype(np.float32)
        out = torch.empty((1, 4, 256), dtype=torch.bfloat16)
        got = tokpos.compose(ids, tokpos.QuantizedTable(rows, name), pos, out=out)
        assert got is out
        want = torch.from_numpy(dequantized(name, rows[ids[0]]) + pos).to(torch.bfloat16).reshape(1, 4, 256)
        assert torch.equal(out.view(torch.int16), want.view(torch.int16)), name


def test_torch_blocks_are_read_in_place_and_give_torch_out():
    torch = pytest.importorskip("torch")
    rows = random_rows("q5_K", 3, 256, np.random.default_rng(6))
    data = torch.from_numpy(rows)
    table = tokpos.QuantizedTable(data, "Q5_K")
    assert table.data is data and table.type == "q5_K" and table.shape == (3, 256)
    got = tokpos.compose(torch.tensor([2, 0]), table)
    assert isinstance(got, torch.Tensor) and got.dtype == torch.float32
    assert_same_bits(got.numpy(), dequantized("q5_K", rows[[2, 0]]))


def test_any_object_with_ggml_type_data_and_shape():
    # What a GGUF file's tensor looks like: ggml_type, data (here its bytes flat), shape (V, D).
    rows = quantized_rows("q8_0", 4, 64, np.random.default_rng(7))
    tensor = types.SimpleNamespace(ggml_type=Q.Q8_0, data=rows.reshape(-1), shape=(4, 64))
    got = tokpos.compose([3, 1], tensor)
    assert_same_bits(got, dequantized("q8_0", rows[[3, 1]]))
    bad = types.SimpleNamespace(ggml_type=Q.Q8_0, data=rows, shape=(5, 64))
    with pytest.raises(ValueError, match=r"4 rows but token_table.shape is \(5, 64\)"):
        tokpos.compose([0], bad)


def test_type_names_and_values():
    rows = quantized_rows("q4_1", 2, 32, np.random.default_rng(8))
    for t in ("q4_1", "Q4_1", 3, Q.Q4_1, np.int64(3)):
        table = tokpos.QuantizedTable(rows, t)
        assert (table.ggml_type, table.type, table.shape) == (3, "q4_1", (2, 32))
    assert tokpos.QuantizedTable(random_rows("q2_K", 1, 256, np.random.default_rng(0)), "Q2_K").type == "q2_K"


def test_errors_name_the_argument_and_leave_out_untouched():
    rng = np.random.default_rng(9)
    rows = quantized_rows("q8_0", 4, 64, rng)
    table = tokpos.QuantizedTable(rows, "q8_0")
    out = np.full((2, 64), 7.5, dtype=np.float32)
    before = out.copy()

    with pytest.raises(IndexError, match=r"token id 4 at .* is outside \[0, 4\)"):
        tokpos.compose([1, 4], table, out=out)
    pos = np.zeros((1, 64), np.float32)
    with pytest.raises(IndexError, match="position"):
        tokpos.compose([1, 2], table, pos, out=out)
    with pytest.raises(ValueError, match="D = 64 but out has D = 32"):
        tokpos.compose([1, 2], table, out=np.zeros((2, 32), np.float32))
    assert_same_bits(out, before)

    with pytest.raises(ValueError, match=r"ggml_type = 'q9_0' is not a ggml type name"):
        tokpos.QuantizedTable(rows, "q9_0")
    with pytest.raises(ValueError, match="ggml_type 99 is not a ggml type"):
        tokpos.QuantizedTable(rows, 99)
    with pytest.raises(ValueError, match=r"ggml_type 16 \(iq2_xxs\) is not supported for a token table"):
        tokpos.QuantizedTable(rows, "iq2_xxs")
    with pytest.raises(TypeError, match="ggml_type must be an integer or a name"):
        tokpos.QuantizedTable(rows, 8.0)
    with pytest.raises(TypeError, match="ggml_type must be an integer or a name"):
        tokpos.QuantizedTable(rows, True)

    # Row bytes: 68 is a q8_0 row of 64, not of 32; 67 is no whole number of 34-byte blocks.
    with pytest.raises(ValueError, match="token_blocks has 68 bytes per row but a q8_0 row of dim 32 takes 34"):
        tokpos.QuantizedTable(rows, "q8_0", dim=32)
    with pytest.raises(ValueError, match="data has 67 bytes per row, not a whole number of q8_0 blocks of 34 bytes"):
        tokpos.QuantizedTable(rows[:, :67], "q8_0")
    with pytest.raises(ValueError, match=r"dim 40 is not a whole number of q8_0 blocks \(block size 32"):
        tokpos.QuantizedTable(rows, "q8_0", dim=40)
    with pytest.raises(ValueError, match=r"dim 128 is not a whole number of q4_K blocks \(block size 256"):
        tokpos.QuantizedTable(np.zeros((2, 72), np.uint8), "q4_K", dim=128)
    with pytest.raises(ValueError, match="dim = -1 must be >= 0"):
        tokpos.QuantizedTable(rows, "q8_0", dim=-1)
    with pytest.raises(ValueError, match="data has dtype int8; expected uint8"):
        tokpos.QuantizedTable(rows.view(np.int8), "q8_0")
    with pytest.raises(ValueError, match=r"data has shape \(272,\); expected \(V, row_bytes\)"):
        tokpos.QuantizedTable(rows.reshape(-1), "q8_0")
    with pytest.raises(TypeError, match="data must be a numpy array or a torch CPU tensor"):
        tokpos.QuantizedTable(bytes(68), "q8_0")
