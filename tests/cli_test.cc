// The tokpos tool, run as a user would: the report, --json, the D=64 vs D=32
// exercise, and bad flags.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <vector>

#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include "run_command.h"
#include "test_util.h"
#include "tokpos/npy.h"
#include "tokpos/position_table.h"
#include "tokpos/tokpos.h"

namespace {

nlohmann::json run_json(const std::string& args) {
  const auto r = run("demo --json " + args);
  EXPECT_EQ(r.status, 0) << r.out;
  return nlohmann::json::parse(r.out);
}

TEST(Cli, DemoPrintsEverySection) {
  const auto r = run("demo");
  ASSERT_EQ(r.status, 0) << r.out;
  for (const char* piece :
       {"ids      [76, 105, 112, 112, 115,", "(B, T) = (1, 19)", "(B, T, D) = (1, 19, 64)", "16,640", "8,192",
        "24,832", "adjacent-position cosine", "learned", "sinusoidal", "wavelength bands (D = 64",
        "what to look at"}) {
    EXPECT_NE(r.out.find(piece), std::string::npos) << "missing: " << piece << "\n" << r.out;
  }
}

TEST(Cli, JsonHasTheDocumentedFields) {
  const auto j = run_json("");
  EXPECT_EQ(j["config"]["vocab_size"], 260);
  EXPECT_EQ(j["config"]["dim"], 64);
  EXPECT_EQ(j["config"]["max_context"], 128);
  EXPECT_EQ(j["config"]["seed"], 0);
  EXPECT_EQ(j["config"]["base"], 10000.0);
  EXPECT_EQ(j["ids"].size(), 19u);
  EXPECT_EQ(j["ids"][0], 76);  // 'H' + 4
  EXPECT_EQ(j["shapes"]["output"], (nlohmann::json{1, 19, 64}));
  EXPECT_EQ(j["parameters"]["token"], 260 * 64);
  EXPECT_EQ(j["parameters"]["learned_position"], 128 * 64);
  EXPECT_EQ(j["parameters"]["sinusoidal_position"], 0);
  ASSERT_EQ(j["adjacent_cosine"]["learned"].size(), 127u);  // L - 1 over the whole table
  ASSERT_EQ(j["adjacent_cosine"]["sinusoidal"].size(), 127u);
  EXPECT_EQ(j["wavelengths"].size(), 32u);
  // The sinusoidal neighbours are all equally similar (closed form); the learned ones are not.
  for (const auto& v : j["adjacent_cosine"]["sinusoidal"]) EXPECT_NEAR(v.get<double>(), 0.9659, 1e-3);
  EXPECT_LT(std::abs(j["adjacent_cosine_summary"]["learned"]["mean"].get<double>()), 0.1);
}

TEST(Cli, Dim32Versus64ChangesTheBands) {
  const auto a = run_json("--dim 64"), b = run_json("--dim 32");
  ASSERT_EQ(a["wavelengths"].size(), 32u);
  ASSERT_EQ(b["wavelengths"].size(), 16u);
  EXPECT_NEAR(a["wavelengths"][0].get<double>(), 2 * M_PI, 1e-9);
  EXPECT_NEAR(b["wavelengths"][0].get<double>(), 2 * M_PI, 1e-9);
  EXPECT_NEAR(a["wavelengths"][1].get<double>() / a["wavelengths"][0].get<double>(), std::pow(1e4, 2.0 / 64),
              1e-9);
  EXPECT_NEAR(b["wavelengths"][1].get<double>() / b["wavelengths"][0].get<double>(), std::pow(1e4, 2.0 / 32),
              1e-9);
  // Decade [100, 1000) holds 8 pairs at D = 64 and 4 at D = 32.
  auto pairs_in = [](const nlohmann::json& j, double lower) {
    for (const auto& band : j["wavelength_bands"])
      if (band["lower"] == lower) return band["pairs"].get<int>();
    return -1;
  };
  EXPECT_EQ(pairs_in(a, 100.0), 8);
  EXPECT_EQ(pairs_in(b, 100.0), 4);
  const auto text = run("demo --dim 32");
  EXPECT_NE(text.out.find("D = 32, base = 10000: 16 sin/cos pairs"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("x1.778"), std::string::npos);
}

TEST(Cli, FlagsChangeTheRun) {
  const auto j = run_json("--text Hi --vocab 300 --context 16 --seed 5 --base 100 --dim 8");
  EXPECT_EQ(j["ids"], (nlohmann::json{76, 109}));
  EXPECT_EQ(j["config"]["seed"], 5);
  EXPECT_EQ(j["adjacent_cosine"]["learned"].size(), 15u);
  EXPECT_EQ(j["parameters"]["token"], 300 * 8);
  EXPECT_NEAR(j["wavelengths"][3].get<double>(), 2 * M_PI * std::pow(100.0, 6.0 / 8), 1e-9);
  // The seed changes the learned table but never the sinusoidal one.
  const auto k = run_json("--text Hi --vocab 300 --context 16 --seed 6 --base 100 --dim 8");
  EXPECT_NE(j["adjacent_cosine"]["learned"], k["adjacent_cosine"]["learned"]);
  EXPECT_EQ(j["adjacent_cosine"]["sinusoidal"], k["adjacent_cosine"]["sinusoidal"]);
}

TEST(Cli, SameArgumentsSameOutput) {
  EXPECT_EQ(run("demo --json").out, run("demo --json").out);
}

TEST(Cli, BadFlagsFailClearly) {
  struct Case {
    const char* args;
    const char* message;
  };
  for (const Case& c : {Case{"demo --dim 0", "--dim"}, Case{"demo --dim abc", "--dim"},
                        Case{"demo --context -3", "--context"}, Case{"demo --base 0", "--base"},
                        Case{"demo --bogus", "--bogus"}, Case{"", "subcommand"},
                        Case{"demo --vocab 100", "token id 105 at (b=0, t=1) is outside [0, 100)"},
                        Case{"demo --context 10", "T = 19 exceeds max_context L = 10"}}) {
    const auto r = run(c.args);
    EXPECT_NE(r.status, 0) << c.args;
    EXPECT_NE(r.out.find(c.message), std::string::npos) << c.args << " -> " << r.out;
  }
}

TEST(Cli, DemoReportsTheRelativePositionFit) {
  const auto j = run_json("");
  const auto& s = j["relative_position_fit"]["sinusoidal"][0];
  const auto& l = j["relative_position_fit"]["learned"][0];
  EXPECT_EQ(s["k"], 1);
  EXPECT_LT(s["max_residual"].get<double>(), 2e-7);  // float rounding only
  EXPECT_GT(l["relative"].get<double>(), 0.3);       // random rows: no rotation fits
  EXPECT_NE(run("demo").out.find("relative-position fit"), std::string::npos);
}

std::string scratch(const std::string& name) {
  return ::testing::TempDir() + name;
}

// cos(p * f) in double from an exact product: p * f = hi + lo with the error
// term lo from an fma, and cos(hi + lo) = cos(hi) - sin(hi) * lo to well
// below 2^-40 for |lo| < 2^-20.
double cos_of_product(double p, double f) {
  const double hi = p * f, lo = std::fma(p, f, -hi);
  return std::cos(hi) - std::sin(hi) * lo;
}
double sin_of_product(double p, double f) {
  const double hi = p * f, lo = std::fma(p, f, -hi);
  return std::sin(hi) + std::cos(hi) * lo;
}

std::vector<double> as_doubles(const tokpos::NpyArray& a) {
  std::vector<double> v(a.data.size() / 8);
  std::memcpy(v.data(), a.data.data(), v.size() * 8);
  return v;
}
std::vector<float> as_floats(const tokpos::NpyArray& a) {
  std::vector<float> v(a.data.size() / 4);
  std::memcpy(v.data(), a.data.data(), v.size() * 4);
  return v;
}

// Checks X.npy (cos, sin) and X.inv_freq.npy against base^(-2i/D) / divide
// at positions [a, b), pair i at (i, i + D/2) or (2i, 2i + 1).
void expect_rope_files(const std::string& path, int64_t D, double base, double divide, int64_t a, int64_t b,
                       bool interleaved) {
  const auto freq = tokpos::read_npy(path.substr(0, path.size() - 4) + ".inv_freq.npy");
  EXPECT_EQ(freq.descr, "<f8");
  ASSERT_EQ(freq.shape, (std::vector<int64_t>{D / 2}));
  const auto cs = tokpos::read_npy(path);
  EXPECT_EQ(cs.descr, "<f4");
  const int64_t T = b - a;
  ASSERT_EQ(cs.shape, (std::vector<int64_t>{2, T, D}));
  const auto f = as_doubles(freq);
  const auto v = as_floats(cs);
  for (int64_t i = 0; i < D / 2; ++i) {
    const double want = 1.0 / std::pow(base, static_cast<double>(2 * i) / static_cast<double>(D)) / divide;
    EXPECT_NEAR(f[static_cast<size_t>(i)], want, 4e-16 * want) << "inv_freq " << i;
  }
  const size_t n = static_cast<size_t>(T * D);
  for (int64_t t = 0; t < T; ++t) {
    const double p = static_cast<double>(a + t);
    for (int64_t i = 0; i < D / 2; ++i) {
      const double c = cos_of_product(p, f[static_cast<size_t>(i)]), s = sin_of_product(p, f[static_cast<size_t>(i)]);
      for (const int64_t j : {interleaved ? 2 * i : i, interleaved ? 2 * i + 1 : i + D / 2}) {
        const size_t k = static_cast<size_t>(t * D + j);
        EXPECT_LE(std::abs(v[k] - c), std::ldexp(1.0, -24)) << "cos, position " << p << ", column " << j;
        EXPECT_LE(std::abs(v[n + k] - s), std::ldexp(1.0, -24)) << "sin, position " << p << ", column " << j;
      }
    }
  }
}

TEST(Cli, RopeWritesInvFreqCosAndSin) {
  const auto path = scratch("cli_rope.npy");
  auto r = run("rope --dim 16 --positions 5:37 --out " + path);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("(2, 32, 16) float32"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("cli_rope.inv_freq.npy: (8,) float64 inv_freq"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("attention factor 1 "), std::string::npos) << r.out;
  expect_rope_files(path, 16, 10000, 1, 5, 37, false);
  // The last positions below 2^31, interleaved, another base; linear scaling divides every frequency.
  r = run("rope --dim 8 --base 500000 --layout interleaved --positions 2147483600:2147483648 --out " + path);
  ASSERT_EQ(r.status, 0) << r.out;
  expect_rope_files(path, 8, 500000, 1, 2147483600, 2147483648, true);
  r = run("rope --dim 12 --positions 0:40 --scaling '{\"rope_type\":\"linear\",\"factor\":2.5}' --out " + path);
  ASSERT_EQ(r.status, 0) << r.out;
  expect_rope_files(path, 12, 10000, 2.5, 0, 40, false);
}

TEST(Cli, RopeYarnScalesCosAndSinByItsAttentionFactor) {
  const auto path = scratch("cli_rope_yarn.npy");
  const auto r = run(
      "rope --dim 64 --positions 0:4 --scaling "
      "'{\"rope_type\":\"yarn\",\"factor\":4,\"original_max_position_embeddings\":4096}' --out " + path);
  ASSERT_EQ(r.status, 0) << r.out;
  const double factor = 0.1 * std::log(4.0) + 1.0;  // YaRN's mscale for factor 4
  EXPECT_NE(r.out.find("rope_type yarn"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("attention factor 1.1386"), std::string::npos) << r.out;
  const auto v = as_floats(tokpos::read_npy(path));
  for (size_t j = 0; j < 64; ++j) {
    EXPECT_NEAR(v[j], factor, 1e-7) << j;     // cos(0) * factor
    EXPECT_EQ(v[4 * 64 + j], 0.0f) << j;       // sin(0)
  }
  const auto f = as_doubles(tokpos::read_npy(scratch("cli_rope_yarn.inv_freq.npy")));
  EXPECT_DOUBLE_EQ(f[0], 1.0);                                 // the fastest pair is extrapolated: kept
  EXPECT_NEAR(f[31], std::pow(10000.0, -62.0 / 64) / 4, 1e-18);  // the slowest is interpolated: / factor
}

// proportional: --dim is the head dimension; the first
// int(partial_rotary_factor * D // 2) pairs rotate by base^(-2i/D) / factor,
// the rest have frequency 0 (cos 1, sin 0 at every position).
TEST(Cli, RopeProportionalRotatesTheFirstPairsOnly) {
  const auto path = scratch("cli_rope_proportional.npy");
  const auto r = run(
      "rope --dim 16 --positions 3:9 --scaling "
      "'{\"rope_type\":\"proportional\",\"factor\":2,\"partial_rotary_factor\":0.25}' --out " + path);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("rope_type proportional"), std::string::npos) << r.out;
  const auto f = as_doubles(tokpos::read_npy(scratch("cli_rope_proportional.inv_freq.npy")));
  ASSERT_EQ(f.size(), 8u);
  for (size_t i = 0; i < 8; ++i) {
    const double want = i < 2 ? std::pow(10000.0, -static_cast<double>(2 * i) / 16) / 2 : 0.0;
    EXPECT_NEAR(f[i], want, 4e-16 * want) << "inv_freq " << i;
  }
  const auto v = as_floats(tokpos::read_npy(path));
  ASSERT_EQ(v.size(), 2u * 6 * 16);
  for (size_t t = 0; t < 6; ++t) {
    const double p = static_cast<double>(3 + t);
    for (size_t i = 0; i < 8; ++i) {
      for (const size_t j : {i, i + 8}) {
        const float c = v[t * 16 + j], s = v[6 * 16 + t * 16 + j];
        if (i < 2) {
          EXPECT_LE(std::abs(c - cos_of_product(p, f[i])), std::ldexp(1.0, -24)) << p << " " << j;
          EXPECT_LE(std::abs(s - sin_of_product(p, f[i])), std::ldexp(1.0, -24)) << p << " " << j;
        } else {
          EXPECT_EQ(c, 1.0f) << p << " " << j;
          EXPECT_EQ(s, 0.0f) << p << " " << j;
        }
      }
    }
  }
}

TEST(Cli, RopeRejectsEveryBadFlagAndWritesNothing) {
  const auto path = scratch("cli_rope_bad.npy"), freq = scratch("cli_rope_bad.inv_freq.npy");
  struct Case {
    std::string args;
    std::vector<std::string> pieces;
  };
  const std::string ok = " --dim 8 --positions 0:4 --out " + path;
  for (const Case& c : {
           Case{"rope --dim 7 --positions 0:4 --out " + path, {"--dim 7", "even"}},
           Case{"rope --dim 0 --positions 0:4 --out " + path, {"--dim"}},
           Case{"rope --dim 8 --positions 5:5 --out " + path, {"--positions '5:5'", "B = 5 must be > A = 5"}},
           Case{"rope --dim 8 --positions -1:4 --out " + path, {"--positions '-1:4'", "A = -1 must be >= 0"}},
           Case{"rope --dim 8 --positions 0:2147483649 --out " + path, {"--positions", "2147483649", "2^31"}},
           Case{"rope --dim 8 --positions 3 --out " + path, {"--positions '3'", "A:B"}},
           Case{"rope --dim 8 --positions 0:x --out " + path, {"--positions '0:x'", "A:B"}},
           Case{"rope --dim 1024 --positions 0:2147483648 --out " + path, {"--positions", "2^27"}},
           Case{"rope --dim 8 --out " + path, {"--positions"}},
           Case{"rope --dim 8 --positions 0:4", {"--out"}},
           Case{"rope --layout sideways" + ok, {"--layout", "sideways"}},
           Case{"rope --base 0" + ok, {"--base", "'0'"}},
           Case{"rope --seq-len -3" + ok, {"--seq-len"}},
           Case{"rope --scaling 'not json'" + ok, {"--scaling 'not json'", "not JSON"}},
           Case{"rope --scaling '[1,2]'" + ok, {"--scaling", "JSON object"}},
           Case{"rope --scaling '{\"factor\":2}'" + ok, {"--scaling", "rope_type"}},
           Case{"rope --scaling '{\"rope_type\":\"sideways\"}'" + ok, {"--scaling", "sideways"}},
           Case{"rope --scaling '{\"rope_type\":\"linear\",\"factor\":\"2\"}'" + ok, {"'factor'", "number"}},
           Case{"rope --scaling '{\"rope_type\":\"linear\",\"factor\":-2}'" + ok, {"--scaling", "factor"}},
           Case{"rope --scaling '{\"rope_type\":\"linear\",\"factor\":2,\"bogus\":1}'" + ok, {"unknown key 'bogus'"}},
           Case{"rope --scaling '{\"rope_type\":\"yarn\",\"factor\":4}'" + ok,
                {"--scaling", "max_position_embeddings"}},
           Case{"rope --scaling '{\"rope_type\":\"proportional\",\"partial_rotary_factor\":1.5}'" + ok,
                {"--scaling", "partial_rotary_factor = 1.5 must be in (0, 1]"}},
           Case{"rope --scaling '{\"rope_type\":\"linear\",\"factor\":2,\"partial_rotary_factor\":0.5}'" + ok,
                {"--scaling", "'partial_rotary_factor' is read by proportional only", "--dim"}},
           Case{"rope --scaling '{\"rope_type\":\"llama3\",\"factor\":8,\"low_freq_factor\":4,\"high_freq_factor\":1,"
                "\"original_max_position_embeddings\":8192}'" + ok,
                {"low_freq_factor", "high_freq_factor"}},
           Case{"rope --dim 8 --positions 0:4 --out " + ::testing::TempDir(), {"cannot write"}},
       }) {
    std::remove(path.c_str());
    std::remove(freq.c_str());
    const auto r = run(c.args);
    EXPECT_NE(r.status, 0) << c.args << " -> " << r.out;
    for (const auto& piece : c.pieces) {
      EXPECT_NE(r.out.find(piece), std::string::npos) << c.args << " -> " << r.out << "\nmissing: " << piece;
    }
    EXPECT_FALSE(std::filesystem::exists(path)) << c.args;
    EXPECT_FALSE(std::filesystem::exists(freq)) << c.args;
  }
}

TEST(Cli, TableWritesTheLibrarysTable) {
  const auto path = scratch("cli_table.npy");
  const auto r = run("table --layout halves --dim 12 --context 20 --start 100 --base 500 --out " + path +
                     " --relative 3");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("(20, 12) f32, halves layout, positions 100..119"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("relative-position fit PE(p+3)"), std::string::npos) << r.out;
  const auto a = tokpos::read_npy(path);
  EXPECT_EQ(a.descr, "<f4");
  EXPECT_EQ(a.shape, (std::vector<int64_t>{20, 12}));
  const auto want = tokpos::position_table(20, 12, 100, {.layout = tokpos::Layout::kHalves, .base = 500});
  ASSERT_EQ(a.data.size(), want.size() * 4);
  EXPECT_EQ(std::memcmp(a.data.data(), want.data(), a.data.size()), 0);
}

TEST(Cli, TableDefaultsGiveTheSeedTableAndOtherDtypes) {
  const auto path = scratch("cli_seed.npy");
  ASSERT_EQ(run("table --dim 64 --context 128 --out " + path).status, 0);
  std::vector<float> seed(128 * 64);
  ASSERT_EQ(tokpos_sinusoidal_table(seed.data(), 128, 64, 10000.0), TOKPOS_OK);
  const auto a = tokpos::read_npy(path);
  EXPECT_EQ(std::memcmp(a.data.data(), seed.data(), seed.size() * 4), 0);
  // Near 2^24 without building 2^24 rows; bf16 as uint16 bits, f16 as numpy float16.
  const auto bf = scratch("cli_bf16.npy"), hf = scratch("cli_f16.npy");
  ASSERT_EQ(run("table --layout ggml --dim 8 --context 4 --start 16777214 --dtype bf16 --out " + bf).status,
            0);
  ASSERT_EQ(run("table --layout fairseq --padding-idx 1 --dim 9 --context 4 --dtype f16 --out " + hf).status,
            0);
  EXPECT_EQ(tokpos::read_npy(bf).descr, "<u2");
  EXPECT_EQ(tokpos::read_npy(hf).descr, "<f2");
  std::vector<uint16_t> want(4 * 8);
  tokpos::position_table(want.data(), tokpos::DType::kBF16, 4, 8, 16777214,
                         {.layout = tokpos::Layout::kGgml});
  EXPECT_EQ(std::memcmp(tokpos::read_npy(bf).data.data(), want.data(), want.size() * 2), 0);
}

TEST(Cli, TableRejectsBadArguments) {
  struct Case {
    std::string args;
    const char* message;
  };
  for (const Case& c :
       {Case{"table --dim 8 --context 4 --out /nonexistent-dir/t.npy", "cannot write /nonexistent-dir/t.npy"},
        Case{"table --dim 8 --context 4 --out /nonexistent-dir/t.npy", std::strerror(ENOENT)},
        Case{"table --dim 8 --context 4 --out " + ::testing::TempDir(), "cannot"},
        Case{"table --dim 8 --context 4", "--out"},
        Case{"table --layout sideways --dim 8 --context 4 --out x.npy", "--layout"},
        Case{"table --dtype f64 --dim 8 --context 4 --out x.npy", "--dtype"},
        Case{"table --dim 0 --context 4 --out x.npy", "--dim"},
        Case{"table --padding-idx 1 --dim 8 --context 4 --out x.npy", "fairseq"}}) {
    const auto r = run(c.args);
    EXPECT_NE(r.status, 0) << c.args;
    EXPECT_NE(r.out.find(c.message), std::string::npos) << c.args << " -> " << r.out;
  }
}

std::string data(const std::string& name) {
  return std::string(TOKPOS_TEST_DATA) + "/safetensors/" + name;
}

TEST(Cli, EmbedRunsAPresetAndWritesTheOutput) {
  const auto path = scratch("embed.npy");
  const auto r = run("embed --weights " + data("tiny_bert.safetensors") +
                     " --preset bert --ids 5,0,3 --token-types 0,1,1 --out " + path);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("bert preset"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(B, T) = (1, 3) -> output (B, T, D) = (1, 3, 4)"), std::string::npos) << r.out;
  const auto a = tokpos::read_npy(path);
  EXPECT_EQ(a.shape, (std::vector<int64_t>{1, 3, 4}));
  // GPT-2 with a left-padded batch: positions from the mask.
  const auto g = run("embed --weights " + data("tiny_gpt2.safetensors") +
                     " --preset gpt2 --ids '4,0;1,2' --mask '0,1;1,1'");
  ASSERT_EQ(g.status, 0) << g.out;
  EXPECT_NE(g.out.find("positions from the attention mask"), std::string::npos) << g.out;
}

TEST(Cli, EmbedRejectsBadInput) {
  struct Case {
    std::string args;
    const char* message;
  };
  const std::string bert = " --weights " + data("tiny_bert.safetensors");
  for (const Case& c :
       {Case{"embed --preset bert --ids 1" + std::string(" --weights ") + data("truncated.safetensors"),
             "outside the data area"},
        Case{"embed --preset bert --ids 1 --weights /nonexistent-dir/w.safetensors",
             "cannot open /nonexistent-dir/w.safetensors"},
        Case{"embed --preset bert --ids 1 --weights /nonexistent-dir/w.safetensors", std::strerror(ENOENT)},
        Case{"embed --preset gpt2 --ids 1" + bert, "missing tensor 'wte.weight'"},
        Case{"embed --preset bert --ids 1,x" + bert, "'x' is not an integer"},
        Case{"embed --preset bert --ids '1,2;3'" + bert, "row 1 has 1 values"},
        Case{"embed --preset bert --ids 9" + bert, "token id 9 at (b=0, t=0) is outside [0, 6)"},
        Case{"embed --preset bert --ids 1 --map word" + bert, "is not ROLE=NAME"},
        Case{"embed --preset bert --ids 1 --map word=nope" + bert, "missing tensor 'nope'"},
        Case{"embed --preset bert --ids 1 --mask 1" + bert, "gpt2 preset"}}) {
    const auto r = run(c.args);
    EXPECT_NE(r.status, 0) << c.args;
    EXPECT_NE(r.out.find(c.message), std::string::npos) << c.args << " -> " << r.out;
  }
}

TEST(Cli, PlotWritesPicturesAndRejectsABadOut) {
  const auto dir = scratch("cli_plots");
  const auto r = run("plot --dim 16 --context 32 --out " + dir);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("wrote " + dir + "/lookup.png"), std::string::npos) << r.out;
  const auto bad = run("plot --out /dev/null/plots");
  EXPECT_NE(bad.status, 0);
  EXPECT_NE(bad.out.find("cannot create --out directory"), std::string::npos) << bad.out;
  EXPECT_NE(run("plot --dim 1").status, 0);
}

std::string slurp(const std::string& path) {
  std::string s;
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return "<missing>";
  std::array<char, 4096> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), f)) > 0) s.append(buf.data(), n);
  std::fclose(f);
  return s;
}

// name -> size and hash of every entry of dir (directories as "<dir>").
std::map<std::string, std::string> snapshot(const std::string& dir) {
  std::map<std::string, std::string> m;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.is_directory()) {
      m[e.path().filename().string()] = "<dir>";
    } else {
      const auto bytes = slurp(e.path().string());  // size and hash: short messages on a mismatch
      m[e.path().filename().string()] =
          std::to_string(bytes.size()) + " bytes, hash " + std::to_string(std::hash<std::string>{}(bytes));
    }
  }
  return m;
}

TEST(Cli, DemoEscapesControlBytesTheSameEveryRun) {
  // The bytes go inside single quotes, which sh passes through unchanged.
  const std::string args = "demo --text '" + std::string("\x01\x1b\n") + "'";
  const auto a = run(args), b = run(args);
  ASSERT_EQ(a.status, 0) << a.out;
  EXPECT_NE(a.out.find("text     \"\\x01\\x1b\\x0a\"  (3 bytes)"), std::string::npos) << a.out;
  EXPECT_EQ(a.out, b.out);
}

TEST(Cli, DemoJsonReplacesInvalidUtf8AndSaysSo) {
  const auto r = run("demo --json --text '" + std::string("a\xff") + "'");
  ASSERT_EQ(r.status, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["text"], "a\xef\xbf\xbd");  // U+FFFD for the bad byte
  EXPECT_EQ(j["text_is_utf8"], false);
  EXPECT_EQ(j["text_bytes_hex"], "61ff");
  EXPECT_NE(j["text_note"].get<std::string>().find("U+FFFD"), std::string::npos);
  EXPECT_EQ(j["ids"], (nlohmann::json{97 + 4, 255 + 4}));  // the ids keep the real bytes
  const auto ok = run_json("--text 'caf\xc3\xa9'");
  EXPECT_EQ(ok["text"], "caf\xc3\xa9");
  EXPECT_EQ(ok["text_is_utf8"], true);
  EXPECT_FALSE(ok.contains("text_bytes_hex"));
}

TEST(Cli, TableOutOfMemoryNamesTheBytes) {
#ifdef TOKPOS_TEST_SANITIZED
  GTEST_SKIP() << "AddressSanitizer reserves terabytes of shadow memory, which no address-space limit admits";
#endif
  const auto path = scratch("cli_oom." + std::to_string(getpid()) + ".npy");
  const auto r = run_shell("bash -c 'ulimit -v 4000000; exec " + std::string(TOKPOS_CLI) +
                           " table --dim 4096 --context 1000000 --out " + path + "'");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_EQ(r.out.find("internal error"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("cannot allocate"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("16384000000 bytes"), std::string::npos) << r.out;
}

TEST(Cli, FailedCommandsLeaveThePreviousFile) {
  const auto path = scratch("cli_keep." + std::to_string(getpid()) + ".npy");
  auto old = [&] {
    FILE* f = std::fopen(path.c_str(), "wb");
    std::fputs("OLD\n", f);
    std::fclose(f);
  };
  old();
  auto r = run("table --dim 8 --context 4 --relative 9 --out " + path);
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("--relative"), std::string::npos) << r.out;
  EXPECT_EQ(slurp(path), "OLD\n");
  r = run("table --dtype f16 --dim 8 --context 4 --relative 1 --out " + path);  // a fit it cannot report
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("--relative"), std::string::npos) << r.out;
  EXPECT_EQ(slurp(path), "OLD\n");
  r = run("embed --weights " + data("tiny_bert.safetensors") + " --ids 5,0 --token-types 0,2 --out " + path);
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_EQ(slurp(path), "OLD\n");
  std::remove(path.c_str());
}

TEST(Cli, SeedOutsideItsRangeIsRefused) {
  const std::string plot = "plot --dim 8 --context 8 --out " + scratch("cli_seed_plots");
  for (const std::string& command : {std::string("demo"), plot}) {
    for (const char* seed : {"-1", "18446744073709551616", "1e23", "99999999999999999999999", "1.5", "x"}) {
      const auto r = run(command + " --seed " + seed);
      EXPECT_NE(r.status, 0) << command << " --seed " << seed << " -> " << r.out;
      EXPECT_NE(r.out.find("--seed"), std::string::npos) << command << " --seed " << seed << " -> " << r.out;
    }
  }
  const auto j = run_json("--seed 18446744073709551615 --context 32");
  EXPECT_EQ(j["config"]["seed"].get<uint64_t>(), 18446744073709551615ull);
}

TEST(Cli, EmbedRefusesFlagsItWouldIgnore) {
  struct Case {
    std::string args;
    std::vector<std::string> pieces;
  };
  const std::string bert = "embed --preset bert --ids 1 --weights " + data("tiny_bert.safetensors");
  const std::string gpt2 = "embed --preset gpt2 --ids 1 --weights " + data("tiny_gpt2.safetensors");
  for (const Case& c : {Case{bert + " --map bogus=foo", {"--map", "bogus"}},
                        Case{bert + " --map wte=foo", {"--map", "wte", "gpt2"}},
                        Case{bert + " --map word=a --map word=b", {"--map", "word", "twice"}},
                        Case{bert + " --map word=a,word=b", {"--map", "word", "twice"}},
                        Case{gpt2 + " --eps 1e-5", {"--eps", "bert"}},
                        Case{gpt2 + " --no-layer-norm", {"--no-layer-norm", "bert"}}}) {
    const auto r = run(c.args);
    EXPECT_EQ(r.status, 1) << c.args << " -> " << r.out;
    for (const auto& p : c.pieces) EXPECT_NE(r.out.find(p), std::string::npos) << c.args << " -> " << r.out;
  }
  EXPECT_EQ(run(bert + " --eps 1e-5").status, 0);
  EXPECT_EQ(run(gpt2 + " --map wte=wte.weight").status, 0);
}

TEST(Cli, EmbedNamesTokenTypesInTheirRangeError) {
  const auto r = run("embed --weights " + data("tiny_bert.safetensors") + " --ids 5,0 --token-types 0,2");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("--token-types"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("2 at (b=0, t=1) is outside [0, 2)"), std::string::npos) << r.out;
  const auto neg = run("embed --weights " + data("tiny_bert.safetensors") + " --ids 5,0 --token-types 0,-1");
  EXPECT_EQ(neg.status, 1) << neg.out;
  EXPECT_NE(neg.out.find("--token-types"), std::string::npos) << neg.out;
}

TEST(Cli, BaseErrorsAreReadable) {
  for (const char* args : {"demo --base 0", "demo --base -3", "demo --base inf", "table --dim 8 --context 4 --out x.npy --base 0",
                           "table --dim 8 --context 4 --out x.npy --min-timescale 0", "plot --base 0"}) {
    const auto r = run(args);
    EXPECT_NE(r.status, 0) << args;
    EXPECT_NE(r.out.find("--base") == std::string::npos ? r.out.find("--min-timescale") : 0, std::string::npos)
        << args << " -> " << r.out;
    EXPECT_NE(r.out.find("finite"), std::string::npos) << args << " -> " << r.out;
    EXPECT_LT(r.out.size(), 300u) << args << " -> " << r.out;  // no 300-digit bound
  }
  // Every command takes the library's base, finite and > 0: the demo reports
  // wavelengths that shrink with the pair (base < 1) or stay (base = 1) too.
  for (const char* base : {"0.5", "1", "1.5"}) {
    const auto r = run(std::string("demo --base ") + base);
    EXPECT_EQ(r.status, 0) << r.out;
    EXPECT_NE(r.out.find(std::string("base = ") + base + ": 32 sin/cos pairs"), std::string::npos) << r.out;
  }
  const auto shrinking = run("demo --base 0.5");
  EXPECT_NE(shrinking.out.find("shortest 3.21, longest 6 positions"), std::string::npos) << shrinking.out;
}

// Every printed wavelength band holds a readable, non-empty range [lower,
// upper) with 0 < lower < upper, whatever the base; a base below 1 (or of 1)
// says what it does, in both languages.
TEST(Cli, WavelengthBandsAreReadableForEveryBase) {
  for (const char* base : {"1e-5", "0.5", "1", "10000", "1e6"}) {
    for (const char* lang : {"en", "zh"}) {
      const auto r = run(std::string("demo --lang ") + lang + " --base " + base);
      ASSERT_EQ(r.status, 0) << r.out;
      int bands = 0;
      std::istringstream lines(r.out);
      for (std::string line; std::getline(lines, line);) {
        // A band line: "  [   lower,    upper)  pairs ..." with grouped digits.
        const size_t open = line.find('['), comma = line.find(", ", open), close = line.find(')', comma);
        if (open != 2 || comma == std::string::npos || close == std::string::npos) continue;
        auto number = [](std::string s) {
          std::erase(s, ',');
          return std::stod(s);
        };
        const double lower = number(line.substr(open + 1, comma - open - 1));
        const double upper = number(line.substr(comma + 2, close - comma - 2));
        EXPECT_GT(lower, 0) << base << " " << lang << ": " << line;
        EXPECT_LT(lower, upper) << base << " " << lang << ": " << line;
        ++bands;
      }
      EXPECT_GT(bands, 0) << r.out;
      const bool below = std::stod(base) < 1, one = std::stod(base) == 1;
      const char* note = below ? (lang[0] == 'e' ? "base < 1:" : "底数 < 1：") : (lang[0] == 'e' ? "base = 1:" : "底数 = 1：");
      EXPECT_EQ(r.out.find(note) != std::string::npos, below || one) << base << " " << lang << ": " << r.out;
    }
  }
}

TEST(Cli, ProgressOnlyOnATerminal) {
  const auto dir = scratch("cli_progress." + std::to_string(getpid()));
  const auto quiet = run("plot --dim 8 --context 8 --out " + dir);
  ASSERT_EQ(quiet.status, 0) << quiet.out;
  EXPECT_EQ(quiet.out.find("plot: ["), std::string::npos) << quiet.out;  // stderr is a pipe
  EXPECT_EQ(run("demo").out.find("demo: ["), std::string::npos);
  const auto forced = run_shell("TOKPOS_PROGRESS=1 " + std::string(TOKPOS_CLI) + " plot --dim 8 --context 8 --out " + dir);
  ASSERT_EQ(forced.status, 0) << forced.out;
  EXPECT_NE(forced.out.find("plot: ["), std::string::npos) << forced.out;
  EXPECT_NE(forced.out.find("similarity_matrix"), std::string::npos) << forced.out;
  const auto demo = run_shell("TOKPOS_PROGRESS=1 " + std::string(TOKPOS_CLI) + " demo");
  ASSERT_EQ(demo.status, 0) << demo.out;
  EXPECT_NE(demo.out.find("demo: ["), std::string::npos) << demo.out;
  EXPECT_EQ(run_shell("TOKPOS_PROGRESS=0 " + std::string(TOKPOS_CLI) + " demo").out.find("demo: ["), std::string::npos);
  // A real terminal, where util-linux script(1) is there to give one.
  if (run_shell("command -v script").status != 0) GTEST_SKIP() << "no script(1) to run under a terminal";
  const auto tty = run_shell("script -qec '" + std::string(TOKPOS_CLI) + " plot --dim 8 --context 8 --out " + dir +
                             "' /dev/null");
  EXPECT_EQ(tty.status, 0) << tty.out;
  EXPECT_NE(tty.out.find("plot: ["), std::string::npos) << tty.out;
}

TEST(Cli, InterruptedOrFailedPlotKeepsThePreviousPictures) {
  const auto dir = scratch("cli_plots_keep." + std::to_string(getpid()));  // other build trees run this too
  std::filesystem::remove_all(dir);
  ASSERT_EQ(run("plot --dim 8 --context 8 --out " + dir).status, 0);
  const auto before = snapshot(dir);
  ASSERT_EQ(before.size(), 16u);  // 8 pictures, PNG and SVG
  // Interrupted while it works (the full run takes minutes).
  auto r = run_shell("timeout -s INT 4 " + std::string(TOKPOS_CLI) + " plot --dim 4096 --context 2048 --out " + dir);
  EXPECT_NE(r.status, 0) << r.out;
  EXPECT_EQ(snapshot(dir), before);
  // A failure at the last picture: a directory stands where alibi_slopes.png goes.
  std::filesystem::remove(dir + "/alibi_slopes.png");
  std::filesystem::create_directory(dir + "/alibi_slopes.png");
  auto with_dir = before;
  with_dir["alibi_slopes.png"] = "<dir>";
  r = run("plot --dim 16 --context 16 --out " + dir);
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("alibi_slopes.png"), std::string::npos) << r.out;
  EXPECT_EQ(snapshot(dir), with_dir);  // nothing replaced, no temporary files
  std::filesystem::remove_all(dir);
}

TEST(Cli, Version) {
  const auto r = run("--version");
  EXPECT_EQ(r.status, 0);
  EXPECT_NE(r.out.find("0.1.0"), std::string::npos);
}

// --out never replaces what is not a regular file: a FIFO, a character device
// (as root), a directory; a symbolic link is followed, so the file it points
// to is replaced and the link stays a link.
TEST(Cli, TableOutRefusesWhatIsNotARegularFileAndFollowsLinks) {
  const auto dir = scratch("cli_out_kinds_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const auto fifo = dir + "/fifo.npy";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0) << std::strerror(errno);
  auto r = run("table --dim 8 --context 4 --out " + fifo);
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("cannot write " + fifo + ": it is a FIFO, not a regular file"), std::string::npos) << r.out;
  EXPECT_TRUE(std::filesystem::is_fifo(std::filesystem::symlink_status(fifo)));
  if (::geteuid() == 0) {
    const auto null = dir + "/mynull";
    ASSERT_EQ(::mknod(null.c_str(), S_IFCHR | 0666, makedev(1, 3)), 0) << std::strerror(errno);
    r = run("table --dim 8 --context 4 --out " + null);
    EXPECT_EQ(r.status, 1) << r.out;
    EXPECT_NE(r.out.find("cannot write " + null + ": it is a character device"), std::string::npos) << r.out;
    EXPECT_TRUE(std::filesystem::is_character_file(std::filesystem::symlink_status(null)));
  }
  const auto real = dir + "/real.npy", link = dir + "/link.npy";
  ASSERT_EQ(run("table --dim 8 --context 4 --out " + real).status, 0);
  std::filesystem::create_symlink("real.npy", link);
  r = run("table --dim 8 --context 6 --out " + link);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(std::filesystem::is_symlink(std::filesystem::symlink_status(link)));
  EXPECT_EQ(tokpos::read_npy(real).shape, (std::vector<int64_t>{6, 8}));
  std::filesystem::create_symlink("gone.npy", dir + "/dangling.npy");
  r = run("table --dim 8 --context 4 --out " + dir + "/dangling.npy");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("does not exist"), std::string::npos) << r.out;
  EXPECT_FALSE(std::filesystem::exists(dir + "/gone.npy"));
  std::filesystem::remove_all(dir);
}

// A link planted at the old, predictable temporary name (OUT.tmp.<pid>, the
// pid known in advance through exec) does not redirect the write.
TEST(Cli, TableOutIgnoresAPlantedTemporaryName) {
  const auto dir = scratch("cli_plant_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  { std::ofstream(dir + "/victim.txt") << "precious"; }
  const std::string cmd = "cd " + dir + " && bash -c 'ln -s victim.txt plant.npy.tmp.$$; exec " +
                          std::string(TOKPOS_CLI) + " table --dim 8 --context 4 --out plant.npy' 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) out.append(buf.data(), n);
  EXPECT_EQ(pclose(pipe), 0) << out;
  std::ifstream in(dir + "/victim.txt");
  EXPECT_EQ(std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>()), "precious");
  EXPECT_EQ(tokpos::read_npy(dir + "/plant.npy").shape, (std::vector<int64_t>{4, 8}));
  std::filesystem::remove_all(dir);
}

// --weights that is not a regular file is refused by name; a FIFO must not
// hang in open() (run under timeout(1): exit 124 if it does).
TEST(Cli, EmbedRefusesWeightsThatAreNotRegularFiles) {
  const auto fifo = scratch("cli_weights_fifo_" + std::to_string(::getpid()));
  ::unlink(fifo.c_str());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0) << std::strerror(errno);
  const std::string cmd =
      "timeout 10 " + std::string(TOKPOS_CLI) + " embed --preset gpt2 --ids 1 --weights " + fifo + " 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) out.append(buf.data(), n);
  const int st = pclose(pipe);
  ::unlink(fifo.c_str());
  ASSERT_TRUE(WIFEXITED(st));
  EXPECT_EQ(WEXITSTATUS(st), 1) << out;  // 124: timed out
  EXPECT_NE(out.find("cannot open " + fifo + ": it is a FIFO, not a regular file"), std::string::npos) << out;
  auto r = run("embed --preset gpt2 --ids 1 --weights /dev/zero");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("cannot open /dev/zero: it is a character device, not a regular file"), std::string::npos)
      << r.out;
  r = run("embed --preset gpt2 --ids 1 --weights " + ::testing::TempDir());
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("a directory, not a regular file"), std::string::npos) << r.out;
}

}  // namespace

// DeferSignals (apps/tokpos/plot/progress.h) holds SIGINT, SIGTERM and SIGHUP
// in every thread of the process, not only the one that opened the window:
// a signal sent while another thread runs waits until the window closes,
// then ends the process as it would have. Outside a window it acts at once.
#include <atomic>
#include <csignal>
#include <thread>

#include "../apps/tokpos/plot/progress.h"

namespace {

TEST(Cli, DeferSignalsHoldsASignalWhileAnotherThreadRuns) {
  for (const int sig : {SIGINT, SIGTERM, SIGHUP}) {
    EXPECT_EXIT(
        {
          std::atomic<bool> stop{false};
          std::thread worker([&stop] {
            while (!stop) ::usleep(1000);
          });
          {
            tokpos::plot::DeferSignals defer;
            ::kill(::getpid(), sig);
            ::usleep(200 * 1000);  // delivered by now, to the worker unless it is held
            std::fputs("written\n", stderr);
            stop = true;
            worker.join();
          }
          std::fputs("survived the signal\n", stderr);
          std::exit(0);
        },
        ::testing::KilledBySignal(sig), "written")
        << strsignal(sig);
  }
  // After a window closes, the signal acts at once again.
  EXPECT_EXIT(
      {
        { tokpos::plot::DeferSignals defer; }
        ::kill(::getpid(), SIGINT);
        ::usleep(200 * 1000);
        std::exit(0);
      },
      ::testing::KilledBySignal(SIGINT), "");
}

// The command lines of three reports: a FIFO where an SVG goes, a title cut
// in the middle of a character, t2t timescales at both ends of the double range.
TEST(Cli, PlotWithAFifoInTheWayReplacesNoPicture) {
  const auto dir = scratch("cli_plot_fifo." + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  ASSERT_EQ(run("plot --dim 8 --context 8 --out " + dir).status, 0);
  std::filesystem::remove(dir + "/wavelength_bands.svg");
  ASSERT_EQ(::mkfifo((dir + "/wavelength_bands.svg").c_str(), 0644), 0) << std::strerror(errno);
  std::map<std::string, std::string> before;  // snapshot() would open the FIFO and wait
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() == ".png") before[e.path().filename().string()] = slurp(e.path().string());
  }
  ASSERT_EQ(before.size(), 8u);
  const auto r = run("plot --dim 16 --context 16 --out " + dir);
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("cannot write " + dir + "/wavelength_bands.svg: it is a FIFO"), std::string::npos) << r.out;
  for (const auto& [name, bytes] : before) EXPECT_EQ(slurp(dir + "/" + name), bytes) << name;
  EXPECT_TRUE(std::filesystem::is_fifo(std::filesystem::symlink_status(dir + "/wavelength_bands.svg")));
  int entries = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir)) ++entries;
  EXPECT_EQ(entries, 16);  // no temporary file
  std::filesystem::remove_all(dir);
}

TEST(Cli, PlotTextWithACharacterAcrossTheTitlesCut) {
  const auto dir = scratch("cli_plot_utf8." + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  const auto r = run("plot --dim 8 --context 8 --text 'Hello w\xC3\xB6rld' --out " + dir);
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("lookup.png"), std::string::npos) << r.out;
  std::filesystem::remove_all(dir);
}

TEST(Cli, TableRefusesT2tTimescalesWhoseAnglesCannotBeComputed) {
  const auto out = scratch("cli_t2t_extreme." + std::to_string(::getpid()) + ".npy");
  std::filesystem::remove(out);
  const auto r = run("table --layout t2t --base 1e-308 --min-timescale 1e308 --dim 16 --context 2 --out " + out);
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("base = 1e-308 with min_timescale = 1e+308"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("exceeds the limit 2^58"), std::string::npos) << r.out;
  EXPECT_FALSE(std::filesystem::exists(out));
}

}  // namespace
