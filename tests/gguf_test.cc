// GGUF reading and validation. Good files are written by llama.cpp's own
// Python writer (the PyPI package gguf, tools/make_gguf_data.py) into
// tests/data/gguf, with what that package's reader finds in them in
// expected.json. Bad files are built here byte by byte, one damage each.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "expect_error.h"
#include "replaced_new.h"
#include "tokpos/error.h"
#include "tokpos/gguf.h"
#include "tokpos/npy.h"
#include "tokpos/ops.h"
#include "tokpos/tokpos.h"

namespace {

using tokpos::GgufFile;
using tokpos::GgufType;
using tokpos::Status;
using tokpos::testing::expect_error;

std::string data(const std::string& name) {
  return std::string(TOKPOS_TEST_DATA) + "/gguf/" + name;
}
std::string scratch(const std::string& name) {
  return ::testing::TempDir() + name;
}

// FNV-1a 64 of the bytes, as tools/make_gguf_data.py computes it from gguf-py's reader.
std::string fnv1a64(std::span<const uint8_t> bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const uint8_t b : bytes) {
    h ^= b;
    h *= 0x100000001b3ull;
  }
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(h));
  return text;
}

// --- Files written by gguf-py ---

nlohmann::json expected() {
  std::ifstream in(data("expected.json"));
  return nlohmann::json::parse(in);
}

// A metadata value against gguf-py's reading of it ({type, element_type, types, value}).
void expect_value(const tokpos::GgufValue& v, const nlohmann::json& want) {
  const std::string type = want["type"];
  ASSERT_EQ(tokpos::gguf_type_name(v.type()), type);
  if (type != "ARRAY") {
    const auto& w = want["value"];
    if (type == "STRING")
      EXPECT_EQ(v.to_string(), w.get<std::string>());
    else if (type == "BOOL")
      EXPECT_EQ(v.to_bool(), w.get<bool>());
    else if (type == "FLOAT32" || type == "FLOAT64")
      EXPECT_EQ(v.to_double(), w.get<double>());
    else if (w.is_number_unsigned())
      EXPECT_EQ(v.to_uint64(), w.get<uint64_t>());
    else
      EXPECT_EQ(v.to_int64(), w.get<int64_t>());
    return;
  }
  const std::string elem = want["element_type"];
  ASSERT_EQ(tokpos::gguf_type_name(v.array_type()), elem);
  const auto& w = want["value"];
  if (elem == "STRING") {
    EXPECT_EQ(v.to_strings(), w.get<std::vector<std::string>>());
  } else if (elem == "FLOAT32" || elem == "FLOAT64") {
    EXPECT_EQ(v.to_doubles(), w.get<std::vector<double>>());
  } else if (elem == "BOOL") {
    ASSERT_EQ(v.size(), w.size());
    for (uint64_t i = 0; i < v.size(); ++i) EXPECT_EQ(v.at(i).to_bool(), w[i].get<bool>()) << i;
  } else if (elem == "ARRAY") {
    // gguf-py flattens an array of arrays into its leaves.
    std::vector<int64_t> leaves;
    for (uint64_t i = 0; i < v.size(); ++i) {
      const auto inner = v.at(i);
      EXPECT_EQ(tokpos::gguf_type_name(inner.array_type()), want["types"].back().get<std::string>());
      for (const int64_t x : inner.to_int64s()) leaves.push_back(x);
    }
    EXPECT_EQ(leaves, w.get<std::vector<int64_t>>());
  } else {
    ASSERT_EQ(v.size(), w.size());
    for (uint64_t i = 0; i < v.size(); ++i) {
      if (w[i].is_number_unsigned())
        EXPECT_EQ(v.at(i).to_uint64(), w[i].get<uint64_t>()) << i;
      else
        EXPECT_EQ(v.at(i).to_int64(), w[i].get<int64_t>()) << i;
    }
  }
}

TEST(Gguf, FilesWrittenByGgufPyReadBackAsItsReaderSees) {
  const auto all = expected();
  ASSERT_EQ(all["files"].size(), 14u);
  for (const auto& [file, want] : all["files"].items()) {
    SCOPED_TRACE(file);
    const auto f = GgufFile::open(data(file));
    EXPECT_EQ(f.version(), 3u);
    EXPECT_EQ(f.alignment(), want["alignment"].get<uint64_t>());
    EXPECT_EQ(f.data_offset(), want["data_offset"].get<uint64_t>());
    ASSERT_EQ(f.metadata().size(), want["metadata"].size());
    for (size_t i = 0; i < f.metadata().size(); ++i) {
      const auto& w = want["metadata"][i];
      SCOPED_TRACE(w["key"].get<std::string>());
      EXPECT_EQ(f.metadata()[i].key, w["key"].get<std::string>());  // the file's order
      const auto* v = f.find(w["key"].get<std::string>());
      ASSERT_NE(v, nullptr);
      expect_value(*v, w);
    }
    ASSERT_EQ(f.tensors().size(), want["tensors"].size());
    for (size_t i = 0; i < f.tensors().size(); ++i) {
      const auto& w = want["tensors"][i];
      const auto& t = f.tensors()[i];
      EXPECT_EQ(t.name, w["name"].get<std::string>());
      EXPECT_EQ(static_cast<int>(t.ggml_type), w["ggml_type"].get<int>());
      EXPECT_EQ(t.dims, w["dims"].get<std::vector<int64_t>>());
      EXPECT_EQ(t.offset, w["offset"].get<uint64_t>());
      EXPECT_EQ(t.nbytes, w["nbytes"].get<uint64_t>());
      const auto bytes = f.bytes(t.name);
      EXPECT_EQ(bytes.size(), t.nbytes);
      EXPECT_EQ(bytes.data(), f.bytes(t.name).data());  // in place, not a copy
      EXPECT_EQ(fnv1a64(bytes), w["fnv1a64"].get<std::string>());
      EXPECT_EQ(&f.tensor(t.name), &t);
    }
  }
}

TEST(Gguf, Gpt2FileHasItsTablesInNumpyOrder) {
  const auto f = GgufFile::open(data("gpt2_tiny.gguf"));
  EXPECT_EQ(f.find("general.architecture")->to_string(), "gpt2");
  EXPECT_EQ(f.find("gpt2.context_length")->to_uint64(), 12u);
  EXPECT_EQ(f.find("no.such.key"), nullptr);
  const auto& wte = f.tensor("token_embd.weight");
  EXPECT_EQ(wte.ggml_type, tokpos::GgmlType::kF32);
  EXPECT_EQ(wte.dims, (std::vector<int64_t>{8, 16}));
  EXPECT_EQ(wte.shape(), (std::vector<int64_t>{16, 8}));  // (V, D)
  EXPECT_EQ(f.tensor("position_embd.weight").shape(), (std::vector<int64_t>{12, 8}));
  // A copy shares the mapping: its views outlive the original.
  std::span<const uint8_t> view;
  std::optional<GgufFile> copy;
  {
    const auto g = GgufFile::open(data("gpt2_tiny.gguf"));
    copy = g;
    view = copy->bytes("token_embd.weight");
  }
  EXPECT_EQ(fnv1a64(view), fnv1a64(f.bytes("token_embd.weight")));
}

TEST(Gguf, MissingTensorsAndWrongValueTypesAreInvalidArguments) {
  const auto f = GgufFile::open(data("gpt2_tiny.gguf"));
  expect_error([&] { f.tensor("output.weight"); }, Status::kInvalidArgument,
               {data("gpt2_tiny.gguf"), "no tensor named 'output.weight'", "2 tensors",
                "'token_embd.weight', 'position_embd.weight'"});
  expect_error([&] { f.bytes("wpe"); }, Status::kInvalidArgument, {"no tensor named 'wpe'"});
  const auto& ctx = *f.find("gpt2.context_length");
  expect_error([&] { ctx.to_string(); }, Status::kInvalidArgument, {"to_string needs STRING", "UINT32"});
  expect_error([&] { ctx.size(); }, Status::kInvalidArgument, {"size needs ARRAY", "UINT32"});
  expect_error([&] { f.find("test.int8")->to_uint64(); }, Status::kInvalidArgument,
               {"INT8 value -100 is below 0"});
  expect_error([&] { f.find("test.uint64")->to_int64(); }, Status::kInvalidArgument,
               {"18000000000000000000 exceeds INT64_MAX"});
  const auto& tokens = *f.find("tokenizer.ggml.tokens");
  expect_error([&] { tokens.at(16); }, Status::kInvalidArgument, {"index 16 is outside [0, 16)"});
  expect_error([&] { tokens.to_int64s(); }, Status::kInvalidArgument, {"to_int64s", "STRING"});
}

TEST(Gguf, UnreadableAndNonRegularFilesAreIoErrors) {
  const auto missing = data("no-such-file.gguf");
  expect_error([&] { GgufFile::open(missing); }, Status::kIoError,
               {"gguf: cannot open " + missing, std::strerror(ENOENT)});
  const auto dir = scratch("a_directory.gguf");
  ::mkdir(dir.c_str(), 0755);
  expect_error([&] { GgufFile::open(dir); }, Status::kIoError, {"cannot open " + dir, "a directory"});
  expect_error([&] { GgufFile::open("/dev/zero"); }, Status::kIoError,
               {"cannot open /dev/zero: it is a character device, not a regular file"});
  const auto fifo = scratch("a_fifo.gguf");
  ::unlink(fifo.c_str());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0) << std::strerror(errno);
  // In a child under alarm(): a regression (waiting for a writer) fails instead of hanging.
  EXPECT_EXIT(
      {
        ::alarm(5);
        try {
          GgufFile::open(fifo);
        } catch (const tokpos::Error& e) {
          std::fprintf(stderr, "%s\n", e.what());
          std::_Exit(e.status() == Status::kIoError ? 0 : 1);
        }
        std::_Exit(2);
      },
      ::testing::ExitedWithCode(0), "cannot open .*a_fifo.gguf: it is a FIFO, not a regular file");
  ::unlink(fifo.c_str());
  // An empty regular file maps nothing and is a corrupt file, not an I/O error.
  const auto empty = scratch("empty.gguf");
  std::ofstream(empty).close();
  expect_error([&] { GgufFile::open(empty); }, Status::kCorruptFile,
               {empty, "at byte 0: magic needs 4 bytes"});
}

// Each token table, looked up through the ops straight from the file's
// bytes, equals gguf-py's gguf.quants.dequantize of the same rows bit for bit
// (dequant/TYPE.npy; gguf-py has no q8_K dequantizer).
TEST(Gguf, TokenTablesLookUpAsGgufPyDequantizes) {
  for (const char* type :
       {"f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q2_k", "q3_k", "q4_k", "q5_k", "q6_k"}) {
    SCOPED_TRACE(type);
    const auto f = GgufFile::open(data(std::string("token_embd_") + type + ".gguf"));
    const auto& t = f.tensor("token_embd.weight");
    const auto want = tokpos::read_npy(data(std::string("dequant/") + type + ".npy"));
    ASSERT_EQ(want.descr, "<f4");
    ASSERT_EQ(want.shape, t.shape());
    const int64_t V = t.shape()[0], D = t.shape()[1];
    const auto bytes = f.bytes(t.name);
    const int64_t row_bytes = static_cast<int64_t>(bytes.size()) / V;
    tokpos::TensorView blocks_view(bytes.data(), tokpos::DType::kI32, {V, row_bytes});
    DLTensor blocks = blocks_view;
    blocks.dtype = {kDLUInt, 8, 1};
    std::vector<int64_t> ids(static_cast<size_t>(V));
    for (int64_t v = 0; v < V; ++v) ids[static_cast<size_t>(v)] = V - 1 - v;  // every row, reversed
    std::vector<float> got(static_cast<size_t>(V * D), -7.0f);
    tokpos::TensorView iv(ids.data(), tokpos::DType::kI64, {1, V});
    tokpos::TensorView ov(got.data(), tokpos::DType::kF32, {1, V, D});
    tokpos::ops::compose_forward(ov, iv,
                                 tokpos::ops::QuantizedTable{&blocks, static_cast<int>(t.ggml_type), D});
    for (int64_t v = 0; v < V; ++v) {
      EXPECT_EQ(0, std::memcmp(got.data() + (V - 1 - v) * D, want.data.data() + v * D * 4,
                               static_cast<size_t>(D) * 4))
          << "row " << v;
    }
  }
}

// --- Crafted files ---

// Little-endian bytes.
struct Bytes {
  std::vector<uint8_t> v;
  Bytes& u8(uint8_t x) {
    v.push_back(x);
    return *this;
  }
  Bytes& u32(uint32_t x) {
    for (int i = 0; i < 4; ++i) v.push_back(static_cast<uint8_t>(x >> (8 * i)));
    return *this;
  }
  Bytes& u64(uint64_t x) {
    for (int i = 0; i < 8; ++i) v.push_back(static_cast<uint8_t>(x >> (8 * i)));
    return *this;
  }
  Bytes& str(const std::string& s) {
    u64(s.size());
    v.insert(v.end(), s.begin(), s.end());
    return *this;
  }
  Bytes& raw(const std::vector<uint8_t>& b) {
    v.insert(v.end(), b.begin(), b.end());
    return *this;
  }
};

// Key/value pairs as the file holds them.
Bytes kv_string(const std::string& key, const std::string& value) {
  return Bytes().str(key).u32(8).str(value);
}
Bytes kv_u32(const std::string& key, uint32_t value) {
  return Bytes().str(key).u32(4).u32(value);
}

struct TensorSpec {
  std::string name;
  std::vector<uint64_t> dims;  // ne[0] first
  uint32_t type = 0;           // f32
  uint64_t offset = 0;
  uint64_t nbytes = 0;  // the data the file holds for it (the spec's own count)
};

// A file built from its parts; each test damages one. The default is sound:
// two key/value pairs and two tensors, an f32 (4 x 2) and a q8_0 (1 x 32).
struct Crafted {
  std::string magic = "GGUF";
  uint32_t version = 3;
  std::optional<uint64_t> n_tensors, n_kv;  // override the counts written
  std::vector<Bytes> kvs = {kv_string("general.architecture", "gpt2"), kv_u32("gpt2.context_length", 2)};
  std::vector<TensorSpec> tensors = {{"a", {4, 2}, 0, 0, 32}, {"b", {32, 1}, 8, 32, 34}};
  uint64_t alignment = 32;             // for the padding
  std::optional<uint64_t> data_bytes;  // default: up to the end of the last range

  std::vector<uint8_t> build() const {
    Bytes b;
    b.v.assign(magic.begin(), magic.end());
    b.u32(version).u64(n_tensors.value_or(tensors.size())).u64(n_kv.value_or(kvs.size()));
    for (const auto& kv : kvs) b.raw(kv.v);
    uint64_t end = 0;
    for (const auto& t : tensors) {
      b.str(t.name).u32(static_cast<uint32_t>(t.dims.size()));
      for (const uint64_t d : t.dims) b.u64(d);
      b.u32(t.type).u64(t.offset);
      end = std::max(end, t.offset + t.nbytes);
    }
    while (b.v.size() % alignment != 0) b.u8(0);
    for (uint64_t i = 0; i < data_bytes.value_or(end); ++i) b.u8(static_cast<uint8_t>(i * 7));
    return b.v;
  }
};

constexpr const char* kName = "crafted.gguf";

GgufFile parse(const std::vector<uint8_t>& bytes) {
  return GgufFile::parse(bytes, kName);
}

// Refused as kCorruptFile with the file's name and every piece in the message.
void expect_refused(const Crafted& c, std::initializer_list<std::string> pieces) {
  const auto bytes = c.build();
  expect_error([&] { parse(bytes); }, Status::kCorruptFile, pieces);
  expect_error([&] { parse(bytes); }, Status::kCorruptFile, {std::string("gguf: ") + kName + ": at byte "});
}

TEST(Gguf, TheSoundCraftedFileParses) {
  const auto bytes = Crafted().build();
  const auto f = parse(bytes);
  EXPECT_EQ(f.name(), kName);
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 32u);
  ASSERT_EQ(f.tensors().size(), 2u);
  EXPECT_EQ(f.tensor("b").ggml_type, tokpos::GgmlType::kQ8_0);
  EXPECT_EQ(f.tensor("b").nbytes, 34u);
  EXPECT_EQ(f.data_offset() + 32 + 34, bytes.size());
  EXPECT_EQ(f.bytes("b")[0], static_cast<uint8_t>(32 * 7));
  EXPECT_EQ(f.find("gpt2.context_length")->to_uint64(), 2u);
  Crafted v2;
  v2.version = 2;
  EXPECT_EQ(parse(v2.build()).version(), 2u);
  // parse() copies: the bytes may go away.
  std::optional<GgufFile> g;
  {
    auto temp = Crafted().build();
    g = parse(temp);
    std::fill(temp.begin(), temp.end(), 0);
  }
  EXPECT_EQ(g->find("general.architecture")->to_string(), "gpt2");
}

TEST(Gguf, TruncatedAtEveryByteIsRefused) {
  const auto whole = Crafted().build();
  for (size_t n = 0; n < whole.size(); ++n) {
    SCOPED_TRACE(n);
    const std::vector<uint8_t> cut(whole.begin(), whole.begin() + static_cast<std::ptrdiff_t>(n));
    expect_error([&] { parse(cut); }, Status::kCorruptFile, {std::string("gguf: ") + kName + ": at byte "});
  }
  // The same for the file gguf-py wrote, with a value of every type.
  std::ifstream in(data("gpt2_tiny.gguf"), std::ios::binary);
  const std::vector<uint8_t> written((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_GT(written.size(), 2000u);
  EXPECT_EQ(parse(written).tensors().size(), 2u);
  for (size_t n = 0; n < written.size(); ++n) {
    SCOPED_TRACE(n);
    const std::vector<uint8_t> cut(written.begin(), written.begin() + static_cast<std::ptrdiff_t>(n));
    expect_error([&] { parse(cut); }, Status::kCorruptFile, {std::string("gguf: ") + kName + ": at byte "});
  }
  // Cut inside the data: the last tensor's range is named.
  const std::vector<uint8_t> cut(whole.begin(), whole.end() - 1);
  expect_error([&] { parse(cut); }, Status::kCorruptFile,
               {"tensor 'b': data range [32, 32 + 34)", "past the end"});
}

TEST(Gguf, WrongMagicVersionOneAndBigEndianAreRefusedByName) {
  Crafted c;
  c.magic = "GGML";
  expect_refused(c, {"at byte 0: magic", "not \"GGUF\""});
  c = Crafted();
  c.version = 1;
  expect_refused(c, {"at byte 4: version 1", "not supported"});
  c.version = 4;
  expect_refused(c, {"version 4 is not supported (only 2 and 3)"});
  c.version = 0x03000000;  // 3, written big-endian
  expect_refused(c, {"version 50331648 reads as 3 byte-swapped: a big-endian file"});
  c.version = 0x02000000;
  expect_refused(c, {"version 33554432 reads as 2 byte-swapped: a big-endian file"});
  c.version = 0x00020000;  // not a byte-swapped version either
  expect_refused(c, {"version 131072 is not supported (only 2 and 3)"});
}

TEST(Gguf, CountsTheFileCannotHoldAreRefusedBeforeAnyAllocation) {
  Crafted c;
  c.n_tensors = uint64_t{1} << 60;
  expect_refused(c, {"at byte 8: tensor count 1152921504606846976", "bytes per tensor info"});
  c = Crafted();
  c.n_kv = ~uint64_t{0};
  expect_refused(c, {"at byte 16: kv count 18446744073709551615", "bytes per key/value"});
  c = Crafted();
  c.n_kv = 3;  // one pair more than written: the third key runs into the tensor infos
  expect_refused(c, {});
}

TEST(Gguf, HugeStringAndArrayLengthsAreRefused) {
  Crafted c;
  c.kvs.push_back(Bytes().str("k").u32(8).u64(uint64_t{1} << 62));
  expect_refused(c, {"key 'k': string length 4611686018427387904 runs past the end of the file"});
  c = Crafted();
  c.kvs.push_back(Bytes().u64(~uint64_t{0}).raw({'k'}));
  expect_refused(c, {"kv 2 key length 18446744073709551615 runs past the end"});
  c = Crafted();
  c.kvs.push_back(Bytes().str("arr").u32(9).u32(5).u64(uint64_t{1} << 61));
  expect_refused(c, {"key 'arr': array length 2305843009213693952 of INT32 needs at least 4 bytes each"});
  c = Crafted();
  c.kvs.push_back(Bytes().str("strs").u32(9).u32(8).u64(1000000));
  expect_refused(c, {"key 'strs': array length 1000000 of STRING needs at least 8 bytes each"});
  c = Crafted();
  c.kvs.push_back(Bytes().str("strs").u32(9).u32(8).u64(2).str("x").u64(999999));
  expect_refused(c, {"key 'strs': string element 1 length 999999 runs past the end"});
}

TEST(Gguf, UnknownValueTypesAndDeepArraysAreRefused) {
  Crafted c;
  c.kvs.push_back(Bytes().str("odd").u32(13).u32(0));
  expect_refused(c, {"key 'odd': value type 13 is not a GGUF value type (0..12)"});
  c = Crafted();
  c.kvs.push_back(Bytes().str("odd").u32(9).u32(77).u64(0));
  expect_refused(c, {"key 'odd': array element type 77 is not a GGUF value type"});
  c = Crafted();
  Bytes deep = Bytes().str("deep").u32(9);
  for (int i = 0; i < tokpos::kGgufMaxArrayDepth; ++i) deep.u32(9).u64(1);
  deep.u32(4).u64(0);
  c.kvs.push_back(deep);
  expect_refused(c, {"key 'deep': array nesting depth 9 exceeds 8"});
  c = Crafted();
  c.kvs.push_back(Bytes().str("flag").u32(7).u8(2));
  expect_refused(c, {"key 'flag': BOOL value 2 is not 0 or 1"});
  // Eight levels are allowed.
  c = Crafted();
  Bytes ok = Bytes().str("ok").u32(9);
  for (int i = 0; i < tokpos::kGgufMaxArrayDepth - 1; ++i) ok.u32(9).u64(1);
  ok.u32(4).u64(1).u32(7);
  c.kvs.push_back(ok);
  const auto f = parse(c.build());
  auto v = *f.find("ok");
  for (int i = 0; i < tokpos::kGgufMaxArrayDepth - 1; ++i) v = v.at(0);
  EXPECT_EQ(v.to_int64s(), (std::vector<int64_t>{7}));
}

TEST(Gguf, DuplicateKeysAndNamesAreRefused) {
  Crafted c;
  c.kvs.push_back(kv_u32("gpt2.context_length", 5));
  expect_refused(c, {"key 'gpt2.context_length' appears twice (kv 1 and kv 2)"});
  c = Crafted();
  c.tensors[1].name = "a";
  expect_refused(c, {"tensor name 'a' appears twice (tensor 0 and tensor 1)"});
  c = Crafted();
  c.tensors[1].name = std::string(65, 'n');
  expect_refused(c, {"tensor 1 name length 65 exceeds 64 bytes"});
}

TEST(Gguf, TheAlignmentMustBeAUint32PowerOfTwo) {
  for (const uint32_t bad : {0u, 3u, 48u}) {
    Crafted c;
    c.kvs.push_back(kv_u32("general.alignment", bad));
    expect_refused(c, {"general.alignment " + std::to_string(bad) + " is not a power of two"});
  }
  Crafted c;
  c.kvs.push_back(kv_string("general.alignment", "32"));
  expect_refused(c, {"general.alignment has value type STRING, not UINT32"});
  // 64: the data section starts at a multiple of 64, and so must every offset.
  c = Crafted();
  c.kvs.push_back(kv_u32("general.alignment", 64));
  c.alignment = 64;
  c.tensors[1].offset = 64;
  const auto f = parse(c.build());
  EXPECT_EQ(f.alignment(), 64u);
  EXPECT_EQ(f.data_offset() % 64, 0u);
  c.tensors[1].offset = 32;
  expect_refused(c, {"tensor 'b': offset 32 is not a multiple of the alignment 64"});
}

TEST(Gguf, BadTensorInfosAreRefusedByField) {
  Crafted c;
  c.tensors[0].dims = {4, 0};
  expect_refused(c, {"tensor 'a': dim ne[1] = 0 is outside [1, 2^63)"});
  c.tensors[0].dims = {};
  expect_refused(c, {"tensor 'a': n_dims 0 is outside [1, 4]"});
  c.tensors[0].dims = {1, 1, 1, 1, 1};
  expect_refused(c, {"tensor 'a': n_dims 5 is outside [1, 4]"});
  c.tensors[0].dims = {uint64_t{1} << 62, 4};
  expect_refused(c, {"tensor 'a': element count overflows int64 at dim ne[1] = 4"});
  c.tensors[0].dims = {~uint64_t{0}};
  expect_refused(c, {"tensor 'a': dim ne[0] = 18446744073709551615 is outside [1, 2^63)"});
  c.tensors[0].dims = {uint64_t{1} << 62, 1};  // 2^62 f32 = 2^64 bytes in one row
  expect_refused(c, {"tensor 'a': the row bytes of ne[0] = 4611686018427387904 f32 overflow size_t"});
  c.tensors[0].dims = {uint64_t{1} << 31, uint64_t{1} << 31};  // rows of 2^33 bytes, 2^31 of them
  expect_refused(c, {"tensor 'a': byte size 8589934592 x 2147483648 rows (f32) overflows uint64"});
  c = Crafted();
  c.tensors[0].type = 4;  // removed from ggml
  expect_refused(c, {"tensor 'a': ggml type 4 is not a known ggml_type"});
  c.tensors[0].type = 1000;
  expect_refused(c, {"tensor 'a': ggml type 1000 is not a known ggml_type"});
  c = Crafted();
  c.tensors[1].dims = {48, 1};
  expect_refused(c, {"tensor 'b': row ne[0] = 48 is not a whole number of q8_0 blocks (32 elements each)"});
}

TEST(Gguf, DataRangesMustBeAlignedInsideTheFileAndApart) {
  Crafted c;
  c.tensors[1].offset = 36;
  expect_refused(c, {"tensor 'b': offset 36 is not a multiple of the alignment 32"});
  c = Crafted();
  c.tensors[1].offset = 0;  // on top of 'a'
  expect_refused(c, {"data range [0, 34) overlaps tensor", "[0, 32)"});
  c = Crafted();
  c.tensors[0].dims = {16, 2};  // 128 bytes from 0: runs into 'b' at 32
  c.tensors[0].nbytes = 128;
  expect_refused(c, {"tensor 'b': data range [32, 66) overlaps tensor 'a' at [0, 128)"});
  c = Crafted();
  c.data_bytes = 65;
  expect_refused(c, {"tensor 'b': data range [32, 32 + 34)",
                     "runs past the end of the file: the section holds 65 bytes"});
  c = Crafted();
  c.tensors[1].offset = ~uint64_t{0} - 31;  // a multiple of 32 whose end overflows uint64
  c.data_bytes = 66;
  expect_refused(c, {"tensor 'b': data range [18446744073709551584", "past the end"});
}

// Many entries: duplicates are found by sorting (O(n log n)), and 100,000
// tensors laid out back to back parse.
TEST(Gguf, HundredThousandTensorsParseAndADuplicateIsFound) {
  Crafted c;
  c.tensors.clear();
  constexpr int kN = 100000;
  for (int i = 0; i < kN; ++i) c.tensors.push_back({"t" + std::to_string(i), {8}, 0, uint64_t(i) * 32, 32});
  const auto f = parse(c.build());
  ASSERT_EQ(f.tensors().size(), size_t{kN});
  EXPECT_EQ(f.tensor("t99999").offset, 99999u * 32);
  c.tensors[kN - 1].name = "t5";
  expect_refused(c, {"tensor name 't5' appears twice (tensor 5 and tensor 99999)"});
}

// Counts as large as the checks allow, followed by a megabyte of zeros:
// refused or read, no single allocation is larger than the file
// (replaced_new.h fails any that is, with std::bad_alloc, not a
// tokpos::Error).
TEST(Gguf, NoAllocationIsLargerThanTheFile) {
  constexpr uint64_t kRest = 1 << 20;
  auto header = [](uint64_t n_tensors, uint64_t n_kv) {
    Bytes b;
    b.v = {'G', 'G', 'U', 'F'};
    b.u32(3).u64(n_tensors).u64(n_kv);
    return b;
  };
  auto zeros = [&](Bytes b) {
    b.v.resize(b.v.size() + kRest, 0);
    return b.v;
  };
  auto parse_bounded = [](const std::vector<uint8_t>& bytes) {
    tokpos::testing::t_min_bytes = bytes.size() + 1;
    tokpos::testing::t_count = 0;
    tokpos::testing::t_fail_at = 1;
    try {
      const auto f = parse(bytes);
      tokpos::testing::t_fail_at = 0;
      return f.metadata().size() + f.tensors().size();
    } catch (...) {
      tokpos::testing::t_fail_at = 0;
      throw;
    }
  };
  // 32,768 tensor infos announced: the first has n_dims 0.
  const auto infos = zeros(header(kRest / 32, 0));
  expect_error([&] { parse_bounded(infos); }, Status::kCorruptFile,
               {"tensor '': n_dims 0 is outside [1, 4]"});
  // 80,659 pairs announced: the second has the first one's (empty) key.
  const auto pairs = zeros(header(0, kRest / 13));
  expect_error([&] { parse_bounded(pairs); }, Status::kCorruptFile, {"key '' appears twice (kv 0 and kv 1)"});
  // Arrays of 131,072 empty strings and of 87,381 empty arrays fill the file exactly, and are read.
  EXPECT_EQ(parse_bounded(zeros(header(0, 1).str("s").u32(9).u32(8).u64(kRest / 8))), 1u);
  Bytes nested = header(0, 1).str("n").u32(9).u32(9).u64(kRest / 12);
  auto nested_bytes = zeros(nested);
  // Cut the tail no whole array fills (erase, not resize: GCC 12 sees a
  // possible growth in resize and warns under -O2 with sanitizers).
  ASSERT_GE(nested_bytes.size(), kRest % 12);
  nested_bytes.erase(nested_bytes.end() - static_cast<std::ptrdiff_t>(kRest % 12), nested_bytes.end());
  EXPECT_EQ(parse_bounded(nested_bytes), 1u);
}


// --- Bytes that are not UTF-8, and control characters ---

// gguf_text is Python's bytes.decode("utf-8", "backslashreplace"): each byte
// outside a valid sequence (Unicode's table 3-7) as \xNN, the rest as it is.
TEST(Gguf, TextEscapesEveryByteThatIsNotUtf8AsPythonsBackslashreplace) {
  using namespace std::string_literals;
  struct Case {
    std::string bytes, text;
  };
  for (const Case& c : {Case{"plain", "plain"}, Case{"caf\xc3\xa9 \xe4\xbd\xa0 \xf0\x9f\x98\x80", "caf\xc3\xa9 \xe4\xbd\xa0 \xf0\x9f\x98\x80"},
                        Case{"a\xff" "b", "a\\xffb"}, Case{"\x80", "\\x80"},
                        Case{"\xc0\x80", "\\xc0\\x80"},          // overlong NUL
                        Case{"\xe0\x80\xaf", "\\xe0\\x80\\xaf"},  // overlong
                        Case{"\xed\xa0\x80", "\\xed\\xa0\\x80"},  // a surrogate
                        Case{"\xf4\x90\x80\x80", "\\xf4\\x90\\x80\\x80"},  // past U+10FFFF
                        Case{"\xe2\x82" "A", "\\xe2\\x82A"},      // cut short
                        Case{"x\xf0\x9f\x98", "x\\xf0\\x9f\\x98"},
                        Case{"n\0l\x1b[2J\x7f"s, "n\0l\x1b[2J\x7f"s}}) {
    EXPECT_EQ(tokpos::gguf_text(c.bytes), c.text) << c.text;
  }
  // For terminals and messages, control characters too: C0, DEL and C1 (U+009B is CSI).
  EXPECT_EQ(tokpos::gguf_printable("t\x1b]0;title\x07\r\n\0z\x7f\xc2\x9b" "1m\xc2\xa0\xff"s),
            "t\\x1b]0;title\\x07\\x0d\\x0a\\x00z\\x7f\\xc2\\x9b1m\xc2\xa0\\xff");
}

TEST(Gguf, KeysValuesAndNamesThatAreNotUtf8AreReadAsTheirBytes) {
  Crafted c;
  c.kvs.push_back(kv_string("bad.\xff\x1b[31m", "v\xc3(\x1b]0;x\x07"));
  c.tensors[1].name = "t\x80\xfe";
  const auto bytes = c.build();
  const auto f = parse(bytes);
  ASSERT_EQ(f.metadata().size(), 3u);
  EXPECT_EQ(f.metadata()[2].key, "bad.\xff\x1b[31m");
  EXPECT_EQ(f.find("bad.\xff\x1b[31m")->to_string(), "v\xc3(\x1b]0;x\x07");
  EXPECT_EQ(f.tensors()[1].name, "t\x80\xfe");
  EXPECT_EQ(f.bytes("t\x80\xfe").size(), 34u);
  // Named in errors as gguf_printable shows them: no raw byte reaches a message.
  expect_error([&] { f.tensor("x\x1b"); }, Status::kInvalidArgument, {"no tensor named 'x\\x1b'", "'t\\x80\\xfe'"});
  Crafted bad;
  bad.kvs.push_back(Bytes().str("k\xff\x1b").u32(13).u32(0));
  expect_refused(bad, {"key 'k\\xff\\x1b': value type 13 is not a GGUF value type"});
  bad = Crafted();
  bad.tensors[1].name = "b\xfe\r";
  bad.tensors[1].offset = 16;
  expect_refused(bad, {"tensor 'b\\xfe\\x0d': offset 16 is not a multiple of the alignment 32"});
  try {
    parse(bad.build());
  } catch (const tokpos::Error& e) {
    for (const char ch : std::string(e.what())) EXPECT_TRUE(ch >= 0x20 && ch < 0x7f) << e.what();
  }
}

// Two keys (or names) of different bytes that read as the same text would
// be one key in JSON and in a Python dict: the file is refused.
TEST(Gguf, KeysAndNamesThatReadAsTheSameTextAreRefused) {
  Crafted c;
  c.kvs.push_back(kv_u32("a\xff", 1));
  c.kvs.push_back(kv_u32("a\\xff", 2));
  expect_refused(c, {"key 'a\\xff' reads as 'a\\xff'", "as kv 2 does: keys must differ as text"});
  c = Crafted();
  c.kvs.push_back(kv_u32("a\\xff", 1));
  c.kvs.push_back(kv_u32("a\xff", 2));
  expect_refused(c, {"as kv 2 does"});
  c = Crafted();
  c.kvs.push_back(kv_u32("\xff\\xff", 1));
  c.kvs.push_back(kv_u32("\\xff\xff", 2));
  expect_refused(c, {"reads as '\\xff\\xff'", "as kv 2 does"});
  c = Crafted();
  c.tensors[0].name = "w\xff";
  c.tensors[1].name = "w\\xff";
  expect_refused(c, {"tensor name 'w\\xff' reads as 'w\\xff'", "as tensor 0's does"});
}

// general.alignment 1 may leave an f32 table at an address that is not a
// multiple of 4: aligned_bytes copies it, and the lookup reads it.
TEST(Gguf, FloatTablesTheAlignmentLeavesUnalignedAreCopiedForTheLookup) {
  for (const uint64_t offset : {1, 2, 3}) {
    SCOPED_TRACE(offset);
    Crafted c;
    c.kvs.push_back(kv_u32("general.alignment", 1));
    c.alignment = 1;
    c.tensors = {{"token_embd.weight", {4, 2}, 0, offset, 32}};
    const auto bytes = c.build();
    const auto f = parse(bytes);
    ASSERT_EQ(f.alignment(), 1u);
    const auto in_place = f.bytes("token_embd.weight");
    const auto misaligned = reinterpret_cast<uintptr_t>(in_place.data()) % 4;
    const auto aligned = f.aligned_bytes("token_embd.weight");
    EXPECT_EQ(aligned.copied, misaligned != 0);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(aligned.bytes.data()) % 4, 0u);
    ASSERT_EQ(aligned.bytes.size(), 32u);
    EXPECT_EQ(0, std::memcmp(aligned.bytes.data(), in_place.data(), 32));
    std::vector<float> want(8);
    std::memcpy(want.data(), in_place.data(), 32);
    auto lookup = [&](const uint8_t* data) {
      tokpos::TensorView blocks_view(data, tokpos::DType::kI32, {2, 16});
      DLTensor blocks = blocks_view;
      blocks.dtype = {kDLUInt, 8, 1};
      std::vector<int64_t> ids{1, 0};
      std::vector<float> got(8, -7.0f);
      tokpos::TensorView iv(ids.data(), tokpos::DType::kI64, {1, 2});
      tokpos::TensorView ov(got.data(), tokpos::DType::kF32, {1, 2, 4});
      tokpos::ops::compose_forward(ov, iv, tokpos::ops::QuantizedTable{&blocks, 0, 4});
      return got;
    };
    const auto got = lookup(aligned.bytes.data());
    EXPECT_EQ(0, std::memcmp(got.data(), want.data() + 4, 16));
    EXPECT_EQ(0, std::memcmp(got.data() + 4, want.data(), 16));
    if (misaligned != 0) {  // the op itself names the offset and the element size, no pointer
      expect_error([&] { lookup(in_place.data()); }, Status::kInvalidArgument,
                   {"the f32 token table's first row starts " + std::to_string(misaligned) +
                        " bytes past a multiple of 4 bytes in memory; f32 rows must start at multiples of 4"});
    }
  }
  // A block type reads bytes as they come: no copy.
  Crafted c;
  c.kvs.push_back(kv_u32("general.alignment", 1));
  c.alignment = 1;
  c.tensors = {{"b", {32, 1}, 8, 1, 34}};
  const auto f = parse(c.build());
  EXPECT_FALSE(f.aligned_bytes("b").copied);
  EXPECT_EQ(f.aligned_bytes("b").bytes.data(), f.bytes("b").data());
}

// The C API hands out the same bytes as its blocks DLTensor, and names keys
// as gguf_printable shows them.
TEST(Gguf, TheCApisBlocksOfAnUnalignedF32TableAreAnAlignedCopy) {
  const std::string path = scratch("gguf_align1.gguf");
  for (const uint64_t offset : {1, 2, 3}) {
    SCOPED_TRACE(offset);
    Crafted c;
    c.kvs.push_back(kv_u32("general.alignment", 1));
    c.kvs.push_back(kv_u32("k\xff\x1b", 7));
    c.alignment = 1;
    c.tensors = {{"token_embd.weight", {4, 2}, 0, offset, 32}};
    const auto bytes = c.build();
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                                static_cast<std::streamsize>(bytes.size()));
    const auto f = GgufFile::open(path);
    const bool misaligned = reinterpret_cast<uintptr_t>(f.bytes("token_embd.weight").data()) % 4 != 0;
    tokpos_gguf* h = nullptr;
    ASSERT_EQ(tokpos_gguf_open(&h, path.c_str()), TOKPOS_OK) << tokpos_last_error();
    tokpos_gguf_tensor t{};
    ASSERT_EQ(tokpos_gguf_tensor_at(h, 0, &t), TOKPOS_OK);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.blocks.data) % 4, 0u);
    EXPECT_EQ(t.blocks.data != t.data, misaligned);
    EXPECT_EQ(0, std::memcmp(t.blocks.data, t.data, 32));
    std::vector<int64_t> ids{1, 0};
    std::vector<float> got(8, -7.0f), want(8);
    std::memcpy(want.data(), t.data, 32);
    tokpos::TensorView iv(ids.data(), tokpos::DType::kI64, {1, 2});
    tokpos::TensorView ov(got.data(), tokpos::DType::kF32, {1, 2, 4});
    ASSERT_EQ(tokpos_op_compose_forward_ggml(ov.get(), iv.get(), &t.blocks, 0, 4, nullptr, nullptr, 0), TOKPOS_OK)
        << tokpos_last_error();
    EXPECT_EQ(0, std::memcmp(got.data(), want.data() + 4, 16));
    EXPECT_EQ(0, std::memcmp(got.data() + 4, want.data(), 16));
    const char* data = nullptr;
    uint64_t length = 0;
    EXPECT_NE(tokpos_gguf_get_string(h, 3, -1, &data, &length), TOKPOS_OK);
    EXPECT_NE(std::string(tokpos_last_error()).find("'k\\xff\\x1b': "), std::string::npos) << tokpos_last_error();
    tokpos_gguf_free(h);
  }
  std::remove(path.c_str());
}

TEST(Gguf, TheBackwardOfABlockTableNamesItsTypeAndAsksForAFloatTable) {
  uint8_t block[34] = {};
  tokpos::TensorView blocks_view(block, tokpos::DType::kI32, {1, 34});
  DLTensor blocks = blocks_view;
  blocks.dtype = {kDLUInt, 8, 1};
  expect_error([&] { tokpos::ops::compose_backward_quantized({&blocks, 8, 32}); }, Status::kUnimplemented,
               {"d_token_table is a q8_0 table (ggml_type 8)", "the backward is defined for float tables only"});
  expect_error([&] { tokpos::ops::compose_backward_quantized({&blocks, 14, 256}, "tokpos_x"); },
               Status::kUnimplemented, {"tokpos_x: d_token_table is a q6_K table", "float tables only"});
}

}  // namespace
