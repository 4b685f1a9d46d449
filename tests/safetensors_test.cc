// safetensors reading, validation and atomic writing; the GPT-2 and BERT
// presets; checkpoints. Each kind of bad input has a crafted file under
// tests/data/safetensors (tools/make_bad_safetensors.py).
#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <new>
#include <string>
#include <vector>

#include "kernels/kernels.h"
#include "test_util.h"
#include "tokpos/checkpoint.h"
#include "tokpos/composer.h"
#include "tokpos/error.h"
#include "tokpos/presets.h"
#include "tokpos/safetensors.h"
#include "expect_error.h"
#include "replaced_new.h"

namespace {

std::string data(const std::string& name) {
  return std::string(TOKPOS_TEST_DATA) + "/safetensors/" + name;
}
std::string scratch(const std::string& name) {
  return ::testing::TempDir() + name;
}

using tokpos::testing::expect_error;

// A damaged file is kCorruptFile, and the message names the file and what is wrong.
void expect_open_error(const std::string& file, std::initializer_list<std::string> pieces) {
  SCOPED_TRACE(file);
  try {
    tokpos::SafetensorsFile::open(data(file));
    ADD_FAILURE() << file << ": no error";
  } catch (const tokpos::Error& e) {
    EXPECT_EQ(e.status(), tokpos::Status::kCorruptFile) << e.what();
    EXPECT_NE(std::string(e.what()).find(data(file)), std::string::npos) << e.what();
    for (const auto& p : pieces) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
}

TEST(Safetensors, EveryKindOfDamageHasANamedError) {
  expect_open_error("truncated.safetensors", {"tensor 'w'", "outside the data area"});
  expect_open_error("too_short.safetensors", {"truncated", "8-byte header length"});
  expect_open_error("header_past_end.safetensors", {"header length 4096 runs past the end"});
  expect_open_error("unknown_dtype.safetensors", {"unknown dtype 'F99'"});
  expect_open_error("shape_mismatch.safetensors", {"tensor 'w' shape needs 6 x 4 bytes", "holds 16"});
  expect_open_error("overlap.safetensors", {"overlap"});
  expect_open_error("duplicate_name.safetensors", {"'w' appears twice"});
  expect_open_error("not_json.safetensors", {"not valid JSON"});
}

// Crafted here rather than kept as files: the header is the given text.
TEST(Safetensors, MalformedHeadersAreCorruptFiles) {
  const auto path = scratch("crafted.safetensors");
  auto craft = [&](const std::string& header, size_t data_bytes) {
    std::string len(8, '\0');
    for (int i = 0; i < 8; ++i) len[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
    std::ofstream(path, std::ios::binary) << len << header << std::string(data_bytes, '\0');
  };
  auto open = [&] { tokpos::SafetensorsFile::open(path); };
  craft("[1, 2]", 0);
  expect_error(open, tokpos::Status::kCorruptFile, {path, "not a JSON object"});
  craft(R"({"w": {"dtype": "F32", "shape": [2]}})", 8);
  expect_error(open, tokpos::Status::kCorruptFile, {"tensor 'w' needs dtype"});
  craft(R"({"w": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}})", 8);
  expect_error(open, tokpos::Status::kCorruptFile, {"tensor 'w' has a bad shape entry"});
  craft(R"({"w": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 8]}})", 8);
  expect_error(open, tokpos::Status::kCorruptFile, {"tensor 'w' shape overflows"});
  // The product of the non-zero entries must fit int64, even when a zero
  // entry makes the whole product 0: 2^62 x 3 overflows it.
  craft(R"({"w": {"dtype": "F32", "shape": [4611686018427387904, 3, 0], "data_offsets": [0, 0]}})", 0);
  expect_error(open, tokpos::Status::kCorruptFile, {path, "tensor 'w' shape overflows"});
  craft(R"({"w": {"dtype": "F32", "shape": [0, 4611686018427387904, 3], "data_offsets": [0, 0]}})", 0);
  expect_error(open, tokpos::Status::kCorruptFile, {path, "tensor 'w' shape overflows"});
  // An entry above INT64_MAX is refused, not cast to a negative size.
  craft(R"({"w": {"dtype": "F32", "shape": [9223372036854775808, 0], "data_offsets": [0, 0]}})", 0);
  expect_error(open, tokpos::Status::kCorruptFile, {path, "tensor 'w' has shape entry 9223372036854775808"});
  // At the limit it is a valid, empty tensor.
  craft(R"({"w": {"dtype": "F32", "shape": [9223372036854775807, 0], "data_offsets": [0, 0]}})", 0);
  EXPECT_EQ(tokpos::SafetensorsFile::open(path).info("w").numel(), 0);
  craft(R"({"__metadata__": {"n": 3}})", 0);
  expect_error(open, tokpos::Status::kCorruptFile, {"metadata 'n' is not a string"});
}

// A file that cannot be opened is an I/O error naming the path and errno's text.
TEST(Safetensors, UnreadableFilesAreIoErrors) {
  const auto missing = data("no-such-file.safetensors");
  expect_error([&] { tokpos::SafetensorsFile::open(missing); }, tokpos::Status::kIoError,
               {"safetensors: cannot open " + missing, std::strerror(ENOENT)});
  const auto dir = scratch("a_directory.safetensors");
  ::mkdir(dir.c_str(), 0755);
  expect_error([&] { tokpos::SafetensorsFile::open(dir); }, tokpos::Status::kIoError,
               {"cannot open " + dir, std::strerror(EISDIR)});
}

// Not a regular file: refused by name, and a FIFO is refused at once rather
// than waiting for a writer. The open runs in a child process under alarm(),
// so a regression (a hang) fails the test instead of hanging it.
TEST(Safetensors, NonRegularFilesAreRefusedByName) {
  const auto dir = scratch("not_regular_dir.safetensors");
  ::mkdir(dir.c_str(), 0755);
  for (const auto access : {tokpos::SafetensorsFile::Access::kMap, tokpos::SafetensorsFile::Access::kRead}) {
    expect_error([&] { tokpos::SafetensorsFile::open(dir, access); }, tokpos::Status::kIoError,
                 {"cannot open " + dir, std::strerror(EISDIR), "a directory, not a regular file"});
    expect_error([&] { tokpos::SafetensorsFile::open("/dev/zero", access); }, tokpos::Status::kIoError,
                 {"cannot open /dev/zero: it is a character device, not a regular file"});
  }
  const auto fifo = scratch("a_fifo.safetensors");
  ::unlink(fifo.c_str());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0) << std::strerror(errno);
  for (const auto access : {tokpos::SafetensorsFile::Access::kMap, tokpos::SafetensorsFile::Access::kRead}) {
    EXPECT_EXIT(
        {
          ::alarm(5);
          try {
            tokpos::SafetensorsFile::open(fifo, access);
          } catch (const tokpos::Error& e) {
            std::fprintf(stderr, "%s\n", e.what());
            std::_Exit(e.status() == tokpos::Status::kIoError ? 0 : 1);
          }
          std::_Exit(2);
        },
        ::testing::ExitedWithCode(0), "cannot open .*a_fifo.safetensors: it is a FIFO, not a regular file");
  }
  ::unlink(fifo.c_str());
}

// Access::kRead: a file truncated between opening and reading a tensor is a
// named error, never SIGBUS (a mapped file would deliver it). Run in a child
// so that a regression is a failed test, not a dead test binary.
TEST(Safetensors, ReadModeTruncatedWhileOpenIsANamedError) {
  std::vector<float> a(16, 1.5f), b(4096, -2.0f);
  const auto path = scratch("truncated_while_open.safetensors");
  tokpos::write_safetensors(path, {{"a", "F32", {16}, a.data(), a.size() * 4},
                                   {"b", "F32", {64, 64}, b.data(), b.size() * 4}});
  {
    const auto file = tokpos::SafetensorsFile::open(path, tokpos::SafetensorsFile::Access::kRead);
    EXPECT_EQ(file.access(), tokpos::SafetensorsFile::Access::kRead);
    EXPECT_EQ(file.read_f32("b"), b);
    EXPECT_EQ(file.read_bytes("a").size(), 64u);
    // The zero-copy accessors need the mapping.
    expect_error([&] { file.view_f32("a"); }, tokpos::Status::kInvalidArgument, {"Access::kRead", "read_f32"});
    expect_error([&] { file.bytes("a"); }, tokpos::Status::kInvalidArgument, {"Access::kRead"});
  }
  EXPECT_EXIT(
      {
        const auto file = tokpos::SafetensorsFile::open(path, tokpos::SafetensorsFile::Access::kRead);
        if (::truncate(path.c_str(), 1000) != 0) std::_Exit(3);
        if (file.read_f32("a") != a) std::_Exit(4);  // still inside the file
        try {
          file.read_f32("b");
        } catch (const tokpos::Error& e) {
          std::fprintf(stderr, "%s\n", e.what());
          std::_Exit(e.status() == tokpos::Status::kCorruptFile ? 0 : 1);
        }
        std::_Exit(2);
      },
      ::testing::ExitedWithCode(0),
      "truncated_while_open.safetensors: truncated while reading: tensor 'b' needs bytes .* which now ends at 1000");
  // Truncated before the header is read: the header is checked against the size found at open.
  tokpos::write_safetensors(path, {{"a", "F32", {16}, a.data(), a.size() * 4}});
  ::truncate(path.c_str(), 20);
  expect_error([&] { tokpos::SafetensorsFile::open(path, tokpos::SafetensorsFile::Access::kRead); },
               tokpos::Status::kCorruptFile, {path, "runs past the end of the file"});
}

// The header parse is O(n log n): 100k tensors open (the old callback parser
// took minutes), and a duplicate name among them is still found.
TEST(Safetensors, HundredThousandTensorsParseAndDuplicatesAreFound) {
  constexpr int kN = 100000;
  const auto path = scratch("many_tensors.safetensors");
  auto craft = [&](int duplicate_of) {
    std::string h = "{\"__metadata__\":{\"format\":\"pt\"}";
    for (int i = 0; i < kN; ++i) {
      const int id = (i == kN - 1 && duplicate_of >= 0) ? duplicate_of : i;
      h += ",\"layer." + std::to_string(id) + ".weight\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[" +
           std::to_string(4 * i) + "," + std::to_string(4 * i + 4) + "]}";
    }
    h += "}";
    std::string len(8, '\0');
    for (int i = 0; i < 8; ++i) len[i] = static_cast<char>((h.size() >> (8 * i)) & 0xff);
    std::ofstream(path, std::ios::binary) << len << h << std::string(4 * static_cast<size_t>(kN), '\0');
  };
  craft(-1);
  for (const auto access : {tokpos::SafetensorsFile::Access::kMap, tokpos::SafetensorsFile::Access::kRead}) {
    const auto file = tokpos::SafetensorsFile::open(path, access);
    EXPECT_EQ(file.names().size(), static_cast<size_t>(kN));
    EXPECT_EQ(file.info("layer.99999.weight").offset, 4u * 99999);
    EXPECT_EQ(file.metadata().at("format"), "pt");
  }
  craft(12345);
  expect_error([&] { tokpos::SafetensorsFile::open(path); }, tokpos::Status::kCorruptFile,
               {path, "tensor name 'layer.12345.weight' appears twice"});
  // And writing as many is not quadratic either.
  std::vector<tokpos::TensorRef> refs;
  const float one = 1.0f;
  for (int i = 0; i < kN; ++i) refs.push_back({"w" + std::to_string(i), "F32", {1}, &one, 4});
  tokpos::write_safetensors(path, refs, {{"format", "pt"}});
  const auto file = tokpos::SafetensorsFile::open(path);
  EXPECT_EQ(file.names().size(), static_cast<size_t>(kN));
  EXPECT_EQ(file.read_f32("w77777"), std::vector<float>{1.0f});
}

TEST(Safetensors, RoundTripAllDtypesAndZeroCopyViews) {
  const std::vector<float> f = {1.5f, -2.0f, 0.25f, 8.0f, 3.0f, -0.5f};
  const std::vector<uint16_t> h = {0x3c00, 0xc000};   // f16 1.0, -2.0
  const std::vector<uint16_t> bf = {0x3f80, 0x4040};  // bf16 1.0, 3.0
  const std::vector<int64_t> ids = {0, 1, 2};
  const auto path = scratch("rt.safetensors");
  tokpos::write_safetensors(path,
                            {{"b.f32", "F32", {2, 3}, f.data(), 24},
                             {"a.f16", "F16", {2}, h.data(), 4},
                             {"c.bf16", "BF16", {2}, bf.data(), 4},
                             {"d.ids", "I64", {3}, ids.data(), 24}},
                            {{"format", "pt"}});
  const auto file = tokpos::SafetensorsFile::open(path);
  EXPECT_EQ(file.names(), (std::vector<std::string>{"a.f16", "b.f32", "c.bf16", "d.ids"}));
  EXPECT_EQ(file.metadata().at("format"), "pt");
  EXPECT_EQ(file.info("b.f32").shape, (std::vector<int64_t>{2, 3}));
  const auto view = file.view_f32("b.f32");
  EXPECT_EQ(std::vector<float>(view.begin(), view.end()), f);
  EXPECT_EQ(file.read_f32("a.f16"), (std::vector<float>{1.0f, -2.0f}));
  EXPECT_EQ(file.read_f32("c.bf16"), (std::vector<float>{1.0f, 3.0f}));
  // Asking a good file for what it does not hold is the caller's error, not a damaged file.
  expect_error([&] { file.read_f32("d.ids"); }, tokpos::Status::kInvalidArgument,
               {"tables must be F32, F16 or BF16"});
  expect_error([&] { file.view_f32("a.f16"); }, tokpos::Status::kInvalidArgument, {"is F16, not F32"});
  // Zero-copy: the view points into the mapped bytes.
  EXPECT_EQ(static_cast<const void*>(view.data()), static_cast<const void*>(file.bytes("b.f32").data()));
  // Reading a missing tensor names it.
  expect_error([&] { file.info("missing"); }, tokpos::Status::kInvalidArgument, {"no tensor named 'missing'"});
}

TEST(Safetensors, FailedWritesLeaveThePreviousFileIntact) {
  const auto path = scratch("keep.safetensors");
  const std::vector<float> v = {1, 2};
  tokpos::write_safetensors(path, {{"x", "F32", {2}, v.data(), 8}});
  // Bad requests fail before touching the file.
  expect_error([&] { tokpos::write_safetensors(path, {{"x", "F32", {3}, v.data(), 8}}); },
               tokpos::Status::kShapeMismatch, {"shape needs 12 bytes, given 8"});
  expect_error(
      [&] {
        tokpos::write_safetensors(path, {{"x", "F32", {2}, v.data(), 8}, {"x", "F32", {2}, v.data(), 8}});
      },
      tokpos::Status::kInvalidArgument, {"given twice"});
  expect_error([&] { tokpos::write_safetensors(path, {{"x", "Q7", {2}, v.data(), 8}}); },
               tokpos::Status::kInvalidArgument, {"unknown dtype 'Q7'"});
  // A failure during the write itself: the target is a directory, so the rename fails.
  const auto dir = scratch("is_a_dir.safetensors");
  ::mkdir(dir.c_str(), 0755);
  std::ofstream(dir + "/occupied") << "x";
  expect_error([&] { tokpos::write_safetensors(dir, {{"x", "F32", {2}, v.data(), 8}}); },
               tokpos::Status::kIoError, {"cannot rename", dir});
  const auto file = tokpos::SafetensorsFile::open(path);
  EXPECT_EQ(file.read_f32("x"), v);
}

TEST(Presets, Gpt2FromATinyCheckpoint) {
  const auto file = tokpos::SafetensorsFile::open(data("tiny_gpt2.safetensors"));
  auto model = tokpos::gpt2_from_safetensors(file);
  EXPECT_EQ(model.token().vocab_size(), 5);
  EXPECT_EQ(model.position().max_context(), 3);
  const auto out = model.forward(std::vector<int64_t>{4, 0}, 1, 2);
  for (int64_t d = 0; d < 4; ++d) {
    EXPECT_EQ(out[d], (16 + d) / 64.0f + (-d / 32.0f));     // wte[4] + wpe[0]
    EXPECT_EQ(out[4 + d], d / 64.0f + (-(4 + d) / 32.0f));  // wte[0] + wpe[1]
  }
  // The tied head: logits = h . wte^T.
  const auto logits = model.token().logits(std::span(out).first(4), 1);
  double want = 0;
  for (int64_t d = 0; d < 4; ++d) want += static_cast<double>(out[d]) * ((8 + d) / 64.0);
  EXPECT_NEAR(logits[2], want, 1e-6);
  // Missing and mis-shaped tensors are named: the file is sound, it just does not fit the preset.
  expect_error(
      [&] { tokpos::gpt2_from_safetensors(tokpos::SafetensorsFile::open(data("gpt2_bad_width.safetensors"))); },
      tokpos::Status::kShapeMismatch, {"'wpe.weight' has shape [3, 3] but the gpt2 preset needs [rows, 4]"});
  expect_error([&] { tokpos::bert_from_safetensors(file); }, tokpos::Status::kInvalidArgument,
               {"missing tensor 'embeddings.word_embeddings.weight'"});
  expect_error([&] { tokpos::gpt2_from_safetensors(file, {{"wte", "nope"}}); }, tokpos::Status::kInvalidArgument,
               {"missing tensor 'nope'"});
}

// The name a preset reads for a role: the default, the default with a prefix,
// or the override; a role the preset lacks is named with the preset's roles.
TEST(Presets, TensorNamesResolveAsTheLoadersReadThem) {
  const auto file = tokpos::SafetensorsFile::open(data("tiny_gpt2.safetensors"));
  EXPECT_EQ(tokpos::preset_tensor_name(file, "gpt2", "wpe"), "wpe.weight");
  EXPECT_EQ(tokpos::preset_tensor_name(file, "gpt2", "wte", {{"wte", "wpe.weight"}}), "wpe.weight");
  const auto path = scratch("preset_prefixed.safetensors");
  const std::vector<float> v(6, 0.5f);
  tokpos::write_safetensors(path, {{"transformer.wpe.weight", "F32", {3, 2}, v.data(), 24}});
  EXPECT_EQ(tokpos::preset_tensor_name(tokpos::SafetensorsFile::open(path), "gpt2", "wpe"), "transformer.wpe.weight");
  expect_error([&] { (void)tokpos::preset_tensor_name(file, "gpt2", "position"); }, tokpos::Status::kInvalidArgument,
               {"'position' is not a role of the 'gpt2' preset", "gpt2: wte, wpe"});
  expect_error([&] { (void)tokpos::preset_tensor_name(file, "bert", "position"); }, tokpos::Status::kInvalidArgument,
               {"missing tensor 'embeddings.position_embeddings.weight'"});
}

// A path: the presets read every table with pread (owned copies, no mapping),
// so the file may change afterwards; the mapped file's presets still borrow.
TEST(Presets, FromAPathReadCopiesAndNeverMap) {
  const auto path = scratch("preset_from_path.safetensors");
  {
    const auto file = tokpos::SafetensorsFile::open(data("tiny_gpt2.safetensors"));
    const auto wte = file.read_f32("wte.weight"), wpe = file.read_f32("wpe.weight");
    tokpos::write_safetensors(path, {{"wte.weight", "F32", file.info("wte.weight").shape, wte.data(), wte.size() * 4},
                                     {"wpe.weight", "F32", file.info("wpe.weight").shape, wpe.data(), wpe.size() * 4}});
  }
  auto mapped = tokpos::gpt2_from_safetensors(tokpos::SafetensorsFile::open(path));
  EXPECT_TRUE(mapped.token().borrowed());
  const auto model = tokpos::gpt2_from_safetensors(path);
  EXPECT_FALSE(model.token().borrowed());
  EXPECT_FALSE(model.position().borrowed());
  const std::vector<int64_t> ids = {4, 0, 2};
  const auto want = mapped.forward(ids, 1, 3);
  ::truncate(path.c_str(), 0);  // the copies do not care
  EXPECT_EQ(model.forward(ids, 1, 3), want);
  const auto bert = tokpos::bert_from_safetensors(data("tiny_bert.safetensors"));
  EXPECT_FALSE(bert.token().borrowed());
  EXPECT_EQ(bert.forward(std::vector<int64_t>{5, 0, 3}, 1, 3),
            tokpos::bert_from_safetensors(tokpos::SafetensorsFile::open(data("tiny_bert.safetensors")))
                .forward(std::vector<int64_t>{5, 0, 3}, 1, 3));
  expect_error([&] { tokpos::gpt2_from_safetensors(path); }, tokpos::Status::kCorruptFile, {path, "truncated"});
}

TEST(Presets, Gpt2PositionIdsForLeftPaddedBatches) {
  // Two rows, the first left-padded by two: positions restart at the first real token, pads read 1.
  const std::vector<int64_t> mask = {0, 0, 1, 1, 1,  //
                                     1, 1, 1, 1, 1};
  EXPECT_EQ(tokpos::gpt2_position_ids(mask, 2, 5, 0), (std::vector<int64_t>{1, 1, 0, 1, 2, 0, 1, 2, 3, 4}));
  // Decoding one new token after 4 cached ones: the mask covers past + current.
  EXPECT_EQ(tokpos::gpt2_position_ids(mask, 2, 1, 4), (std::vector<int64_t>{2, 4}));
  EXPECT_THROW(tokpos::gpt2_position_ids(std::vector<int64_t>{0, 2}, 1, 2, 0), tokpos::Error);
  EXPECT_THROW(tokpos::gpt2_position_ids(mask, 2, 4, 0), tokpos::Error);  // wrong mask size
}

TEST(Presets, BertSumsInTransformersOrderThenLayerNorms) {
  const auto file = tokpos::SafetensorsFile::open(data("tiny_bert.safetensors"));  // names carry "bert."
  auto model = tokpos::bert_from_safetensors(file, 1e-12);
  const std::vector<int64_t> ids = {5, 0, 3}, types = {0, 1, 1};
  const auto word = file.read_f32("bert.embeddings.word_embeddings.weight");
  const auto pos = file.read_f32("bert.embeddings.position_embeddings.weight");
  const auto ty = file.read_f32("bert.embeddings.token_type_embeddings.weight");
  const auto g = file.read_f32("bert.embeddings.LayerNorm.weight"),
             b = file.read_f32("bert.embeddings.LayerNorm.bias");
  const auto sum = model.forward(ids, 1, 3, {.token_type_ids = types, .layer_norm = false});
  const auto out = model.forward(ids, 1, 3, {.token_type_ids = types});
  for (int64_t t = 0; t < 3; ++t) {
    double mean = 0, var = 0;
    for (int64_t d = 0; d < 4; ++d) {
      const float x = (word[ids[t] * 4 + d] + ty[types[t] * 4 + d]) + pos[t * 4 + d];
      EXPECT_EQ(sum[t * 4 + d], x);
      mean += x / 4.0;
    }
    for (int64_t d = 0; d < 4; ++d) var += (sum[t * 4 + d] - mean) * (sum[t * 4 + d] - mean) / 4.0;
    for (int64_t d = 0; d < 4; ++d)
      EXPECT_NEAR(out[t * 4 + d], (sum[t * 4 + d] - mean) / std::sqrt(var + 1e-12) * g[d] + b[d], 1e-6);
  }
  // Default token types are 0; a type id past the table is an error; positions start at 0.
  const auto zero_types = model.forward(ids, 1, 3, {.layer_norm = false});
  EXPECT_EQ(zero_types[0], (word[5 * 4] + ty[0]) + pos[0]);
  EXPECT_THROW(model.forward(ids, 1, 3, {.token_type_ids = std::vector<int64_t>{0, 2, 0}}), tokpos::Error);
  EXPECT_THROW(model.backward(sum, ids, 1, 3), tokpos::Error);  // no backward through the fused LayerNorm
}

TEST(Presets, TypedKernelMatchesReferenceAcrossThreads) {
  const int64_t V = 300, D = 96, L = 600, B = 3, T = 500, N = B * T;
  const auto tok = tokpos::testing::noise(V * D, 1), pos = tokpos::testing::noise(L * D, 2),
             types = tokpos::testing::noise(2 * D, 3), gamma = tokpos::testing::noise(D, 4),
             beta = tokpos::testing::noise(D, 5);
  const auto ids = tokpos::testing::ids_mod(N, V, 6), tids = tokpos::testing::ids_mod(N, 2, 7);
  namespace kn = tokpos::kernels;
  using tokpos::DType;
  std::vector<float> a(N * D), b(N * D);
  kn::TypedGather tg;
  tg.g.out = {a.data(), DType::kF32, T * D, D};
  tg.g.ids = kn::Index::contiguous(ids.data(), T);
  tg.g.V = V, tg.g.unk_id = 0;
  tg.g.tok = {tok.data(), DType::kF32, D};
  tg.g.pos = {pos.data(), DType::kF32, D};
  tg.g.B = B, tg.g.T = T, tg.g.D = D;
  tg.type_ids = kn::Index::contiguous(tids.data(), T);
  tg.types = {types.data(), DType::kF32, D};
  tg.type_rows = 2;
  tg.gamma = gamma.data(), tg.beta = beta.data(), tg.eps = 1e-5;
  kn::reference_kernels().compose_typed(tg, kn::Exec{});
  tg.g.out.data = b.data();
  for (const int threads : {1, 4}) {
    std::fill(b.begin(), b.end(), -1.0f);
    kn::cpu_kernels().compose_typed(tg, {.threads = threads});
    EXPECT_TRUE(tokpos::testing::bitwise_equal(a, b)) << threads << " threads";
  }
}

TEST(Checkpoint, SaveAndLoadParametersAndGradients) {
  auto make = [](uint64_t seed) {
    return tokpos::EmbeddingComposer(
        tokpos::TokenEmbedding({.vocab_size = 40, .dim = 6, .seed = seed}),
        std::make_unique<tokpos::LearnedPositionalEmbedding>(
            tokpos::LearnedPositionalOptions{.max_context = 10, .dim = 6, .seed = seed}));
  };
  auto a = make(1);
  a.backward(tokpos::testing::noise(4 * 6, 8), std::vector<int64_t>{1, 2, 3, 1}, 1, 4);
  const auto path = scratch("ckpt.safetensors");
  tokpos::save_checkpoint(path, a, true);
  auto b = make(2);
  tokpos::load_checkpoint(path, b, true);
  auto eq = [](std::span<const float> x, std::span<const float> y) {
    return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size_bytes()) == 0;
  };
  EXPECT_TRUE(eq(a.token().table(), b.token().table()));
  EXPECT_TRUE(eq(a.position().table(), b.position().table()));
  EXPECT_TRUE(eq(a.token().grad(), b.token().grad()));
  EXPECT_TRUE(eq(a.position().grad(), b.position().grad()));
  // A checkpoint of another shape is refused, and the model is left as it was.
  auto c = tokpos::EmbeddingComposer(
      tokpos::TokenEmbedding({.vocab_size = 41, .dim = 6, .seed = 3}),
      std::make_unique<tokpos::LearnedPositionalEmbedding>(
          tokpos::LearnedPositionalOptions{.max_context = 10, .dim = 6, .seed = 3}));
  const std::vector<float> before(c.position().table().begin(), c.position().table().end());
  expect_error([&] { tokpos::load_checkpoint(path, c); }, tokpos::Status::kShapeMismatch,
               {"tensor 'token.weight'", "the model needs 246"});
  EXPECT_TRUE(eq(c.position().table(), before));
  // A checkpoint without the gradients the caller asks for: a missing tensor.
  tokpos::save_checkpoint(path, a);
  expect_error([&] { tokpos::load_checkpoint(path, b, true); }, tokpos::Status::kInvalidArgument,
               {"missing tensor 'token.grad'"});
}

// Checkpoints that cannot be written or read, or are damaged: their own
// statuses, and the model is left as it was.
TEST(Checkpoint, FileErrorsAreIoErrorsAndCorruptFiles) {
  tokpos::TokenEmbedding m({.vocab_size = 6, .dim = 2, .seed = 7});
  const std::vector<float> before(m.table().begin(), m.table().end());
  const std::string nowhere = "/nonexistent-dir-tokpos/ckpt.safetensors";
  expect_error([&] { tokpos::save_checkpoint(nowhere, m); }, tokpos::Status::kIoError,
               {"cannot write " + nowhere, std::strerror(ENOENT)});
  expect_error([&] { tokpos::load_checkpoint(nowhere, m); }, tokpos::Status::kIoError,
               {"cannot open " + nowhere, std::strerror(ENOENT)});
  expect_error([&] { tokpos::load_checkpoint(data("truncated.safetensors"), m); }, tokpos::Status::kCorruptFile,
               {"outside the data area"});
  EXPECT_TRUE(std::equal(before.begin(), before.end(), m.table().begin()));
}

TEST(Checkpoint, SingleModulesToo) {
  tokpos::TokenEmbedding a({.vocab_size = 12, .dim = 3, .seed = 4}),
      b({.vocab_size = 12, .dim = 3, .seed = 5});
  a.backward(tokpos::testing::noise(2 * 3, 9), std::vector<int64_t>{3, 7}, 1, 2);
  const auto path = scratch("token.safetensors");
  tokpos::save_checkpoint(path, a, true);
  tokpos::load_checkpoint(path, b, true);
  EXPECT_TRUE(std::equal(a.table().begin(), a.table().end(), b.table().begin()));
  EXPECT_TRUE(std::equal(a.grad().begin(), a.grad().end(), b.grad().begin()));
  tokpos::LearnedPositionalEmbedding p({.max_context = 8, .dim = 3, .seed = 1}),
      q({.max_context = 9, .dim = 3});
  tokpos::save_checkpoint(path, p);
  EXPECT_THROW(tokpos::load_checkpoint(path, q), tokpos::Error);  // 8 rows into 9
}

// The writer refuses a shape whose element or byte count overflows, naming
// the file, instead of recording a shape whose wrapped byte count happens to
// equal the bytes given: 2^62 eight-byte elements are 2^65 bytes, 0 wrapped.
TEST(Safetensors, WriterRefusesAShapeWhoseCountOverflows) {
  const auto path = scratch("wrapping_shape.safetensors");
  ::unlink(path.c_str());
  const double dummy = 0.0;
  auto write = [&](std::vector<int64_t> shape) {
    tokpos::write_safetensors(path, {{"w", "F64", std::move(shape), &dummy, 0}});
  };
  expect_error([&] { write({int64_t{1} << 62}); }, tokpos::Status::kSizeOverflow,
               {"write_safetensors", path, "tensor 'w'", "overflows"});
  expect_error([&] { write({int64_t{1} << 62, 3, 0}); }, tokpos::Status::kSizeOverflow, {path, "tensor 'w'"});
  struct stat st {};
  EXPECT_NE(::stat(path.c_str(), &st), 0) << "no file is written";
  write({int64_t{1} << 40, 0});  // a zero entry with a representable rest: an empty tensor
  EXPECT_EQ(tokpos::SafetensorsFile::open(path).info("w").numel(), 0);
}

}  // namespace

// ---- Out of memory at each allocation -----------------------------------------

// nlohmann::json's destructor allocates (and terminates on bad_alloc), so a
// sweep through a parsed header counts only allocations larger than the
// header's (t_min_bytes, replaced_new.h).
using tokpos::testing::t_count;
using tokpos::testing::t_fail_at;
using tokpos::testing::t_min_bytes;

namespace {

// Runs f with the n-th allocation of at least min_bytes failing, for n = 1,
// 2, ... until f completes or throws tokpos::Error; after each bad_alloc
// calls check(n). Returns the number of such allocations f made.
template <typename F, typename Check>
long fail_each_allocation(F&& f, Check&& check, std::size_t min_bytes = 0) {
  t_min_bytes = min_bytes;
  for (long n = 1; n < 100000; ++n) {
    bool done = false;
    t_count = 0;
    t_fail_at = n;
    try {
      f();
      done = true;
    } catch (const std::bad_alloc&) {
    } catch (const tokpos::Error&) {
      done = true;
    } catch (...) {
      t_fail_at = 0;
      throw;
    }
    t_fail_at = 0;
    if (done) return n - 1;
    check(n);
  }
  ADD_FAILURE() << "never completed";
  return 0;
}

int open_descriptors() {
  int n = 0;
  DIR* d = ::opendir("/proc/self/fd");
  if (d == nullptr) return -1;
  while (const dirent* e = ::readdir(d)) n += e->d_name[0] != '.';
  ::closedir(d);
  return n;
}

// A bad_alloc in open closes the file: no descriptor leaks. The file is
// too short to parse (the JSON parser's destructor cannot take a bad_alloc):
// open allocates around opening it and fails on its size.
TEST(Safetensors, OpenOutOfMemoryLeaksNoDescriptor) {
  if (open_descriptors() < 0) GTEST_SKIP() << "no /proc/self/fd";
  const auto path = data("too_short.safetensors");
  for (const auto access : {tokpos::SafetensorsFile::Access::kMap, tokpos::SafetensorsFile::Access::kRead}) {
    const int before = open_descriptors();
    const long made = fail_each_allocation([&] { tokpos::SafetensorsFile::open(path, access); },
                                           [&](long n) {
                                             EXPECT_EQ(open_descriptors(), before)
                                                 << "a descriptor leaked when allocation " << n << " failed";
                                           });
    EXPECT_GT(made, 0);
    EXPECT_EQ(open_descriptors(), before);
  }
}

// load_checkpoint makes every allocation before it changes the model: a
// bad_alloc at any of them leaves every module as it was, borrowed tables
// still borrowed, not some switched to owned copies before a later one failed.
TEST(Checkpoint, LoadOutOfMemoryChangesNothing) {
  const int64_t V = 1000, L = 512, D = 16;  // tables of 64000 and 32768 bytes
  const auto tok = tokpos::testing::noise(V * D, 41), pos = tokpos::testing::noise(L * D, 42);
  auto model = [&] {
    return tokpos::EmbeddingComposer(
        tokpos::TokenEmbedding::borrow(tok, {.vocab_size = V, .dim = D}),
        std::make_unique<tokpos::LearnedPositionalEmbedding>(
            tokpos::LearnedPositionalEmbedding::borrow(pos, {.max_context = L, .dim = D})));
  };
  const auto path = scratch("oom_ckpt.safetensors");
  auto saved = tokpos::EmbeddingComposer(
      tokpos::TokenEmbedding({.vocab_size = V, .dim = D, .seed = 5}),
      std::make_unique<tokpos::LearnedPositionalEmbedding>(
          tokpos::LearnedPositionalOptions{.max_context = L, .dim = D, .seed = 6}));
  saved.backward(tokpos::testing::noise(2 * D, 43), std::vector<int64_t>{3, 4}, 1, 2);
  tokpos::save_checkpoint(path, saved, true);
  auto same = [](std::span<const float> a, std::span<const float> b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size_bytes()) == 0;
  };
  for (const bool grads : {false, true}) {
    SCOPED_TRACE(grads ? "with gradients" : "parameters");
    auto m = model();
    const long made = fail_each_allocation([&] { tokpos::load_checkpoint(path, m, grads); },
                                           [&](long n) {
                                             SCOPED_TRACE(n);
                                             EXPECT_TRUE(m.token().borrowed());
                                             EXPECT_TRUE(m.position().borrowed());
                                             EXPECT_EQ(m.token().table().data(), tok.data());
                                             EXPECT_EQ(m.position().table().data(), pos.data());
                                             EXPECT_TRUE(m.token().grad().empty());  // none allocated either
                                             EXPECT_TRUE(m.position().grad().empty());
                                           },
                                           std::size_t{16384});  // the tables' allocations, not the header's
    EXPECT_GT(made, 0);
    EXPECT_FALSE(m.token().borrowed());
    EXPECT_FALSE(m.position().borrowed());
    EXPECT_TRUE(same(m.token().table(), saved.token().table()));
    EXPECT_TRUE(same(m.position().table(), saved.position().table()));
    EXPECT_EQ(m.token().grad().empty(), !grads);
    if (grads) {
      EXPECT_TRUE(same(m.token().grad(), saved.token().grad()));
      EXPECT_TRUE(same(m.position().grad(), saved.position().grad()));
    }
  }
}

}  // namespace
