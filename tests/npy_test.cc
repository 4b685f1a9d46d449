#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "tokpos/error.h"
#include "tokpos/npy.h"

namespace {

std::string scratch(const char* name) {
  return ::testing::TempDir() + name;
}

TEST(Npy, RoundTrip) {
  const std::vector<float> v = {1.5f, -2.0f, 3.25f, 0.0f, 7.0f, 8.0f};
  const auto path = scratch("tokpos_rt.npy");
  tokpos::write_npy(path, "<f4", {2, 3}, v.data(), v.size() * 4);
  const auto a = tokpos::read_npy(path);
  EXPECT_EQ(a.descr, "<f4");
  EXPECT_EQ(a.shape, (std::vector<int64_t>{2, 3}));
  ASSERT_EQ(a.data.size(), 24u);
  EXPECT_EQ(std::memcmp(a.data.data(), v.data(), 24), 0);
  // The header is 64-byte aligned, as NumPy writes it.
  std::ifstream in(path, std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ((all.size() - 24) % 64, 0u);
}

TEST(Npy, FailedWriteKeepsThePreviousFile) {
  const auto path = scratch("tokpos_keep.npy");
  const std::vector<float> v = {1, 2, 3};
  tokpos::write_npy(path, "<f4", {3}, v.data(), 12);
  EXPECT_THROW(tokpos::write_npy(path, "<f4", {4}, v.data(), 12),
               tokpos::Error);  // bytes disagree with shape
  // A directory where the file should go: the rename fails, nothing is left behind.
  const auto dir = scratch("tokpos_dir.npy");
  ::mkdir(dir.c_str(), 0755);
  const std::string sub = dir + "/x";
  std::ofstream(sub) << "x";
  EXPECT_THROW(tokpos::write_npy(dir, "<f4", {3}, v.data(), 12), tokpos::Error);
  EXPECT_THROW(tokpos::write_npy("/nonexistent-dir/x.npy", "<f4", {3}, v.data(), 12), tokpos::Error);
  const auto a = tokpos::read_npy(path);
  EXPECT_EQ(a.shape, (std::vector<int64_t>{3}));
}

TEST(Npy, BadFilesAreNamed) {
  const auto path = scratch("tokpos_bad.npy");
  std::ofstream(path) << "not numpy";
  try {
    tokpos::read_npy(path);
    FAIL();
  } catch (const tokpos::Error& e) {
    EXPECT_NE(std::string(e.what()).find("not a .npy file"), std::string::npos) << e.what();
  }
  const std::vector<float> v = {1, 2, 3, 4};
  tokpos::write_npy(path, "<f4", {4}, v.data(), 16);
  ::truncate(path.c_str(), 70);
  EXPECT_THROW(tokpos::read_npy(path), tokpos::Error);
}

// Found by make fuzz: a header whose shape holds garbage threw std::invalid_argument
// (from std::stoll) instead of tokpos::Error. Kept as a regression test.
TEST(Npy, FuzzFoundMalformedShapeIsANamedError) {
  try {
    tokpos::read_npy(std::string(TOKPOS_TEST_DATA) + "/npy/fuzz_shape_not_integer.npy");
    FAIL();
  } catch (const tokpos::Error& e) {
    EXPECT_EQ(e.status(), tokpos::Status::kInvalidArgument);
  }
  const auto path = scratch("tokpos_header.npy");
  for (const std::string header : {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, x), }",
                                   "{'descr': '<f4, 'fortran_order': False, 'shape': (2,), }",
                                   "{'descr': '<f4', 'fortran_order': Maybe, 'shape': (2,), }",
                                   "{'descr': '<f4', 'fortran_order': False, 'shape': (2,"}) {
    std::string bytes = "\x93NUMPY\x01\x00";
    bytes.push_back(static_cast<char>(header.size()));
    bytes.push_back('\0');
    std::ofstream(path, std::ios::binary) << bytes << header << std::string(8, '\0');
    EXPECT_THROW(tokpos::read_npy(path), tokpos::Error) << header;
  }
}

}  // namespace
