// tokpos rope at its edges: every output path is checked before either file
// is written; --scaling's type keys follow the rule every front end shares;
// numbers JSON cannot hold as a finite double and attention factors that are
// not finite float32 values are named bad flags (exit 1), never an internal error.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "run_command.h"

namespace {

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}

// A fresh directory for one test.
std::string fresh_dir(const std::string& name) {
  const auto dir = std::filesystem::path(::testing::TempDir()) / ("cli_rope_" + name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

bool has(const Result& r, const std::string& piece) { return r.out.find(piece) != std::string::npos; }

TEST(CliRope, EveryOutputPathIsCheckedBeforeEitherFileIsWritten) {
  const std::string dir = fresh_dir("outputs");
  const std::string out = dir + "/x.npy", freq = dir + "/x.inv_freq.npy";
  const std::string args = "rope --dim 8 --positions 0:4 --out " + out;
  enum Kind { kFifo, kDanglingLink, kDirectory, kLinkToFifo };
  for (const Kind kind : {kFifo, kDanglingLink, kDirectory, kLinkToFifo}) {
    std::filesystem::remove_all(freq);
    std::filesystem::remove_all(dir + "/fifo");
    { std::ofstream(out) << "previous cos and sin"; }
    switch (kind) {
      case kFifo: ASSERT_EQ(::mkfifo(freq.c_str(), 0600), 0); break;
      case kDanglingLink: ASSERT_EQ(::symlink("nowhere/at/all.npy", freq.c_str()), 0); break;
      case kDirectory: std::filesystem::create_directory(freq); break;
      case kLinkToFifo:
        ASSERT_EQ(::mkfifo((dir + "/fifo").c_str(), 0600), 0);
        ASSERT_EQ(::symlink("fifo", freq.c_str()), 0);
        break;
    }
    const auto r = run(args);
    EXPECT_EQ(r.status, 1) << kind << ": " << r.out;
    EXPECT_TRUE(has(r, "tokpos rope: cannot write " + freq)) << kind << ": " << r.out;
    EXPECT_EQ(slurp(out), "previous cos and sin") << kind << ": the first file was replaced";
    EXPECT_FALSE(has(r, "wrote ")) << r.out;
  }
  // The other way round: what is in the way at the first path stops both.
  std::filesystem::remove_all(freq);
  std::filesystem::remove_all(out);
  { std::ofstream(freq) << "previous inv_freq"; }
  ASSERT_EQ(::mkfifo(out.c_str(), 0600), 0);
  auto r = run(args);
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_TRUE(has(r, "cannot write " + out + ": it is a FIFO")) << r.out;
  EXPECT_EQ(slurp(freq), "previous inv_freq");
  // With both paths writable, both are written.
  std::filesystem::remove(out);
  r = run(args);
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(slurp(out).substr(0, 6), "previo");
  EXPECT_NE(slurp(freq).substr(0, 6), "previo");
}

TEST(CliRope, TypeKeysFollowTheSharedRule) {
  const std::string dir = fresh_dir("types");
  const std::string out = dir + "/r.npy";
  const std::string ok = " --dim 8 --positions 0:4 --out " + out;
  // Disagreeing: refused, naming both values; nothing written.
  auto r = run("rope --scaling '{\"rope_type\":\"linear\",\"type\":\"yarn\",\"factor\":2,"
               "\"original_max_position_embeddings\":64}'" + ok);
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_TRUE(has(r, "--scaling")) << r.out;
  EXPECT_TRUE(has(r, "'rope_type' = 'linear' and 'type' = 'yarn' disagree")) << r.out;
  EXPECT_FALSE(std::filesystem::exists(out));
  // Agreeing: accepted; "type" alone (the older spelling): accepted.
  for (const char* scaling : {"{\"rope_type\":\"linear\",\"type\":\"linear\",\"factor\":2}",
                              "{\"type\":\"linear\",\"factor\":2}", "{\"rope_type\":\"linear\",\"factor\":2}"}) {
    r = run(std::string("rope --scaling '") + scaling + "'" + ok);
    EXPECT_EQ(r.status, 0) << scaling << ": " << r.out;
    EXPECT_TRUE(has(r, "rope_type linear")) << scaling << ": " << r.out;
  }
}

TEST(CliRope, NumbersOutsideTheirRangeAreNamedBadFlags) {
  const std::string dir = fresh_dir("numbers");
  const std::string out = dir + "/r.npy";
  const std::string ok = " --dim 8 --positions 0:4 --out " + out;
  struct Case {
    std::string scaling;
    std::string piece;
  };
  for (const Case& c : {Case{"{\"rope_type\":\"linear\",\"factor\":1e400}", "outside double's range"},
                        Case{"{\"rope_type\":\"linear\",\"factor\":-1e400}", "outside double's range"},
                        Case{"{\"rope_type\":\"yarn\",\"factor\":2,\"original_max_position_embeddings\":1e999}",
                             "outside double's range"},
                        Case{"{\"rope_type\":\"yarn\",\"factor\":4,\"original_max_position_embeddings\":64,"
                             "\"attention_factor\":1e39}",
                             "attention_factor = 9.9999999999999994e+38 must be finite and > 0 in float32"},
                        Case{"{\"rope_type\":\"yarn\",\"factor\":4,\"original_max_position_embeddings\":64,"
                             "\"mscale\":1e300,\"mscale_all_dim\":1}",
                             "in float32"}}) {
    const auto r = run("rope --scaling '" + c.scaling + "'" + ok);
    EXPECT_EQ(r.status, 1) << c.scaling << ": " << r.out;
    EXPECT_TRUE(has(r, "tokpos rope: --scaling")) << c.scaling << ": " << r.out;
    EXPECT_TRUE(has(r, c.piece)) << c.scaling << ": " << r.out;
    EXPECT_FALSE(has(r, "internal error")) << r.out;
    EXPECT_FALSE(std::filesystem::exists(out)) << c.scaling;
  }
}

}  // namespace
