// tokpos serve under hostile and starved clients: many ranges, bodies that
// never end, header-line counts at the limit, slow and idle connections,
// SIGTERM while a client trickles, bases that overflow, and too little
// memory for a request. Loopback only; every client is bounded in count and
// time, and each wait is a bound that detects a hang, not a timing check.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "serve_process.h"
#include "test_util.h"
#include "tokpos/diagnostics.h"

namespace {

using json = nlohmann::json;
using serve_test::connect_to;
using serve_test::read_until;
using serve_test::ServerProcess;

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

bool send_all(int fd, const std::string& bytes) {
  size_t at = 0;
  while (at < bytes.size()) {
    const ssize_t n = send(fd, bytes.data() + at, bytes.size() - at, MSG_NOSIGNAL);
    if (n <= 0) return false;
    at += static_cast<size_t>(n);
  }
  return true;
}

// True when the peer has closed fd (EOF or reset) within timeout_ms.
bool closed_by_peer(int fd, int timeout_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  char buf[4096];
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 50) <= 0) continue;
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) return true;
  }
  return false;
}

// The body of the first answer in raw (after its head), as far as it came.
std::string body_of(const std::string& raw) {
  const size_t head = raw.find("\r\n\r\n");
  return head == std::string::npos ? "" : raw.substr(head + 4);
}

// A client that sends a request line and then one header line every
// interval_ms, until told to stop, the server closes, or max_lines. It
// records whatever the server answers.
class Trickler {
 public:
  Trickler(int port, int interval_ms, int max_lines) {
    fd_ = connect_to(port);
    thread_ = std::thread([this, interval_ms, max_lines] {
      if (fd_ < 0 || !send_all(fd_, "GET /api/wavelengths HTTP/1.1\r\n")) return;
      for (int i = 0; i < max_lines && !stop_; ++i) {
        const std::string got = read_until(fd_, "\x01\x02", interval_ms);
        {
          std::lock_guard<std::mutex> lock(mutex_);
          answer_ += got;
        }
        if (!send_all(fd_, "X-Slow-" + std::to_string(i) + ": v\r\n")) break;
        pollfd p{fd_, POLLIN, 0};
        if (poll(&p, 1, 0) > 0) {
          char buf[4096];
          const ssize_t n = recv(fd_, buf, sizeof buf, 0);
          if (n <= 0) break;
          std::lock_guard<std::mutex> lock(mutex_);
          answer_.append(buf, static_cast<size_t>(n));
        }
      }
      done_ = true;
    });
  }
  Trickler(const Trickler&) = delete;
  Trickler& operator=(const Trickler&) = delete;
  ~Trickler() {
    stop_ = true;
    thread_.join();
    if (fd_ >= 0) close(fd_);
  }
  bool connected() const { return fd_ >= 0; }
  bool done() const { return done_; }
  std::string answer() {
    std::lock_guard<std::mutex> lock(mutex_);
    return answer_;
  }

 private:
  int fd_ = -1;
  std::atomic<bool> stop_{false}, done_{false};
  std::mutex mutex_;
  std::string answer_;
  std::thread thread_;
};

httplib::Client client_of(const ServerProcess& s, time_t timeout_s = 10) {
  httplib::Client cli("127.0.0.1", s.port());
  cli.set_connection_timeout(timeout_s, 0);
  cli.set_read_timeout(timeout_s, 0);
  return cli;
}

TEST(ServeLimits, ManyRangesGetTheWholeAnswerOnce) {
  ServerProcess s;
  ASSERT_TRUE(s.wait_ready()) << s.out();
  auto cli = client_of(s);
  const std::string script = read_file(std::string(TOKPOS_SERVE_ASSETS) + "/app.js");
  // About 8 KB of "-," ranges, each one the whole answer.
  std::string ranges = "bytes=-";
  while (ranges.size() < 8000) ranges += ",-";
  for (const std::string& range : {ranges, std::string("bytes=0-10"), std::string("bytes=0-1,5-9"),
                                   std::string("bytes=9-1"), std::string("pages=3")}) {
    auto res = cli.Get("/app.js", {{"Range", range}});
    ASSERT_TRUE(res) << range.substr(0, 20);
    EXPECT_EQ(res->status, 200) << range.substr(0, 20);
    EXPECT_FALSE(res->has_header("Content-Range"));
    EXPECT_EQ(res->get_header_value("Content-Type"), "text/javascript; charset=utf-8");
    EXPECT_EQ(res->body.size(), script.size()) << range.substr(0, 20);
    EXPECT_TRUE(res->body == script) << range.substr(0, 20);
  }
  const auto plain = cli.Get("/api/embed?text=Hi&dim=8");
  ASSERT_TRUE(plain);
  auto ranged = cli.Get("/api/embed?text=Hi&dim=8", {{"Range", ranges}});
  ASSERT_TRUE(ranged);
  EXPECT_EQ(ranged->status, 200);
  EXPECT_EQ(ranged->body, plain->body);
  // HEAD does not advertise ranges.
  auto head = cli.Head("/app.js");
  ASSERT_TRUE(head);
  EXPECT_EQ(head->get_header_value("Accept-Ranges"), "none");
  EXPECT_EQ(s.stop(SIGTERM), 0);
}

TEST(ServeLimits, ChunkedAndUnsizedBodiesAreAnsweredWithoutBeingRead) {
  ServerProcess s;
  ASSERT_TRUE(s.wait_ready()) << s.out();
  // A chunked body whose end never comes: answered at once, connection closed.
  {
    const int fd = connect_to(s.port());
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(send_all(fd, "POST /api/embed HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n1000\r\n" +
                                 std::string(4096, 'x') + "\r\n"));
    const std::string got = read_until(fd, "}", 5000);
    EXPECT_EQ(got.rfind("HTTP/1.1 405", 0), 0u) << got.substr(0, 200);
    EXPECT_NE(got.find("Connection: close"), std::string::npos) << got.substr(0, 400);
    // More chunks are not waited for: the server closes.
    (void)send_all(fd, "1000\r\n" + std::string(4096, 'y') + "\r\n");
    EXPECT_TRUE(closed_by_peer(fd, 5000));
    close(fd);
  }
  // A body over the limit, never sent: 413 at once.
  {
    const int fd = connect_to(s.port());
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(send_all(fd, "PUT /x HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 67108864\r\n\r\n"));
    const std::string got = read_until(fd, "}", 5000);
    EXPECT_EQ(got.rfind("HTTP/1.1 413", 0), 0u) << got.substr(0, 200);
    EXPECT_NE(body_of(got).find("4096"), std::string::npos) << got;
    close(fd);
  }
  // No Content-Length and no Transfer-Encoding: no body (RFC 9112 6.3). The
  // 405 comes at once, and the next request on the connection is read as one.
  {
    const int fd = connect_to(s.port());
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(send_all(fd, "POST /api/embed HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"));
    const std::string first = read_until(fd, "}", 5000);
    EXPECT_EQ(first.rfind("HTTP/1.1 405", 0), 0u) << first.substr(0, 200);
    ASSERT_TRUE(send_all(fd, "GET /api/wavelengths?dim=4 HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"));
    const std::string second = read_until(fd, "]}", 5000);
    EXPECT_EQ(second.rfind("HTTP/1.1 200", 0), 0u) << second.substr(0, 200);
    close(fd);
  }
  EXPECT_EQ(client_of(s).Get("/api/wavelengths")->status, 200);
  EXPECT_EQ(s.stop(SIGTERM), 0);
}

// A raw request with exactly `lines` header lines from the client.
std::string request_with_header_lines(size_t lines) {
  std::string r = "GET /api/wavelengths?dim=4 HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n";
  for (size_t i = 2; i < lines; ++i) r += "X-Line-" + std::to_string(i) + ": v\r\n";
  return r + "\r\n";
}

TEST(ServeLimits, SixtyFourHeaderLinesPassAndSixtyFiveAre431NamingTheCount) {
  ServerProcess s;
  ASSERT_TRUE(s.wait_ready()) << s.out();
  for (const size_t lines : {size_t{2}, size_t{60}, size_t{64}}) {
    const int fd = connect_to(s.port());
    ASSERT_TRUE(send_all(fd, request_with_header_lines(lines)));
    const std::string got = read_until(fd, "]}", 5000);
    close(fd);
    EXPECT_EQ(got.rfind("HTTP/1.1 200", 0), 0u) << lines << " lines: " << got.substr(0, 300);
  }
  for (const size_t lines : {size_t{65}, size_t{100}, size_t{1000}}) {
    const int fd = connect_to(s.port());
    ASSERT_TRUE(send_all(fd, request_with_header_lines(lines)));
    const std::string got = read_until(fd, "}", 5000);
    close(fd);
    EXPECT_EQ(got.rfind("HTTP/1.1 431", 0), 0u) << lines << " lines: " << got.substr(0, 300);
    const std::string body = body_of(got);
    ASSERT_FALSE(body.empty()) << got;
    const std::string error = json::parse(body)["error"];
    EXPECT_NE(error.find("has " + std::to_string(lines) + " header lines"), std::string::npos) << error;
    EXPECT_NE(error.find("limit of 64"), std::string::npos) << error;
  }
  // Few lines but a head over 64 KiB in all: 431 too, the rest never read.
  {
    const int fd = connect_to(s.port());
    std::string r = "GET /api/wavelengths HTTP/1.1\r\nHost: 127.0.0.1\r\n";
    for (int i = 0; i < 9; ++i) r += "X-Big-" + std::to_string(i) + ": " + std::string(8000, 'b') + "\r\n";
    ASSERT_TRUE(send_all(fd, r));
    const std::string got = read_until(fd, "}", 5000);
    close(fd);
    EXPECT_EQ(got.rfind("HTTP/1.1 431", 0), 0u) << got.substr(0, 300);
    EXPECT_NE(body_of(got).find("65536"), std::string::npos) << got;
  }
  EXPECT_EQ(client_of(s).Get("/api/wavelengths")->status, 200);
  EXPECT_EQ(s.stop(SIGTERM), 0);
}

TEST(ServeLimits, SlowAndIdleClientsDoNotHoldTheWorkers) {
  // Two workers, a 1 s request deadline.
  ServerProcess s({"--threads", "2"}, {"TOKPOS_SERVE_DEADLINE_MS=1000"});
  ASSERT_TRUE(s.wait_ready()) << s.out();
  // As many clients as workers, each sending a header line every 200 ms (for
  // 8 s at most), and 200 connections that send nothing.
  std::vector<std::unique_ptr<Trickler>> slow;
  for (int i = 0; i < 2; ++i) slow.push_back(std::make_unique<Trickler>(s.port(), 200, 40));
  std::vector<int> idle;
  for (int i = 0; i < 200; ++i) {
    const int fd = connect_to(s.port());
    if (fd >= 0) idle.push_back(fd);
  }
  ASSERT_EQ(idle.size(), 200u);
  for (auto& t : slow) ASSERT_TRUE(t->connected());
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  // A normal request is answered (a 5 s bound detects a starved server).
  auto cli = client_of(s, 5);
  auto res = cli.Get("/api/wavelengths?dim=8");
  ASSERT_TRUE(res) << "no answer while slow and idle clients are connected: " << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 200);
  // The slow clients are cut at the deadline with a 408 (a 6 s bound).
  for (auto& t : slow) {
    for (int i = 0; i < 600 && !t->done(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_TRUE(t->done());
    EXPECT_EQ(t->answer().rfind("HTTP/1.1 408", 0), 0u) << t->answer().substr(0, 200);
  }
  for (const int fd : idle) close(fd);
  EXPECT_EQ(s.stop(SIGTERM), 0);
}

TEST(ServeLimits, ConnectionsPastTheCapAre503) {
  ServerProcess s;
  ASSERT_TRUE(s.wait_ready()) << s.out();
  constexpr int kCap = 512;  // docs/serve.md
  std::vector<int> open;
  for (int i = 0; i < kCap; ++i) {
    const int fd = connect_to(s.port());
    if (fd >= 0) open.push_back(fd);
  }
  ASSERT_EQ(open.size(), static_cast<size_t>(kCap));
  const int extra = connect_to(s.port());
  ASSERT_GE(extra, 0);
  const std::string got = read_until(extra, "}", 5000);
  close(extra);
  EXPECT_EQ(got.rfind("HTTP/1.1 503", 0), 0u) << got.substr(0, 200);
  EXPECT_NE(got.find("512"), std::string::npos) << got;
  for (const int fd : open) close(fd);
  // Once they are gone, requests are served again.
  bool served = false;
  for (int i = 0; i < 100 && !served; ++i) {
    auto res = client_of(s, 5).Get("/api/wavelengths");
    served = res && res->status == 200;
    if (!served) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(served);
  EXPECT_EQ(s.stop(SIGTERM), 0);
}

TEST(ServeLimits, SigtermStopsItWhileAClientTricklesHeaderLines) {
  ServerProcess s;
  ASSERT_TRUE(s.wait_ready()) << s.out();
  Trickler slow(s.port(), 100, 300);  // 30 s of header lines at most
  ASSERT_TRUE(slow.connected());
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  // Stopped within 5 s (a bound that detects the hang), with status 0.
  EXPECT_EQ(s.stop(SIGTERM, 5000), 0) << s.out();
  EXPECT_NE(s.out().find("stopped on SIGTERM"), std::string::npos) << s.out();
}

// Every number in a JSON value, recursively, is finite (no null stands for one).
void expect_numbers(const json& j, const std::string& what) {
  if (j.is_array()) {
    for (const auto& x : j) {
      EXPECT_FALSE(x.is_null()) << what << ": a null in an array of numbers";
      expect_numbers(x, what);
    }
  } else if (j.is_number()) {
    EXPECT_TRUE(std::isfinite(j.get<double>())) << what;
  }
}

TEST(ServeLimits, HugeBasesAre400NamingTheLimitOrGiveFiniteNumbers) {
  ServerProcess s;
  ASSERT_TRUE(s.wait_ready()) << s.out();
  auto cli = client_of(s);
  auto res = cli.Get("/api/wavelengths?dim=4096&base=1e308");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 400) << res->body.substr(0, 200);
  const json bad = json::parse(res->body);
  EXPECT_EQ(bad["parameter"], "base");
  EXPECT_NE(bad["error"].get<std::string>().find("'1e308'"), std::string::npos) << bad;
  EXPECT_NE(bad["error"].get<std::string>().find("at most about"), std::string::npos) << bad;
  EXPECT_NE(bad["error"].get<std::string>().find("dim = 4096"), std::string::npos) << bad;
  for (const char* dim : {"2", "3", "64", "4096"}) {
    for (const char* base : {"1.0000001", "10000", "1e100", "1e300", "1e307", "1e308", "1.7976931348623157e308"}) {
      const std::string query = std::string("dim=") + dim + "&base=" + base;
      auto w = cli.Get("/api/wavelengths?" + query);
      ASSERT_TRUE(w) << query;
      if (w->status == 400) {
        EXPECT_EQ(json::parse(w->body)["parameter"], "base") << query << " -> " << w->body;
      } else {
        ASSERT_EQ(w->status, 200) << query;
        const json j = json::parse(w->body);
        const auto want = tokpos::sinusoidal_wavelengths(std::stoll(dim), std::stod(base));
        EXPECT_EQ(j["wavelengths"].get<std::vector<double>>(), want) << query;
        expect_numbers(j["wavelengths"], query);
        for (const auto& b : j["bands"]) {
          EXPECT_TRUE(b["lower"].is_number() && b["upper"].is_number()) << query << " -> " << b;
        }
      }
      // The table endpoints: base only slows the frequencies, every number stays finite.
      if (std::stod(base) < 1e300 || std::string(dim) == "64") continue;
      for (const std::string layout : {"interleaved", "t2t", "ggml"}) {
        const std::string table = query + "&context=8&layout=" + layout;
        auto e = cli.Get("/api/embed?text=ab&" + table);
        ASSERT_TRUE(e) << table;
        ASSERT_EQ(e->status, 200) << table << " -> " << e->body.substr(0, 200);
        const json ej = json::parse(e->body);
        expect_numbers(ej["position_rows"], "embed " + table);
        expect_numbers(ej["sum"], "embed " + table);
        auto m = cli.Get("/api/similarity?" + table);
        ASSERT_TRUE(m) << table;
        ASSERT_EQ(m->status, 200) << table << " -> " << m->body.substr(0, 200);
        const json mj = json::parse(m->body);
        expect_numbers(mj["adjacent"], "similarity " + table);
        expect_numbers(mj["by_offset"]["mean_cosine"], "similarity " + table);
        expect_numbers(mj["matrix"], "similarity " + table);
      }
    }
  }
  EXPECT_EQ(s.stop(SIGTERM), 0);
}

// The child's VmSize (address space in use), in bytes, or 0.
uint64_t address_space_of(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmSize:", 0) == 0) return std::stoull(line.substr(7)) * 1024;
  }
  return 0;
}

TEST(ServeLimits, ARequestThatRunsOutOfMemoryIs500AndTheServerGoesOn) {
#ifdef TOKPOS_TEST_SANITIZED
  GTEST_SKIP() << "a sanitizer's shadow memory does not fit under an address-space cap";
#endif
  // One malloc arena and a fixed mmap threshold (glibc): every large block
  // is its own mapping, so the address space in use is what the server holds.
  ServerProcess s({"--threads", "1"}, {"MALLOC_ARENA_MAX=1", "MALLOC_MMAP_THRESHOLD_=131072"});
  ASSERT_TRUE(s.wait_ready()) << s.out();
  // A request at the caps: a 1024 x 4096 token table and learned position
  // table (16 MiB each), 64 x 4096 rows in each of the three arrays.
  const std::string heavy = "/api/embed?dim=4096&vocab=1024&context=1024&positions=learned&text=" + std::string(64, 'a');
  // Room for 12 MiB more than the server holds now (too little for the
  // tables), 36 and 40 MiB (about what the tables and the answer need; the
  // answer as a tree of JSON values needed more, and failing inside it ended
  // the process).
  int answered_500 = 0;
  std::string statuses;
  for (const uint64_t room_mib : {12, 36, 40}) {
    const uint64_t vm = address_space_of(s.pid());
    ASSERT_GT(vm, 0u);
    const rlimit cap{vm + (room_mib << 20), RLIM_INFINITY};
    ASSERT_EQ(prlimit(s.pid(), RLIMIT_AS, &cap, nullptr), 0);
    auto res = client_of(s, 20).Get(heavy);
    ASSERT_TRUE(s.alive()) << "the server ended with " << room_mib << " MiB of room: " << s.err();
    ASSERT_TRUE(res) << room_mib << " MiB of room: no answer (" << httplib::to_string(res.error()) << ")";
    statuses += " " + std::to_string(room_mib) + " MiB: " + std::to_string(res->status) + ";";
    if (res->status == 500) {
      ++answered_500;
      const std::string error = json::parse(res->body)["error"];
      EXPECT_EQ(error.rfind("internal error: ", 0), 0u) << error;
      EXPECT_TRUE(error.find("allocate") != std::string::npos || error.find("out of memory") != std::string::npos)
          << error;
    } else {
      EXPECT_EQ(res->status, 200) << room_mib << " MiB of room: " << res->body.substr(0, 200);
      EXPECT_EQ(json::parse(res->body)["sum"].size(), 64u);
    }
    // And a small request still gets its answer.
    auto small = client_of(s, 20).Get("/api/embed?text=Hi&dim=4");
    ASSERT_TRUE(small) << room_mib << " MiB of room";
    EXPECT_EQ(small->status, 200) << small->body;
  }
  std::printf("serve memory: the request at the caps with room for%s\n", statuses.c_str());
  EXPECT_GT(answered_500, 0) << "no room was too little: the test did not reach an allocation failure";
  const rlimit none{RLIM_INFINITY, RLIM_INFINITY};
  ASSERT_EQ(prlimit(s.pid(), RLIMIT_AS, &none, nullptr), 0);
  EXPECT_EQ(client_of(s).Get(heavy)->status, 200);
  EXPECT_EQ(s.stop(SIGTERM), 0);
}

}  // namespace
