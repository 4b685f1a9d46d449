#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <new>
#include <string>
#include <vector>

#include "test_util.h"
#include "tokpos/error.h"
#include "tokpos/npy.h"
#include "expect_error.h"

namespace {

std::string scratch(const char* name) {
  return ::testing::TempDir() + name;
}

using tokpos::testing::expect_error;

// A .npy file (version 1) with this header and `data` bytes after it.
void write_raw(const std::string& path, const std::string& header, size_t data, char version = 1) {
  std::string bytes = "\x93NUMPY";
  bytes.push_back(version);
  bytes.push_back('\0');
  bytes.push_back(static_cast<char>(header.size() & 0xff));
  bytes.push_back(static_cast<char>(header.size() >> 8));
  std::ofstream(path, std::ios::binary) << bytes << header << std::string(data, '\0');
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
  // The caller's mistakes: bytes that disagree with the shape, a descr tokpos does not write.
  expect_error([&] { tokpos::write_npy(path, "<f4", {4}, v.data(), 12); }, tokpos::Status::kShapeMismatch,
               {"12 bytes do not match"});
  expect_error([&] { tokpos::write_npy(path, "<c8", {3}, v.data(), 12); }, tokpos::Status::kInvalidArgument,
               {"unsupported dtype descr '<c8'"});
  // A directory where the file should go: the rename fails, nothing is left behind.
  const auto dir = scratch("tokpos_dir.npy");
  ::mkdir(dir.c_str(), 0755);
  const std::string sub = dir + "/x";
  std::ofstream(sub) << "x";
  expect_error([&] { tokpos::write_npy(dir, "<f4", {3}, v.data(), 12); }, tokpos::Status::kIoError,
               {"cannot rename", dir});
  // A directory that does not exist: an I/O error with the path and errno's text.
  expect_error([&] { tokpos::write_npy("/nonexistent-dir/x.npy", "<f4", {3}, v.data(), 12); },
               tokpos::Status::kIoError, {"cannot write /nonexistent-dir/x.npy", std::strerror(ENOENT)});
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

// A file that cannot be opened or read is an I/O error naming the path and errno's text.
TEST(Npy, UnreadableFilesAreIoErrors) {
  const auto missing = scratch("tokpos_no_such_file.npy");
  ::unlink(missing.c_str());
  expect_error([&] { tokpos::read_npy(missing); }, tokpos::Status::kIoError,
               {"read_npy: cannot open " + missing, std::strerror(ENOENT)});
  const auto dir = scratch("tokpos_a_directory.npy");
  ::mkdir(dir.c_str(), 0755);
  expect_error([&] { tokpos::read_npy(dir); }, tokpos::Status::kIoError, {dir, std::strerror(EISDIR)});
}

// Not a regular file: refused by name. A FIFO is refused at once rather than
// blocking in open() (and then in read) for a writer; the call runs in a
// child under alarm() so that a regression (a hang) fails the test instead of
// hanging it.
TEST(Npy, NonRegularFilesAreRefusedByName) {
  const auto dir = scratch("tokpos_not_regular_dir.npy");
  ::mkdir(dir.c_str(), 0755);
  expect_error([&] { tokpos::read_npy(dir); }, tokpos::Status::kIoError,
               {"read_npy: cannot open " + dir, std::strerror(EISDIR), "a directory, not a regular file"});
  expect_error([&] { tokpos::read_npy("/dev/zero"); }, tokpos::Status::kIoError,
               {"read_npy: cannot open /dev/zero: it is a character device, not a regular file"});
  const auto fifo = scratch("tokpos_fifo.npy");
  ::unlink(fifo.c_str());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0) << std::strerror(errno);
  EXPECT_EXIT(
      {
        ::alarm(5);
        try {
          tokpos::read_npy(fifo);
        } catch (const tokpos::Error& e) {
          std::fprintf(stderr, "%s\n", e.what());
          std::_Exit(e.status() == tokpos::Status::kIoError ? 0 : 1);
        }
        std::_Exit(2);
      },
      ::testing::ExitedWithCode(0), "read_npy: cannot open .*tokpos_fifo.npy: it is a FIFO, not a regular file");
  ::unlink(fifo.c_str());
}

// A 144-byte file whose header declares 2 GB of data is refused from the file
// size before anything is allocated: in a child whose address space is capped
// 1 GiB above what it already uses, an allocation of the declared size would
// fail with std::bad_alloc instead. (Not under AddressSanitizer, whose
// shadow memory needs an uncapped address space.)
TEST(Npy, HugeDeclaredShapeIsRefusedBeforeAllocating) {
  const auto path = scratch("tokpos_huge_shape.npy");
  const std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (500000000,), }";
  std::string h = header;
  h.append(144 - 10 - 8 - 1 - h.size(), ' ');
  h.push_back('\n');
  write_raw(path, h, 8);
  ASSERT_EQ(std::ifstream(path, std::ios::binary | std::ios::ate).tellg(), 144);
  expect_error([&] { tokpos::read_npy(path); }, tokpos::Status::kCorruptFile,
               {path, "data is shorter than shape: 500000000 x 4 bytes, but the file holds 8"});
#ifdef TOKPOS_TEST_SANITIZED
  GTEST_SKIP() << "the address-space cap needs a build without sanitizers";
#else
  // In the child: cap the address space, then read; exit 0 on the named error.
  auto capped_read = [&] {
    long pages = 0;
    if (FILE* f = std::fopen("/proc/self/statm", "r")) {
      if (std::fscanf(f, "%ld", &pages) != 1) pages = 0;
      std::fclose(f);
    }
    const rlim_t cap = static_cast<rlim_t>(pages) * static_cast<rlim_t>(::sysconf(_SC_PAGESIZE)) + (1u << 30);
    struct rlimit limit {};
    limit.rlim_cur = limit.rlim_max = cap;
    if (pages == 0 || ::setrlimit(RLIMIT_AS, &limit) != 0) std::_Exit(3);
    try {
      tokpos::read_npy(path);
    } catch (const tokpos::Error& e) {
      std::fprintf(stderr, "%s\n", e.what());
      std::_Exit(e.status() == tokpos::Status::kCorruptFile ? 0 : 1);
    } catch (const std::bad_alloc&) {
      std::_Exit(4);
    }
    std::_Exit(2);
  };
  EXPECT_EXIT(capped_read(), ::testing::ExitedWithCode(0), "the file holds 8");
#endif
}

// Every read and write error names the file.
TEST(Npy, ErrorsNameTheFile) {
  const auto path = scratch("tokpos_named.npy");
  const std::vector<float> v = {1, 2};
  expect_error([&] { tokpos::write_npy(path, "<c8", {2}, v.data(), 8); }, tokpos::Status::kInvalidArgument,
               {"write_npy: " + path + ": unsupported dtype descr '<c8'"});
  expect_error([&] { tokpos::write_npy(path, "<f4", {2, -1}, v.data(), 8); }, tokpos::Status::kInvalidArgument,
               {"write_npy: " + path + ": shape entry 1 is -1, must be >= 0"});
  expect_error([&] { tokpos::write_npy(path, "<f4", {INT64_MAX, 4}, v.data(), 8); },
               tokpos::Status::kSizeOverflow, {"write_npy: " + path + ": the element count"});
  const std::string ok_tail = "'fortran_order': False, 'shape': (2,), }";
  write_raw(path, "{'descr': '<c8', " + ok_tail, 16);
  expect_error([&] { tokpos::read_npy(path); }, tokpos::Status::kUnimplemented, {"read_npy: " + path + ": "});
  write_raw(path, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, -3), }", 8);
  expect_error([&] { tokpos::read_npy(path); }, tokpos::Status::kCorruptFile, {"read_npy: " + path + ": "});
  const auto missing = scratch("tokpos_missing_for_name.npy");
  ::unlink(missing.c_str());
  expect_error([&] { tokpos::read_npy(missing); }, tokpos::Status::kIoError,
               {"read_npy: cannot open " + missing + ": " + std::strerror(ENOENT)});
}

// A malformed file is kCorruptFile, with what is wrong; a well-formed one that
// uses a feature tokpos does not read is kUnimplemented.
TEST(Npy, MalformedFilesAreCorruptAndUnsupportedOnesUnimplemented) {
  using tokpos::Status;
  const auto path = scratch("tokpos_corrupt.npy");
  auto read = [&] { tokpos::read_npy(path); };
  std::ofstream(path) << "not numpy";
  expect_error(read, Status::kCorruptFile, {path, "not a .npy file"});
  std::ofstream(path) << "\x93NUMPY";
  expect_error(read, Status::kCorruptFile, {"not a .npy file"});
  const std::vector<float> v = {1, 2, 3, 4};
  tokpos::write_npy(path, "<f4", {4}, v.data(), 16);
  ::truncate(path.c_str(), 130);  // 128 bytes of header, 2 of the 16 bytes of data
  expect_error(read, Status::kCorruptFile, {"data is shorter than shape", "the file holds 2"});
  ::truncate(path.c_str(), 20);
  expect_error(read, Status::kCorruptFile, {"truncated header"});
  ::truncate(path.c_str(), 9);
  expect_error(read, Status::kCorruptFile, {"truncated"});
  const std::string ok_tail = "'fortran_order': False, 'shape': (2,), }";
  write_raw(path, "{'descr': '<f4', " + ok_tail, 8, 9);
  expect_error(read, Status::kCorruptFile, {".npy version 9 does not exist"});
  write_raw(path, "{'descr': 'zz', " + ok_tail, 8);
  expect_error(read, Status::kCorruptFile, {"dtype descr 'zz' is not a numpy dtype"});
  write_raw(path, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, -3), }", 8);
  expect_error(read, Status::kCorruptFile, {"shape entry -3 is negative"});
  write_raw(path, "{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387904, 4), }", 8);
  expect_error(read, Status::kCorruptFile, {"shape overflows"});
  // A header that promises far more data than the file holds: refused before allocating it.
  write_raw(path, "{'descr': '<f8', 'fortran_order': False, 'shape': (1000000, 1000000), }", 8);
  expect_error(read, Status::kCorruptFile, {"data is shorter than shape", "the file holds 8"});
  write_raw(path, "{'descr': '<f4', 'shape': (2,), }", 8);
  expect_error(read, Status::kCorruptFile, {"header lacks 'fortran_order':"});
  // Well-formed, but not what tokpos reads.
  write_raw(path, "{'descr': '<f4', " + ok_tail, 8, 2);
  expect_error(read, Status::kUnimplemented, {".npy version 2 is not supported"});
  write_raw(path, "{'descr': '>f4', " + ok_tail, 8);
  expect_error(read, Status::kUnimplemented, {"dtype descr '>f4' is not supported"});
  write_raw(path, "{'descr': '<c8', " + ok_tail, 16);
  expect_error(read, Status::kUnimplemented, {"dtype descr '<c8' is not supported"});
  write_raw(path, "{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }", 8);
  expect_error(read, Status::kUnimplemented, {"Fortran order is not supported"});
  // And a good header still reads.
  write_raw(path, "{'descr': '<f4', " + ok_tail, 8);
  EXPECT_EQ(tokpos::read_npy(path).shape, (std::vector<int64_t>{2}));
}

// Found by make fuzz: a header whose shape holds garbage threw std::invalid_argument
// (from std::stoll) instead of tokpos::Error. Kept as a regression test.
TEST(Npy, FuzzFoundMalformedShapeIsANamedError) {
  try {
    tokpos::read_npy(std::string(TOKPOS_TEST_DATA) + "/npy/fuzz_shape_not_integer.npy");
    FAIL();
  } catch (const tokpos::Error& e) {
    EXPECT_EQ(e.status(), tokpos::Status::kCorruptFile);
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
    expect_error([&] { tokpos::read_npy(path); }, tokpos::Status::kCorruptFile, {path});
  }
}

// A shape whose byte count wraps in uint64 is refused by name, not recorded:
// 2^62 eight-byte elements are 2^65 bytes, which wraps to the 0 given.
TEST(Npy, WriterRefusesAShapeWhoseByteCountWraps) {
  const auto path = scratch("tokpos_wrapping_shape.npy");
  ::unlink(path.c_str());
  const double dummy = 0.0;
  expect_error([&] { tokpos::write_npy(path, "<f8", {int64_t{1} << 62}, &dummy, 0); },
               tokpos::Status::kSizeOverflow, {"write_npy", path, "overflows"});
  expect_error([&] { tokpos::write_npy(path, "<f4", {int64_t{1} << 62, 4, 0}, &dummy, 0); },
               tokpos::Status::kSizeOverflow, {path});
  struct stat st {};
  EXPECT_NE(::stat(path.c_str(), &st), 0) << "no file is written";
}

}  // namespace
