// The bad-input catalogue of docs/errors.md: the rows not covered elsewhere,
// and "nothing lost" for every C entry point that writes.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "io/atomic_file.h"
#include "test_util.h"
#include "tokpos/checkpoint.h"
#include "tokpos/composer.h"
#include "tokpos/error.h"
#include "tokpos/npy.h"
#include "tokpos/safetensors.h"
#include "tokpos/tokpos.h"

namespace {

using tokpos::testing::bitwise_equal;
using tokpos::testing::noise;
using tokpos::testing::sentinel;

std::string last() { return tokpos_last_error(); }

TEST(Errors, AllocationFailureIsAStatusNotACrash) {
#ifdef TOKPOS_TEST_SANITIZED
  GTEST_SKIP() << "AddressSanitizer's operator new aborts on failure instead of throwing std::bad_alloc";
#endif
  // 2^46 floats = 256 TiB: more than the 47-bit address space, so it fails on any machine.
  try {
    tokpos::TokenEmbedding e({.vocab_size = int64_t{1} << 46, .dim = 1});
    FAIL() << "allocated 256 TiB";
  } catch (const tokpos::Error& e) {
    EXPECT_EQ(e.status(), tokpos::Status::kOutOfMemory) << e.what();
    EXPECT_NE(std::string(e.what()).find("cannot allocate token table"), std::string::npos) << e.what();
  }
  tokpos_token_embedding* h = nullptr;
  EXPECT_EQ(tokpos_token_embedding_create(&h, int64_t{1} << 46, 1, 0), TOKPOS_OUT_OF_MEMORY);
  EXPECT_EQ(h, nullptr);
  EXPECT_NE(last().find("cannot allocate"), std::string::npos) << last();
}

TEST(Errors, NaNAndInfInTablesPassThrough) {
  // tokpos does not scan tables for NaN/Inf (that would cost a pass over V x D
  // per call): they propagate like any value, as in PyTorch.
  std::vector<float> tok = {1, 2, std::nanf(""), std::numeric_limits<float>::infinity()}, pos = {0, 0, 0, 0};
  const int64_t ids[2] = {0, 1};
  std::vector<float> out(4);
  ASSERT_EQ(tokpos_compose_forward(out.data(), ids, 1, 2, tok.data(), 2, pos.data(), 2, 2), TOKPOS_OK);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_TRUE(std::isnan(out[2]));
  EXPECT_TRUE(std::isinf(out[3]));
}

TEST(Errors, MisalignedPointersAreRefused) {
  std::vector<float> buf(64, 7.0f), tok(16, 1.0f), pos(16, 0.0f);
  const auto before = buf;
  float* odd = reinterpret_cast<float*>(reinterpret_cast<char*>(buf.data()) + 1);
  const int64_t ids[2] = {0, 1};
  EXPECT_EQ(tokpos_compose_forward(odd, ids, 1, 2, tok.data(), 4, pos.data(), 4, 4), TOKPOS_INVALID_ARGUMENT);
  EXPECT_NE(last().find("out = "), std::string::npos);
  EXPECT_NE(last().find("is not aligned to 4 bytes"), std::string::npos) << last();
  EXPECT_TRUE(bitwise_equal(buf, before));
  alignas(8) char raw[64] = {};
  const auto* odd_ids = reinterpret_cast<const int64_t*>(raw + 4);
  EXPECT_EQ(tokpos_compose_forward(buf.data(), odd_ids, 1, 2, tok.data(), 4, pos.data(), 4, 4), TOKPOS_INVALID_ARGUMENT);
  EXPECT_NE(last().find("is not aligned to 8 bytes"), std::string::npos) << last();
}

TEST(Errors, ExtremeIdsAndSizes) {
  std::vector<float> tok(8), pos(8), out = sentinel(8);
  const auto before = out;
  for (int64_t id : {std::numeric_limits<int64_t>::min(), int64_t{-1}, std::numeric_limits<int64_t>::max()}) {
    const int64_t ids[1] = {id};
    EXPECT_EQ(tokpos_compose_forward(out.data(), ids, 1, 1, tok.data(), 2, pos.data(), 2, 4), TOKPOS_ID_OUT_OF_RANGE);
    EXPECT_NE(last().find("token id " + std::to_string(id)), std::string::npos) << last();
  }
  // V*D overflows int64 even though each is positive.
  const int64_t ids[1] = {0};
  EXPECT_EQ(tokpos_compose_forward(out.data(), ids, 1, 1, tok.data(), int64_t{1} << 62, pos.data(), 2, 4),
            TOKPOS_SIZE_OVERFLOW);
  EXPECT_NE(last().find("V*D"), std::string::npos) << last();
  EXPECT_TRUE(bitwise_equal(out, before));
}

// Every C entry point that writes an output or gradient, made to fail: the
// buffer keeps its exact bits and the failure is explained.
TEST(Errors, NothingLostOnAnyFailedCEntryPoint) {
  const int64_t V = 6, L = 4, D = 3;
  const auto tok = noise(V * D, 1), pos = noise(L * D, 2);
  const int64_t bad_ids[2] = {1, 6};
  std::vector<float> out = sentinel(64), g1 = sentinel(V * D), g2 = sentinel(L * D);
  const auto o0 = out, g10 = g1, g20 = g2;
  auto check = [&](tokpos_status st, const char* what) {
    EXPECT_NE(st, TOKPOS_OK) << what;
    EXPECT_NE(last(), "") << what;
    EXPECT_TRUE(bitwise_equal(out, o0) && bitwise_equal(g1, g10) && bitwise_equal(g2, g20)) << what << " wrote";
  };
  check(tokpos_embedding_forward(bad_ids, 2, tok.data(), V, D, 9, out.data()), "embedding_forward");
  check(tokpos_sinusoidal_table(out.data(), 2, 3, -1.0), "sinusoidal_table");
  check(tokpos_sinusoidal_table_ex(out.data(), TOKPOS_DTYPE_F32, 2, 3, -5, TOKPOS_LAYOUT_HALVES, 1e4, 1, -1),
        "sinusoidal_table_ex");
  check(tokpos_compose_forward(out.data(), bad_ids, 1, 2, tok.data(), V, pos.data(), L, D), "compose_forward");
  check(tokpos_compose_forward_ex(out.data(), TOKPOS_DTYPE_F32, bad_ids, 1, 2, tok.data(), TOKPOS_DTYPE_F32, V,
                                  pos.data(), TOKPOS_DTYPE_F32, L, D),
        "compose_forward_ex");
  check(tokpos_compose_backward(g1.data(), g2.data(), out.data(), bad_ids, 1, 2, V, L, D), "compose_backward");

  tokpos_token_embedding* e = nullptr;
  ASSERT_EQ(tokpos_token_embedding_from_table(&e, tok.data(), V, D, 0), TOKPOS_OK);
  check(tokpos_token_embedding_forward(e, bad_ids, 1, 2, out.data()), "token_embedding_forward");
  const float* eg = nullptr;
  ASSERT_EQ(tokpos_token_embedding_grad(e, &eg), TOKPOS_OK);
  const std::vector<float> eg0(eg, eg + V * D);
  check(tokpos_token_embedding_backward(e, out.data(), bad_ids, 1, 2, nullptr), "token_embedding_backward");
  EXPECT_TRUE(std::memcmp(eg, eg0.data(), eg0.size() * 4) == 0);
  tokpos_token_embedding_free(e);

  tokpos_position_embedding* p = nullptr;
  ASSERT_EQ(tokpos_position_embedding_create_learned(&p, L, D, 0), TOKPOS_OK);
  check(tokpos_position_embedding_forward(p, L + 1, 0, out.data()), "position_embedding_forward");
  const float* pg = nullptr;
  ASSERT_EQ(tokpos_position_embedding_grad(p, &pg), TOKPOS_OK);
  const std::vector<float> pg0(pg, pg + L * D);
  check(tokpos_position_embedding_backward(p, out.data(), 1, L + 1, 0), "position_embedding_backward");
  EXPECT_TRUE(std::memcmp(pg, pg0.data(), pg0.size() * 4) == 0);
  tokpos_position_embedding_free(p);

  auto opts = tokpos_composer_default_options(V, D, L);
  opts.position = TOKPOS_POSITION_LEARNED;
  tokpos_composer* c = nullptr;
  ASSERT_EQ(tokpos_composer_create(&c, &opts), TOKPOS_OK);
  check(tokpos_composer_forward(c, bad_ids, 1, 2, 0, nullptr, out.data()), "composer_forward");
  const float *cg = nullptr, *cp = nullptr;
  ASSERT_EQ(tokpos_composer_token_grad(c, &cg), TOKPOS_OK);
  ASSERT_EQ(tokpos_composer_position_grad(c, &cp), TOKPOS_OK);
  const std::vector<float> cg0(cg, cg + V * D), cp0(cp, cp + L * D);
  const int64_t good_ids[5] = {1, 2, 3, 4, 5};
  check(tokpos_composer_backward(c, out.data(), good_ids, 1, 5, 0, nullptr, nullptr), "composer_backward (T > L)");
  EXPECT_TRUE(std::memcmp(cg, cg0.data(), cg0.size() * 4) == 0 && std::memcmp(cp, cp0.data(), cp0.size() * 4) == 0);
  tokpos_composer_free(c);
}

// Every status has its stable name, in C++ and in C; one past the last is unknown.
TEST(Errors, EveryStatusHasItsName) {
  using tokpos::Status;
  EXPECT_STREQ(tokpos::status_name(Status::kInvalidArgument), "TOKPOS_INVALID_ARGUMENT");
  EXPECT_STREQ(tokpos::status_name(Status::kUnimplemented), "TOKPOS_UNIMPLEMENTED");
  EXPECT_STREQ(tokpos::status_name(Status::kIoError), "TOKPOS_IO_ERROR");
  EXPECT_STREQ(tokpos::status_name(Status::kCorruptFile), "TOKPOS_CORRUPT_FILE");
  EXPECT_STREQ(tokpos::status_name(static_cast<Status>(12)), "TOKPOS_UNKNOWN_STATUS");
  for (int s = TOKPOS_OK; s <= TOKPOS_CORRUPT_FILE; ++s) {
    EXPECT_STREQ(tokpos_status_string(static_cast<tokpos_status>(s)), tokpos::status_name(static_cast<Status>(s)));
  }
  EXPECT_EQ(static_cast<int>(Status::kIoError), TOKPOS_IO_ERROR);
  EXPECT_EQ(static_cast<int>(Status::kCorruptFile), TOKPOS_CORRUPT_FILE);
}

// File errors: an I/O failure is kIoError with the path and errno's text; a
// damaged file is kCorruptFile. Both readers and the writer.
TEST(Errors, FileErrorsHaveTheirOwnStatuses) {
  const std::string dir = ::testing::TempDir() + "tokpos_file_errors";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  auto status_of = [](auto&& f, std::string* what) {
    try {
      f();
    } catch (const tokpos::Error& e) {
      *what = e.what();
      return e.status();
    }
    *what = "";
    return tokpos::Status::kOk;
  };
  std::string what;
  const std::string missing = dir + "/missing";
  EXPECT_EQ(status_of([&] { tokpos::read_npy(missing + ".npy"); }, &what), tokpos::Status::kIoError);
  EXPECT_NE(what.find(missing + ".npy: " + std::strerror(ENOENT)), std::string::npos) << what;
  EXPECT_EQ(status_of([&] { tokpos::SafetensorsFile::open(missing + ".safetensors"); }, &what),
            tokpos::Status::kIoError);
  EXPECT_NE(what.find(missing + ".safetensors: " + std::strerror(ENOENT)), std::string::npos) << what;
  const std::vector<float> v = {1, 2};
  EXPECT_EQ(status_of([&] { tokpos::write_npy(missing + "/x.npy", "<f4", {2}, v.data(), 8); }, &what),
            tokpos::Status::kIoError);
  EXPECT_NE(what.find(std::strerror(ENOENT)), std::string::npos) << what;
  EXPECT_EQ(status_of([&] { tokpos::write_safetensors(missing + "/x.safetensors", {{"x", "F32", {2}, v.data(), 8}}); },
                      &what),
            tokpos::Status::kIoError);
  EXPECT_NE(what.find(missing + "/x.safetensors"), std::string::npos) << what;
  const std::string junk = dir + "/junk";
  std::ofstream(junk) << "this is neither format";
  EXPECT_EQ(status_of([&] { tokpos::read_npy(junk); }, &what), tokpos::Status::kCorruptFile) << what;
  EXPECT_EQ(status_of([&] { tokpos::SafetensorsFile::open(junk); }, &what), tokpos::Status::kCorruptFile) << what;
}

// A write that dies half-way (as on a full disk): the previous file is intact
// and no temporary file is left behind.
TEST(Errors, InterruptedWritesLoseNothing) {
  const std::string dir = ::testing::TempDir() + "tokpos_interrupted";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/model.safetensors";
  tokpos::EmbeddingComposer model(tokpos::TokenEmbedding({.vocab_size = 50, .dim = 8, .seed = 1}),
                                  std::make_unique<tokpos::LearnedPositionalEmbedding>(
                                      tokpos::LearnedPositionalOptions{.max_context = 16, .dim = 8, .seed = 1}));
  tokpos::save_checkpoint(path, model);
  std::ifstream in(path, std::ios::binary);
  const std::string before((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  model.token().mutable_table()[0] = 42.0f;  // the new state that fails to save
  for (long long cut : {0LL, 7LL, 100LL, static_cast<long long>(before.size() / 2)}) {
    tokpos::detail::inject_write_failure_for_testing(cut);
    try {
      tokpos::save_checkpoint(path, model);
      ADD_FAILURE() << "cut at " << cut << ": no error";
    } catch (const tokpos::Error& e) {
      EXPECT_EQ(e.status(), tokpos::Status::kIoError) << e.what();
      EXPECT_NE(std::string(e.what()).find("cannot write " + path + ": " + std::strerror(EIO)), std::string::npos)
          << e.what();
    }
    tokpos::detail::inject_write_failure_for_testing(-1);
    std::ifstream again(path, std::ios::binary);
    EXPECT_EQ(std::string((std::istreambuf_iterator<char>(again)), std::istreambuf_iterator<char>()), before) << cut;
    EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir), std::filesystem::directory_iterator()), 1)
        << "a temporary file was left behind";
  }
  // And the file still loads into a fresh model with the old values.
  tokpos::load_checkpoint(path, model);
  EXPECT_NE(model.token().table()[0], 42.0f);
  // The same for .npy.
  const std::vector<float> v = {1, 2, 3};
  tokpos::write_npy(dir + "/t.npy", "<f4", {3}, v.data(), 12);
  tokpos::detail::inject_write_failure_for_testing(20);
  try {
    tokpos::write_npy(dir + "/t.npy", "<f4", {2}, v.data(), 8);
    ADD_FAILURE() << "no error";
  } catch (const tokpos::Error& e) {
    EXPECT_EQ(e.status(), tokpos::Status::kIoError) << e.what();
    EXPECT_NE(std::string(e.what()).find(std::strerror(EIO)), std::string::npos) << e.what();
  }
  tokpos::detail::inject_write_failure_for_testing(-1);
  EXPECT_EQ(tokpos::read_npy(dir + "/t.npy").shape, (std::vector<int64_t>{3}));
}

}  // namespace
