// tokpos serve, run as a user would: the tool is started as a child process
// on a free port (--port 0), driven over HTTP with httplib::Client and raw
// sockets, and stopped with SIGTERM or SIGINT (exit status 0). Every number
// is checked against the library's C API, never against the server's code.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <map>
#include <span>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "serve_process.h"
#include "tokpos/diagnostics.h"
#include "tokpos/error.h"
#include "tokpos/position_table.h"
#include "tokpos/tokpos.h"

namespace {

using serve_test::read_until;
using serve_test::ServerProcess;
using json = nlohmann::json;
// Parses numbers as float (strtof), so each table value reads back exactly.
using float_json = nlohmann::basic_json<std::map, std::vector, std::string, bool, std::int64_t, std::uint64_t, float>;

std::string percent_encode(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      char b[4];
      std::snprintf(b, sizeof b, "%%%02X", c);
      out += b;
    }
  }
  return out;
}

// What the C API gives for one configuration: the token table, the position
// table and the fused sum for the byte tokens of text.
struct Expected {
  std::vector<int64_t> ids;
  std::vector<float> token_table, pos_table, sum;
};

Expected expected(const std::string& text, int64_t V, int64_t D, int64_t L, uint64_t seed, bool learned,
                  tokpos_layout layout, double base) {
  Expected e;
  for (unsigned char c : text) e.ids.push_back(int64_t{c} + 4);
  tokpos_token_embedding* tok = nullptr;
  EXPECT_EQ(tokpos_token_embedding_create(&tok, V, D, seed), TOKPOS_OK);
  const float* t = nullptr;
  EXPECT_EQ(tokpos_token_embedding_table(tok, &t), TOKPOS_OK);
  e.token_table.assign(t, t + V * D);
  tokpos_token_embedding_free(tok);
  e.pos_table.resize(static_cast<size_t>(L * D));
  if (learned) {
    tokpos_position_embedding* pos = nullptr;
    EXPECT_EQ(tokpos_position_embedding_create_learned(&pos, L, D, seed), TOKPOS_OK);
    const float* p = nullptr;
    EXPECT_EQ(tokpos_position_embedding_table(pos, &p), TOKPOS_OK);
    std::copy(p, p + L * D, e.pos_table.begin());
    tokpos_position_embedding_free(pos);
  } else {
    EXPECT_EQ(tokpos_sinusoidal_table_ex(e.pos_table.data(), TOKPOS_DTYPE_F32, L, D, 0, layout, base, 1.0, -1),
              TOKPOS_OK);
  }
  const auto T = static_cast<int64_t>(e.ids.size());
  e.sum.resize(static_cast<size_t>(T * D));
  EXPECT_EQ(tokpos_compose_forward(e.sum.data(), e.ids.data(), 1, T, e.token_table.data(), V, e.pos_table.data(), L, D),
            TOKPOS_OK);
  return e;
}

// Every value of a (T, D) JSON array against rows of a table, bit for bit.
void expect_rows(const float_json& got, const float* want, int64_t T, int64_t D, const std::string& what) {
  ASSERT_TRUE(got.is_array()) << what;
  ASSERT_EQ(got.size(), static_cast<size_t>(T)) << what;
  for (int64_t t = 0; t < T; ++t) {
    ASSERT_EQ(got[t].size(), static_cast<size_t>(D)) << what;
    for (int64_t d = 0; d < D; ++d) {
      const float g = got[t][d].get<float>(), w = want[t * D + d];
      ASSERT_EQ(std::bit_cast<uint32_t>(g), std::bit_cast<uint32_t>(w)) << what << " at (" << t << ", " << d << "): " << g << " vs " << w;
    }
  }
}

class Serve : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = new ServerProcess();
    ready_ = server_->wait_ready();
  }
  static void TearDownTestSuite() {
    // A clean stop on SIGTERM: exit status 0.
    const int status = server_->stop(SIGTERM);
    EXPECT_EQ(status, 0) << server_->out();
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override { ASSERT_TRUE(ready_) << "the server did not start: " << server_->out(); }

  static httplib::Client client() {
    httplib::Client cli("127.0.0.1", server_->port());
    cli.set_read_timeout(30, 0);
    return cli;
  }
  static httplib::Result get(const std::string& path) { return client().Get(path); }

  // A 400 whose error names the parameter and contains every piece of `has`.
  static void expect_bad(const std::string& path, const std::string& parameter, std::vector<std::string> has) {
    auto res = get(path);
    ASSERT_TRUE(res) << path;
    EXPECT_EQ(res->status, 400) << path << " -> " << res->body;
    EXPECT_EQ(res->get_header_value("Content-Type"), "application/json; charset=utf-8") << path;
    const json j = json::parse(res->body);
    ASSERT_TRUE(j.contains("error") && j["error"].is_string()) << res->body;
    EXPECT_EQ(j.value("parameter", ""), parameter) << path << " -> " << res->body;
    const std::string error = j["error"];
    EXPECT_NE(error.find(parameter), std::string::npos) << path << " -> " << error;
    for (const auto& h : has) EXPECT_NE(error.find(h), std::string::npos) << path << " -> " << error << " lacks " << h;
  }

  static ServerProcess* server_;
  static bool ready_;
};
ServerProcess* Serve::server_ = nullptr;
bool Serve::ready_ = false;

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

TEST_F(Serve, PrintsItsLoopbackUrl) {
  EXPECT_EQ(server_->url(), "http://127.0.0.1:" + std::to_string(server_->port()) + "/") << server_->out();
  EXPECT_GT(server_->port(), 0);
}

TEST_F(Serve, ServesThePageCompiledInWithContentTypes) {
  const std::map<std::string, std::pair<std::string, std::string>> files = {
      {"/", {"index.html", "text/html; charset=utf-8"}},
      {"/index.html", {"index.html", "text/html; charset=utf-8"}},
      {"/app.js", {"app.js", "text/javascript; charset=utf-8"}},
      {"/style.css", {"style.css", "text/css; charset=utf-8"}}};
  for (const auto& [path, file] : files) {
    auto res = get(path);
    ASSERT_TRUE(res) << path;
    EXPECT_EQ(res->status, 200) << path;
    EXPECT_EQ(res->get_header_value("Content-Type"), file.second) << path;
    EXPECT_EQ(res->get_header_value("X-Content-Type-Options"), "nosniff") << path;
    EXPECT_NE(res->get_header_value("Content-Security-Policy").find("default-src 'self'"), std::string::npos);
    EXPECT_EQ(res->body, read_file(std::string(TOKPOS_SERVE_ASSETS) + "/" + file.first)) << path;
    EXPECT_FALSE(res->body.empty()) << path;
  }
  // HEAD: the headers of GET, no body.
  auto head = client().Head("/app.js");
  ASSERT_TRUE(head);
  EXPECT_EQ(head->status, 200);
  EXPECT_TRUE(head->body.empty());
  EXPECT_EQ(head->get_header_value("Content-Type"), "text/javascript; charset=utf-8");
  EXPECT_EQ(head->get_header_value("Content-Length"), std::to_string(read_file(std::string(TOKPOS_SERVE_ASSETS) + "/app.js").size()));
}

TEST_F(Serve, EmbedHiGivesTheByteIdsAndTheCApiSumBitForBit) {
  auto res = get("/api/embed?text=Hi");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(res->get_header_value("Content-Type"), "application/json; charset=utf-8");
  const float_json j = float_json::parse(res->body);
  EXPECT_EQ(j["ids"], float_json({76, 109}));
  EXPECT_EQ(j["shape"], float_json({1, 2, 64}));
  EXPECT_EQ(j["parameters"]["token"], 260 * 64);
  EXPECT_EQ(j["parameters"]["position"], 0);
  const Expected e = expected("Hi", 260, 64, 128, 0, false, TOKPOS_LAYOUT_INTERLEAVED, 10000.0);
  std::vector<float> token_rows;
  for (int64_t id : e.ids) token_rows.insert(token_rows.end(), e.token_table.begin() + id * 64, e.token_table.begin() + (id + 1) * 64);
  expect_rows(j["token_rows"], token_rows.data(), 2, 64, "token_rows");
  expect_rows(j["position_rows"], e.pos_table.data(), 2, 64, "position_rows");
  expect_rows(j["sum"], e.sum.data(), 2, 64, "sum");
}

TEST_F(Serve, ApiAnswersGoOutUncompressedWhateverTheClientAccepts) {
  // A browser always offers Brotli; compressing a large answer would cost
  // far more than computing it.
  auto res = client().Get("/api/embed?text=Hello&dim=64", {{"Accept-Encoding", "br, gzip, deflate"}});
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_FALSE(res->has_header("Content-Encoding")) << res->get_header_value("Content-Encoding");
  EXPECT_EQ(json::parse(res->body)["ids"].size(), 5u);
}

TEST_F(Serve, EmbedEveryLayoutAndLearnedPositionsMatchTheCApi) {
  struct Case {
    const char* layout;
    tokpos_layout c;
  };
  const Case layouts[] = {{"interleaved", TOKPOS_LAYOUT_INTERLEAVED}, {"halves", TOKPOS_LAYOUT_HALVES},
                          {"fairseq", TOKPOS_LAYOUT_FAIRSEQ},         {"t2t", TOKPOS_LAYOUT_T2T},
                          {"ggml", TOKPOS_LAYOUT_GGML}};
  const std::string text = "tokens + positions: \xc3\xa9t\xc3\xa9 \x01\xff";
  const std::vector<std::tuple<int64_t, int64_t, int64_t, uint64_t, double>> configs = {
      {7, 40, 260, 3, 100.0}, {64, 128, 300, 18446744073709551615ull, 10000.0}, {2, 32, 260, 42, 1.5}};
  for (const auto& [D, L, V, seed, base] : configs) {
    for (const bool learned : {false, true}) {
      for (const Case& c : layouts) {
        if (learned && c.c != TOKPOS_LAYOUT_INTERLEAVED) continue;  // layout and base do not apply
        std::ostringstream path;
        path.precision(17);
        path << "/api/embed?text=" << percent_encode(text) << "&dim=" << D << "&context=" << L << "&vocab=" << V
             << "&seed=" << seed << "&base=" << base << "&layout=" << c.layout
             << "&positions=" << (learned ? "learned" : "sinusoidal");
        auto res = get(path.str());
        ASSERT_TRUE(res) << path.str();
        ASSERT_EQ(res->status, 200) << path.str() << " -> " << res->body;
        const float_json j = float_json::parse(res->body);
        const Expected e = expected(text, V, D, L, seed, learned, c.c, base);
        const auto T = static_cast<int64_t>(e.ids.size());
        EXPECT_EQ(j["ids"].get<std::vector<int64_t>>(), e.ids);
        EXPECT_EQ(j["shape"], float_json({1, T, D}));
        EXPECT_EQ(j["parameters"]["token"], V * D);
        EXPECT_EQ(j["parameters"]["position"], learned ? L * D : 0);
        expect_rows(j["position_rows"], e.pos_table.data(), T, D, path.str() + " position_rows");
        expect_rows(j["sum"], e.sum.data(), T, D, path.str() + " sum");
      }
    }
  }
}

TEST_F(Serve, EmbedOfEmptyTextIsAnEmptyBatch) {
  auto res = get("/api/embed?text=&dim=8");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  const json j = json::parse(res->body);
  EXPECT_EQ(j["ids"], json::array());
  EXPECT_EQ(j["shape"], json({1, 0, 8}));
  EXPECT_EQ(j["sum"], json::array());
}

TEST_F(Serve, SimilarityMatchesTheLibraryDiagnostics) {
  for (const bool learned : {false, true}) {
    const int64_t L = 48, D = 16;
    const std::string path = std::string("/api/similarity?dim=16&context=48&layout=halves&base=500&seed=9&positions=") +
                             (learned ? "learned" : "sinusoidal");
    auto res = get(path);
    ASSERT_TRUE(res);
    ASSERT_EQ(res->status, 200) << res->body;
    const json j = json::parse(res->body);
    const Expected e = expected("", 260, D, L, 9, learned, TOKPOS_LAYOUT_HALVES, 500.0);
    const auto adj = tokpos::adjacent_cosine(e.pos_table, L, D);
    EXPECT_EQ(j["adjacent"].get<std::vector<double>>(), adj);
    const auto by = tokpos::cosine_by_offset(e.pos_table, L, D, L - 1);
    EXPECT_EQ(j["by_offset"]["mean_cosine"].get<std::vector<double>>(), by);
    ASSERT_EQ(j["by_offset"]["offsets"].size(), static_cast<size_t>(L));
    EXPECT_EQ(j["by_offset"]["offsets"][L - 1], L - 1);
    ASSERT_EQ(j["matrix"].size(), static_cast<size_t>(L));
    EXPECT_TRUE(j["matrix_omitted"].is_null());
    const std::span<const float> t(e.pos_table);
    for (int64_t p = 0; p < L; ++p) {
      ASSERT_EQ(j["matrix"][p].size(), static_cast<size_t>(L));
      for (int64_t q = 0; q < L; ++q) {
        ASSERT_EQ(j["matrix"][p][q].get<double>(), tokpos::cosine(t.subspan(p * D, D), t.subspan(q * D, D)));
      }
    }
  }
}

TEST_F(Serve, SimilarityOmitsTheMatrixAbove512AndCapsTheOffsets) {
  auto at512 = get("/api/similarity?dim=4&context=512");
  ASSERT_TRUE(at512);
  ASSERT_EQ(at512->status, 200) << at512->body;
  EXPECT_EQ(json::parse(at512->body)["matrix"].size(), 512u);

  // The matrix's work cap: context*context*dim <= 2^29.
  auto wide = get("/api/similarity?dim=4096&context=512");
  ASSERT_TRUE(wide);
  ASSERT_EQ(wide->status, 200) << wide->body;
  EXPECT_TRUE(json::parse(wide->body)["matrix"].is_null());
  EXPECT_NE(json::parse(wide->body)["matrix_omitted"].get<std::string>().find("536870912"), std::string::npos);
  auto at_cap = get("/api/similarity?dim=2048&context=512&max_offset=1");
  ASSERT_TRUE(at_cap);
  ASSERT_EQ(at_cap->status, 200) << at_cap->body;
  EXPECT_EQ(json::parse(at_cap->body)["matrix"].size(), 512u);

  auto res = get("/api/similarity?dim=64&context=65536");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  const json j = json::parse(res->body);
  EXPECT_TRUE(j["matrix"].is_null());
  EXPECT_NE(j["matrix_omitted"].get<std::string>().find("512"), std::string::npos);
  EXPECT_EQ(j["adjacent"].size(), 65535u);
  // (max_offset + 1) * L * D <= 2^27: offsets 0 .. 31 by default here.
  EXPECT_EQ(j["by_offset"]["offsets"].size(), 32u);

  auto chosen = get("/api/similarity?dim=8&context=100&max_offset=5");
  ASSERT_TRUE(chosen);
  ASSERT_EQ(chosen->status, 200);
  EXPECT_EQ(json::parse(chosen->body)["by_offset"]["offsets"], json({0, 1, 2, 3, 4, 5}));
}

TEST_F(Serve, WavelengthsAndBandsMatchTheLibrary) {
  auto res = get("/api/wavelengths?dim=64&base=10000");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  const json j = json::parse(res->body);
  const auto w = tokpos::sinusoidal_wavelengths(64, 10000.0);
  EXPECT_EQ(j["wavelengths"].get<std::vector<double>>(), w);
  const auto bands = tokpos::wavelength_bands(w);
  ASSERT_EQ(j["bands"].size(), bands.size());
  int64_t pairs = 0;
  for (size_t i = 0; i < bands.size(); ++i) {
    EXPECT_EQ(j["bands"][i]["lower"].get<double>(), bands[i].lower);
    EXPECT_EQ(j["bands"][i]["upper"].get<double>(), bands[i].upper);
    EXPECT_EQ(j["bands"][i]["pairs"].get<int64_t>(), bands[i].pairs);
    pairs += j["bands"][i]["pairs"].get<int64_t>();
  }
  EXPECT_EQ(pairs, 32);
  // Defaults: dim 64, base 10000.
  auto defaults = get("/api/wavelengths");
  ASSERT_TRUE(defaults);
  EXPECT_EQ(defaults->body, res->body);
}

TEST_F(Serve, MissingAndUnparsableParametersAre400NamingThem) {
  expect_bad("/api/embed", "text", {"missing", "4096"});
  expect_bad("/api/embed?text=a&dim=abc", "dim", {"'abc'", "not an integer", "[1, 1048576]"});
  expect_bad("/api/embed?text=a&dim=", "dim", {"not an integer", "[1, 1048576]"});
  expect_bad("/api/embed?text=a&dim=2.5", "dim", {"not an integer"});
  expect_bad("/api/embed?text=a&dim=%2B8", "dim", {"not an integer"});
  expect_bad("/api/embed?text=a&context=x", "context", {"not an integer", "[1, 67108864]"});
  expect_bad("/api/embed?text=a&vocab=1e3", "vocab", {"not an integer", "[1, 16777216]"});
  expect_bad("/api/embed?text=a&seed=x", "seed", {"not an integer", "18446744073709551615"});
  expect_bad("/api/embed?text=a&seed=-1", "seed", {"not an integer", "18446744073709551615"});
  expect_bad("/api/embed?text=a&base=abc", "base", {"not a number", "finite and > 0"});
  expect_bad("/api/similarity?max_offset=z", "max_offset", {"not an integer"});
  expect_bad("/api/wavelengths?dim=", "dim", {"not an integer"});
  expect_bad("/api/wavelengths?base=", "base", {"not a number"});
  expect_bad("/api/embed?text=a&dim=4&dim=8", "dim", {"2 times"});
}

TEST_F(Serve, OutOfBoundsValuesAre400NamingTheLimit) {
  expect_bad("/api/embed?text=a&dim=0", "dim", {"[1, 1048576]"});
  expect_bad("/api/embed?text=a&dim=1048577", "dim", {"[1, 1048576]"});
  expect_bad("/api/embed?text=a&dim=99999999999999999999", "dim", {"[1, 1048576]"});
  expect_bad("/api/embed?text=a&context=0", "context", {"[1, 67108864]"});
  expect_bad("/api/embed?text=a&context=67108865", "context", {"[1, 67108864]"});
  expect_bad("/api/embed?text=a&vocab=0", "vocab", {"[1, 16777216]"});
  expect_bad("/api/embed?text=a&vocab=16777217", "vocab", {"[1, 16777216]"});
  expect_bad("/api/embed?text=a&seed=18446744073709551616", "seed", {"18446744073709551615"});
  for (const char* base : {"-3", "0", "inf", "nan", "1e400"}) {
    expect_bad(std::string("/api/embed?text=a&base=") + base, "base", {"finite and > 0"});
    expect_bad(std::string("/api/wavelengths?base=") + base, "base", {"finite and > 0"});
  }
  expect_bad("/api/wavelengths?dim=1048577", "dim", {"[1, 1048576]"});
  expect_bad("/api/similarity?context=67108865", "context", {"[1, 67108864]"});
  // Text: 4096 bytes at most, one token per byte, no more tokens than context.
  expect_bad("/api/embed?context=8192&dim=2&text=" + std::string(4097, 'a'), "text", {"4097", "4096 bytes"});
  EXPECT_EQ(get("/api/embed?context=4096&dim=2&text=" + std::string(4096, 'a'))->status, 200);
  expect_bad("/api/embed?text=Hello&context=3", "text", {"5 tokens", "context = 3"});
  // Ids must fit the vocabulary: 'H' is id 76.
  expect_bad("/api/embed?text=Hi&vocab=76", "vocab", {"token id 76", "0x48", "index 0", "vocab = 76"});
  EXPECT_EQ(get("/api/embed?text=Hi&vocab=110")->status, 200);
  // Work caps.
  // context*dim over 2^22 is no 400: /api/embed builds only T rows, /api/similarity
  // says which rows it used (serve_rows_test.cc).
  expect_bad("/api/embed?text=a&vocab=16777216&dim=2", "vocab", {"vocab*dim", "4194304"});
  expect_bad("/api/embed?context=1000&dim=4096&text=" + std::string(100, 'x'), "text", {"tokens*dim", "262144"});
  expect_bad("/api/similarity?context=10&max_offset=10", "max_offset", {"[0, 9]"});
  expect_bad("/api/similarity?context=10&max_offset=-1", "max_offset", {"[0, 9]"});
  expect_bad("/api/similarity?context=65536&dim=64&max_offset=32", "max_offset", {"134217728", "largest allowed here is 31"});
}

TEST_F(Serve, UnknownNamesAre400) {
  expect_bad("/api/embed?text=a&layout=sideways", "layout", {"interleaved, halves, fairseq, t2t, ggml"});
  expect_bad("/api/similarity?layout=Interleaved", "layout", {"interleaved, halves, fairseq, t2t, ggml"});
  expect_bad("/api/embed?text=a&positions=rotary", "positions", {"sinusoidal, learned"});
  expect_bad("/api/similarity?positions=", "positions", {"sinusoidal, learned"});
}

TEST_F(Serve, UnknownPathsAre404Json) {
  for (const char* path : {"/nope", "/api", "/api/embed/x", "/appXjs", "/app.js/", "/assets/app.js", "/../etc/passwd",
                           "/index.htm"}) {
    auto res = get(path);
    ASSERT_TRUE(res) << path;
    EXPECT_EQ(res->status, 404) << path;
    EXPECT_EQ(res->get_header_value("Content-Type"), "application/json; charset=utf-8") << path;
    EXPECT_TRUE(json::parse(res->body).contains("error")) << res->body;
  }
}

TEST_F(Serve, OtherMethodsAre405Json) {
  auto cli = client();
  for (const std::string path : {"/", "/api/embed?text=Hi", "/nope"}) {
    std::vector<httplib::Result> results;
    results.push_back(cli.Post(path, "x=1", "application/x-www-form-urlencoded"));
    results.push_back(cli.Put(path, "{}", "application/json"));
    results.push_back(cli.Delete(path));
    results.push_back(cli.Patch(path, "{}", "application/json"));
    results.push_back(cli.Options(path));
    for (auto& res : results) {
      ASSERT_TRUE(res) << path;
      EXPECT_EQ(res->status, 405) << path;
      EXPECT_EQ(res->get_header_value("Allow"), "GET, HEAD");
      EXPECT_NE(json::parse(res->body)["error"].get<std::string>().find("only GET and HEAD"), std::string::npos);
    }
  }
  // A body over the limit is refused without being kept.
  auto big = cli.Post("/api/embed", std::string(10000, 'x'), "text/plain");
  ASSERT_TRUE(big);
  EXPECT_EQ(big->status, 413);
  // The connection is still good for GET.
  EXPECT_EQ(cli.Get("/api/wavelengths")->status, 200);
}

// Connects to the server, sends bytes, and returns all it answers until it closes (5 s at most).
std::string raw_exchange(int port, const std::string& bytes, bool half = false) {
  const int fd = serve_test::connect_to(port);
  if (fd < 0) return "(connect failed)";
  (void)!send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
  std::string got;
  if (!half) {
    // One whole response: the head, then Content-Length bytes (the server
    // keeps the connection open for the next request).
    got = read_until(fd, "\r\n\r\n", 5000);
    const size_t head = got.find("\r\n\r\n");
    const size_t cl = got.find("Content-Length: ");
    if (head != std::string::npos && cl != std::string::npos && cl < head) {
      const size_t want = head + 4 + std::stoul(got.substr(cl + 16));
      while (got.size() < want) {
        const std::string more = read_until(fd, "\x01\x02\x03", 200);
        if (more.empty()) break;
        got += more;
      }
    }
  }
  close(fd);
  return got;
}

TEST_F(Serve, MalformedRequestsNeverStopTheServer) {
  const int port = server_->port();
  static constexpr char kGarbage[] = "\x00\xff\xfe garbage \x01\x02\r\n\r\n";
  const std::string garbage(kGarbage, sizeof kGarbage - 1);  // the bytes, NUL included, without the terminator
  EXPECT_NE(raw_exchange(port, garbage).find("400"), std::string::npos);
  EXPECT_NE(raw_exchange(port, "GET / HTTP/9.9\r\n\r\n").find("HTTP/1.1"), std::string::npos);
  EXPECT_NE(raw_exchange(port, "GET\r\n\r\n").find("400"), std::string::npos);
  EXPECT_NE(raw_exchange(port, "BREW /pot HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").find("400"), std::string::npos);
  EXPECT_NE(raw_exchange(port, "GET /" + std::string(9000, 'a') + " HTTP/1.1\r\n\r\n").find("414"), std::string::npos);
  EXPECT_NE(raw_exchange(port, "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX: " + std::string(9000, 'b') + "\r\n\r\n")
                .find("400"),
            std::string::npos);
  raw_exchange(port, "GET /api/embed?text=Hi HTTP/1.1\r\nHo", true);  // half a request, then gone
  raw_exchange(port, "", true);                                       // nothing at all
  const std::string chunked_bad =
      "POST /api/embed HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nxx\r\n";
  EXPECT_NE(raw_exchange(port, chunked_bad).find("HTTP/1.1 4"), std::string::npos);
  const std::string percent_bad = "GET /api/embed?text=%ZZ%&dim=%00 HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
  EXPECT_NE(raw_exchange(port, percent_bad).find("HTTP/1.1 "), std::string::npos);
  // Too many header lines: 431.
  httplib::Headers many;
  for (int i = 0; i < 100; ++i) many.emplace("X-H" + std::to_string(i), "v");
  auto res = client().Get("/api/wavelengths", many);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 431);
  // Still serving, with the right answer.
  auto ok = get("/api/embed?text=Hi&dim=4");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
  EXPECT_EQ(json::parse(ok->body)["ids"], json({76, 109}));
}

TEST_F(Serve, AForeignHostHeaderIsRefusedOnLoopback) {
  auto res = client().Get("/api/wavelengths", {{"Host", "attacker.example:8765"}});
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 403);
  EXPECT_NE(res->body.find("attacker.example"), std::string::npos);
  EXPECT_EQ(client().Get("/api/wavelengths", {{"Host", "localhost:1"}})->status, 200);
}

TEST_F(Serve, SixtyFourParallelClientsGetTheirOwnAnswers) {
  constexpr int kClients = 64;
  std::vector<Expected> want;
  std::vector<std::string> texts;
  for (int i = 0; i < kClients; ++i) {
    texts.push_back("client " + std::to_string(i));
    want.push_back(expected(texts.back(), 260, 16, 32, static_cast<uint64_t>(i), i % 2 == 1,
                            TOKPOS_LAYOUT_INTERLEAVED, 10000.0));
  }
  std::vector<std::string> bodies(kClients);
  std::vector<int> status(kClients, 0);
  std::atomic<int> go{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&, i] {
      while (go.load() == 0) std::this_thread::yield();
      httplib::Client cli("127.0.0.1", server_->port());
      cli.set_read_timeout(60, 0);
      cli.set_connection_timeout(30, 0);
      auto res = cli.Get("/api/embed?dim=16&context=32&seed=" + std::to_string(i) + "&positions=" +
                         (i % 2 == 1 ? "learned" : "sinusoidal") + "&text=" + percent_encode(texts[i]));
      if (res) {
        status[i] = res->status;
        bodies[i] = res->body;
      }
    });
  }
  go = 1;
  for (auto& t : threads) t.join();
  for (int i = 0; i < kClients; ++i) {
    ASSERT_EQ(status[i], 200) << "client " << i << ": " << bodies[i];
    const float_json j = float_json::parse(bodies[i]);
    const auto T = static_cast<int64_t>(want[i].ids.size());
    EXPECT_EQ(j["ids"].get<std::vector<int64_t>>(), want[i].ids);
    expect_rows(j["sum"], want[i].sum.data(), T, 16, "client " + std::to_string(i));
  }
}

TEST(ServeProcess, SigintStopsItCleanly) {
  ServerProcess s;
  ASSERT_TRUE(s.wait_ready()) << s.out();
  EXPECT_EQ(s.stop(SIGINT), 0);
  EXPECT_NE(s.out().find("stopped on SIGINT"), std::string::npos) << s.out();
}

TEST(ServeProcess, SigtermStopsItCleanlyWithAKeptAliveConnectionOpen) {
  ServerProcess s;
  ASSERT_TRUE(s.wait_ready()) << s.out();
  httplib::Client cli("127.0.0.1", s.port());
  cli.set_keep_alive(true);
  ASSERT_EQ(cli.Get("/api/wavelengths")->status, 200);
  EXPECT_EQ(s.stop(SIGTERM), 0);
  EXPECT_NE(s.out().find("stopped on SIGTERM"), std::string::npos) << s.out();
}

TEST(ServeProcess, BindingAnyAddressWarns) {
  ServerProcess s({"--host", "0.0.0.0"});
  ASSERT_TRUE(s.wait_ready()) << s.out();
  EXPECT_NE(s.url().find("http://0.0.0.0:"), std::string::npos) << s.out();
  const std::string err = s.err();
  EXPECT_NE(err.find("warning"), std::string::npos) << err;
  EXPECT_NE(err.find("0.0.0.0"), std::string::npos) << err;
  EXPECT_EQ(s.stop(SIGTERM), 0);
}

TEST(ServeProcess, LoopbackDoesNotWarn) {
  ServerProcess s;
  ASSERT_TRUE(s.wait_ready()) << s.out();
  EXPECT_EQ(s.err().find("warning"), std::string::npos) << s.err();
  EXPECT_EQ(s.stop(SIGTERM), 0);
}

TEST(ServeProcess, APortInUseIsAnErrorNotAHang) {
  ServerProcess first;
  ASSERT_TRUE(first.wait_ready()) << first.out();
  ServerProcess second({"--port", std::to_string(first.port())});  // the later --port wins
  EXPECT_EQ(second.wait_exit(), 1);
  EXPECT_NE(second.err().find("cannot listen on 127.0.0.1 port " + std::to_string(first.port())), std::string::npos)
      << second.err();
  EXPECT_EQ(first.stop(SIGTERM), 0);
}

TEST(ServeProcess, BadFlagsAreRefused) {
  ServerProcess port({"--port", "65536"});
  EXPECT_NE(port.wait_exit(), 0);
  ServerProcess threads({"--threads", "0"});
  EXPECT_NE(threads.wait_exit(), 0);
}

// The bounded loopback load: 2,000 requests over 16 kept-alive connections,
// one client thread each. Every answer must be right; latencies are printed,
// not asserted.
TEST(ServeLoad, TwoThousandRequestsOverSixteenConnections) {
  ServerProcess s;
  ASSERT_TRUE(s.wait_ready()) << s.out();
  constexpr int kConnections = 16, kRequests = 2000;
  const std::vector<std::string> paths = {"/api/embed?text=Hello%2C%20world&dim=32&context=64",
                                          "/api/wavelengths?dim=128", "/api/similarity?dim=16&context=32",
                                          "/api/embed?text=Hi&positions=learned&seed=7", "/app.js"};
  std::vector<std::string> reference;
  {
    httplib::Client cli("127.0.0.1", s.port());
    for (const auto& p : paths) {
      auto res = cli.Get(p);
      ASSERT_TRUE(res && res->status == 200) << p;
      reference.push_back(res->body);
    }
  }
  std::vector<std::vector<double>> latency_ms(kConnections);
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  const auto start = std::chrono::steady_clock::now();
  for (int c = 0; c < kConnections; ++c) {
    threads.emplace_back([&, c] {
      httplib::Client cli("127.0.0.1", s.port());
      cli.set_keep_alive(true);
      cli.set_read_timeout(60, 0);
      for (int r = c; r < kRequests; r += kConnections) {
        const size_t which = static_cast<size_t>(r) % paths.size();
        const auto t0 = std::chrono::steady_clock::now();
        auto res = cli.Get(paths[which]);
        const auto t1 = std::chrono::steady_clock::now();
        latency_ms[static_cast<size_t>(c)].push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
        if (!res || res->status != 200 || res->body != reference[which]) ++errors;
      }
    });
  }
  for (auto& t : threads) t.join();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::vector<double> all;
  for (const auto& l : latency_ms) all.insert(all.end(), l.begin(), l.end());
  ASSERT_EQ(all.size(), static_cast<size_t>(kRequests));
  EXPECT_EQ(errors.load(), 0);
  std::sort(all.begin(), all.end());
  const auto pct = [&](double p) { return all[std::min(all.size() - 1, static_cast<size_t>(p * static_cast<double>(all.size())))]; };
  std::printf("serve load: %d requests over %d kept-alive connections in %.2f s (%.0f requests/s); latency p50 %.3f ms, p99 %.3f ms, max %.3f ms\n",
              kRequests, kConnections, seconds, kRequests / seconds, pct(0.50), pct(0.99), all.back());
  EXPECT_EQ(s.stop(SIGTERM), 0);
}

}  // namespace

// base has the library's rule, finite and > 0, as on the command line: a base
// at or below 1 is served (frequencies that grow with the pair), and one the
// library refuses at that context is a 400 naming base, with its message.
TEST_F(Serve, BasesAtOrBelowOneAreServedAndTheLibrarysRefusalIsA400) {
  for (const char* base : {"0.5", "1"}) {
    const double b = std::stod(base);
    auto w = get(std::string("/api/wavelengths?dim=8&base=") + base);
    ASSERT_TRUE(w);
    ASSERT_EQ(w->status, 200) << base << " -> " << w->body;
    EXPECT_EQ(json::parse(w->body)["wavelengths"].get<std::vector<double>>(), tokpos::sinusoidal_wavelengths(8, b));
    auto s = get(std::string("/api/similarity?dim=8&context=16&base=") + base);
    ASSERT_TRUE(s);
    ASSERT_EQ(s->status, 200) << base << " -> " << s->body;
    const auto table = tokpos::position_table(16, 8, 0, {.base = b});
    EXPECT_EQ(json::parse(s->body)["adjacent"].get<std::vector<double>>(), tokpos::adjacent_cosine(table, 16, 8));
    auto e = get(std::string("/api/embed?text=Hi&dim=8&context=16&base=") + base);
    ASSERT_TRUE(e);
    EXPECT_EQ(e->status, 200) << base << " -> " << e->body;
  }
  std::string refusal;
  try {
    (void)tokpos::position_table(64, 4, 0, {.base = 1e-300});
  } catch (const tokpos::Error& err) {
    refusal = err.what();
  }
  ASSERT_NE(refusal.find("too fast"), std::string::npos) << refusal;
  for (const char* path : {"/api/similarity?dim=4&context=64&base=1e-300",
                           "/api/embed?text=Hi&dim=4&context=64&base=1e-300"}) {
    auto res = get(path);
    ASSERT_TRUE(res) << path;
    EXPECT_EQ(res->status, 400) << path << " -> " << res->body;
    const json j = json::parse(res->body);
    EXPECT_EQ(j.value("parameter", ""), "base") << res->body;
    EXPECT_EQ(j.value("error", ""), refusal) << res->body;
  }
}
