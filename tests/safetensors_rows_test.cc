// SafetensorsFile::read_f32_rows: a row range of a table, read alone (the
// sharded load of tokpos.torch.VocabParallelEmbedding.from_safetensors),
// against the whole tensor read by read_f32, in both access modes.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "common/convert.h"
#include "expect_error.h"
#include "tokpos/error.h"
#include "tokpos/safetensors.h"

namespace {

using tokpos::SafetensorsFile;
using tokpos::Status;
using tokpos::testing::expect_error;

// A file with an F32 (5, 3), an F16 (5, 3), a BF16 (4, 2, 2), an I64 (2) and
// a 0-D F32 tensor, every value distinct.
std::string make_file(const std::string& name) {
  const std::string path = ::testing::TempDir() + name;
  std::vector<float> f32(15);
  std::vector<uint16_t> f16(15), bf16(16);
  std::vector<int64_t> i64 = {1, 2};
  float scalar = 7.5f;
  for (size_t k = 0; k < f32.size(); ++k) f32[k] = 0.25f * static_cast<float>(k) - 1.0f;
  for (size_t k = 0; k < f16.size(); ++k) f16[k] = tokpos::fp::to_f16(1.5f + static_cast<float>(k)).bits;
  for (size_t k = 0; k < bf16.size(); ++k) bf16[k] = tokpos::fp::to_bf16(-3.0f * static_cast<float>(k)).bits;
  tokpos::write_safetensors(path, {{"a", "F32", {5, 3}, f32.data(), f32.size() * 4},
                                   {"h", "F16", {5, 3}, f16.data(), f16.size() * 2},
                                   {"b", "BF16", {4, 2, 2}, bf16.data(), bf16.size() * 2},
                                   {"i", "I64", {2}, i64.data(), 16},
                                   {"s", "F32", {}, &scalar, 4}});
  return path;
}

class SafetensorsRows : public ::testing::TestWithParam<SafetensorsFile::Access> {};

TEST_P(SafetensorsRows, EveryRangeIsTheWholeTensorsRows) {
  const std::string path = make_file("rows.safetensors");
  const auto f = SafetensorsFile::open(path, GetParam());
  for (const auto& [name, rows, per_row] : {std::tuple{"a", 5, 3}, std::tuple{"h", 5, 3}, std::tuple{"b", 4, 4}}) {
    SCOPED_TRACE(name);
    const std::vector<float> whole = f.read_f32(name);
    for (int64_t begin = 0; begin <= rows; ++begin) {
      for (int64_t n = 0; begin + n <= rows; ++n) {
        std::vector<float> out(static_cast<size_t>(n * per_row), -99.0f);
        f.read_f32_rows(name, begin, n, out);
        for (size_t k = 0; k < out.size(); ++k) {
          EXPECT_EQ(out[k], whole[static_cast<size_t>(begin * per_row) + k]) << begin << " " << n << " " << k;
        }
      }
    }
  }
  ::unlink(path.c_str());
}

TEST_P(SafetensorsRows, BadRequestsAreRefusedAndTheOutputIsUntouched) {
  const std::string path = make_file("rows_bad.safetensors");
  const auto f = SafetensorsFile::open(path, GetParam());
  std::vector<float> out(6, -99.0f);
  expect_error([&] { f.read_f32_rows("a", 4, 2, out); }, Status::kInvalidArgument,
               {path, "2 rows from row 4 of tensor 'a'", "its 5 rows"});
  expect_error([&] { f.read_f32_rows("a", -1, 2, out); }, Status::kInvalidArgument, {"from row -1"});
  expect_error([&] { f.read_f32_rows("a", 0, -2, out); }, Status::kInvalidArgument, {"-2 rows"});
  expect_error([&] { f.read_f32_rows("a", 1, INT64_MAX, out); }, Status::kInvalidArgument, {"its 5 rows"});
  expect_error([&] { f.read_f32_rows("a", 0, 1, out); }, Status::kInvalidArgument,
               {"hold 3 numbers", "the output holds 6"});
  expect_error([&] { f.read_f32_rows("i", 0, 1, std::span<float>(out).first(1)); }, Status::kInvalidArgument,
               {"'i'", "I64"});
  expect_error([&] { f.read_f32_rows("s", 0, 1, std::span<float>(out).first(1)); }, Status::kInvalidArgument,
               {"'s'", "0-D"});
  expect_error([&] { f.read_f32_rows("nope", 0, 1, out); }, Status::kInvalidArgument, {"'nope'"});
  for (float v : out) EXPECT_EQ(v, -99.0f);
  ::unlink(path.c_str());
}

INSTANTIATE_TEST_SUITE_P(Access, SafetensorsRows,
                         ::testing::Values(SafetensorsFile::Access::kMap, SafetensorsFile::Access::kRead));

// Read with pread, a file cut short after it was opened is an Error naming
// the rows, never a signal; rows before the cut still read.
TEST(SafetensorsRowsRead, ATruncatedFileIsCorruptNotASignal) {
  const std::string path = make_file("rows_cut.safetensors");
  const auto f = SafetensorsFile::open(path, SafetensorsFile::Access::kRead);
  const auto& a = f.info("a");
  const std::vector<float> whole = f.read_f32("a");
  // Cut inside tensor 'a' (sorted first in the data area): row 2 onwards is gone.
  ASSERT_EQ(a.offset, 0u);
  const off_t data_begin = static_cast<off_t>(std::ifstream(path, std::ios::ate | std::ios::binary).tellg()) -
                           static_cast<off_t>(15 * 4 + 15 * 2 + 16 * 2 + 16 + 4);
  ASSERT_EQ(::truncate(path.c_str(), data_begin + 2 * 3 * 4), 0);
  std::vector<float> out(3);
  f.read_f32_rows("a", 1, 1, out);
  EXPECT_EQ(out[0], whole[3]);
  std::vector<float> two(6);
  expect_error([&] { f.read_f32_rows("a", 1, 2, two); }, Status::kCorruptFile,
               {path, "truncated while reading", "rows [1, 3) of tensor 'a'"});
  ::unlink(path.c_str());
}

}  // namespace
