// tokpos serve: the HTTP side. Routes, limits, errors as JSON, and a clean
// stop on SIGINT and SIGTERM. The API itself is in api.cc.
//
// cpp-httplib 0.11.4 gives each connection a worker thread from accept to
// close, reads a request head with no bound on its lines, reads chunked and
// length-less bodies whole, answers multi-range requests by copying the
// answer once per range, and queues accepted connections without bound. So
// the server keeps httplib for parsing, routing and writing one request
// (Server::process_request) and does the rest in a front layer of its own
// (Gate): one thread reads every connection's request head without blocking,
// under the limits below and a deadline; only a complete head goes to a
// worker; an idle kept-alive connection goes back to the reading thread
// instead of holding its worker; past a connection cap a client gets 503.
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <strings.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "frontend/trained.h"
#include "serve/assets.h"
#include "serve/server.h"
#include "tokpos/threading.h"

namespace tokpos::serve {
namespace {

// The API's content type. cpp-httplib compresses answers whose type is
// exactly "application/json" (or text/*) whenever the client accepts it, and
// its Brotli setting costs about 100x the time of computing the answer; with
// the charset parameter the answers go out uncompressed, at loopback speed.
constexpr const char* kJson = "application/json; charset=utf-8";

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr size_t kMaxHeaders = 64;           // header lines from the client; more get 431
constexpr size_t kMaxLineBytes = 8192;       // a request or header line, CRLF included: httplib's compiled limit
constexpr size_t kMaxHeadBytes = 65536;      // the request line and header lines in all; more get 431
constexpr size_t kMaxConnections = 512;      // open at once; more get 503 at once
constexpr milliseconds kDefaultDeadline{10000};  // a request's head, its wait for a worker; its answer
constexpr milliseconds kKeepAlive{2000};     // a connection with no byte of a next request is closed after this
constexpr milliseconds kWriteTimeout{5000};  // a client that takes no bytes for this long is dropped
constexpr milliseconds kDrain{1000};         // unread request bytes are read and dropped this long before a close
constexpr size_t kDrainBytes = size_t{1} << 20;  // and this many at most
constexpr size_t kKeepAliveRequests = 1000;  // requests on one connection
constexpr const char* kDeadlineVariable = "TOKPOS_SERVE_DEADLINE_MS";

// What the page may load: its own files only (no CDN, no other origin).
constexpr const char* kContentSecurityPolicy =
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

// {"error": message}. The message is a JSON string value, which holds no
// children: unlike an object, its destructor does not allocate, so this is
// safe on the way out of an allocation failure.
std::string error_body(const std::string& message) {
  return "{\"error\":" + json(message).dump(-1, ' ', false, json::error_handler_t::replace) + "}";
}

const char* content_type(std::string_view name) {
  if (name.ends_with(".html")) return "text/html; charset=utf-8";
  if (name.ends_with(".js")) return "text/javascript; charset=utf-8";
  if (name.ends_with(".css")) return "text/css; charset=utf-8";
  return "application/octet-stream";
}

std::string status_text(int status) {
  switch (status) {
    case 400: return "malformed request";
    case 404: return "not found";
    case 405: return "method not allowed: only GET and HEAD are served";
    case 413: return "the request body is over the limit of " + std::to_string(kMaxPayloadBytes) + " bytes";
    case 414: return "the request line is over the limit of 8192 bytes";
    case 431: return "more than " + std::to_string(kMaxHeaders) + " header lines";
    case 503: return "the server is busy: try again";
    default: return "HTTP status " + std::to_string(status);
  }
}

// The host of a Host header ("127.0.0.1:8765" -> "127.0.0.1", "[::1]:80" -> "[::1]").
std::string host_name(const std::string& header) {
  if (!header.empty() && header.front() == '[') {
    const size_t close = header.find(']');
    return close == std::string::npos ? header : header.substr(0, close + 1);
  }
  const size_t colon = header.rfind(':');
  return colon == std::string::npos ? header : header.substr(0, colon);
}

void method_not_allowed(const httplib::Request& req, httplib::Response& res) {
  res.status = 405;
  res.set_header("Allow", "GET, HEAD");
  res.set_content(error_body("method " + req.method + " is not allowed: only GET and HEAD are served"),
                  kJson);
}

// ---------------------------------------------------------------------------
// The front layer.

// One client connection. Its bytes are read by the Gate's reading thread
// until a request head is complete; a worker then serves that request. It
// is in one place at a time (the reading thread, the queue, a worker), and
// closed when it is destroyed.
struct Connection {
  Connection(int socket, std::atomic<size_t>& open) : fd(socket), open_count(open) { ++open_count; }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
  ~Connection() {
    ::close(fd);
    --open_count;
  }

  const int fd;
  std::atomic<size_t>& open_count;
  std::string buffer;            // bytes read and not yet used (the start of the next request)
  std::string head;              // the request head as httplib reads it (see prepare_head)
  size_t head_read = 0;          // how much of head httplib has read
  size_t searched = 0;           // buffer[0, searched) holds no end of a head
  Clock::time_point deadline;    // for the current step: the idle limit, the head, the answer
  bool started = false;          // a byte of the current request has arrived
  bool draining = false;         // being closed: unread bytes are read and dropped
  bool close_after = false;      // close once this request is answered
  size_t header_lines = 0;       // the client's header lines in this request
  bool too_many_headers = false; // over kMaxHeaders lines, or kMaxHeadBytes in all: 431
  bool head_complete = true;     // false: kMaxHeadBytes came without the end of the head
  size_t requests = 0;           // answered on this connection
  size_t drained = 0;
};

// The connection a worker is serving, for the pre-routing handler.
thread_local const Connection* current_connection = nullptr;

bool name_is(std::string_view line, std::string_view name) {
  return line.size() > name.size() && line[name.size()] == ':' && strncasecmp(line.data(), name.data(), name.size()) == 0;
}

std::string_view header_value(std::string_view line) {
  std::string_view v = line.substr(line.find(':') + 1);
  while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
  while (!v.empty() && (v.back() == '\r' || v.back() == '\n' || v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
  return v;
}

// The head httplib reads, from the client's head `in` (complete: it ends in
// the blank line; otherwise it is kMaxHeadBytes without one). Each line is
// passed on as it came, except:
// - a line over kMaxLineBytes is cut just past the limit and ends the head,
//   so httplib answers 414 (request line) or 400 (header line) without
//   holding more than the limit;
// - header lines past kMaxHeaders are counted, not passed on (431);
// - Range lines are dropped: ranges are not served, every answer is whole.
// A head that declares a body (Content-Length other than 0, or any
// Transfer-Encoding) closes the connection after its answer: no body is read.
void prepare_head(Connection& c, std::string_view in, bool complete) {
  c.head.clear();
  c.head_read = 0;
  c.header_lines = 0;
  c.too_many_headers = !complete;
  c.head_complete = complete;
  c.close_after = !complete;
  const auto cut = [&](std::string_view line) {
    c.head.append(line.substr(0, kMaxLineBytes + 1));
    c.head.append("\r\n\r\n");
    c.close_after = true;
  };
  size_t at = 0;
  for (size_t index = 0; at < in.size(); ++index) {
    const size_t nl = in.find('\n', at);
    const bool whole = nl != std::string_view::npos;
    const std::string_view line = in.substr(at, whole ? nl + 1 - at : std::string_view::npos);
    at += line.size();
    if (line.size() > kMaxLineBytes) return cut(line);
    if (!whole) break;  // the unfinished last line of a head over kMaxHeadBytes
    if (index == 0) {
      c.head.append(line);
      if (line == "\r\n") return;  // an empty request line: httplib answers 400
      continue;
    }
    if (line == "\r\n") break;
    ++c.header_lines;
    if (name_is(line, "Content-Length") && header_value(line) != "0") c.close_after = true;
    if (name_is(line, "Transfer-Encoding")) c.close_after = true;
    if (name_is(line, "Range")) continue;
    if (c.header_lines > kMaxHeaders) {
      c.too_many_headers = true;
      continue;
    }
    c.head.append(line);
  }
  c.head.append("\r\n");
}

// Looks for the end of a request head in c.buffer; when there is one (or the
// buffer has reached kMaxHeadBytes without one), moves the head out of the
// buffer into c.head and returns true.
bool take_head(Connection& c) {
  size_t end = std::string::npos;
  bool complete = true;
  if (c.buffer.starts_with("\r\n")) {
    end = 2;
  } else {
    const size_t found = c.buffer.find("\r\n\r\n", c.searched < 3 ? 0 : c.searched - 3);
    if (found != std::string::npos) end = found + 4;
  }
  if (end == std::string::npos || end > kMaxHeadBytes) {
    if (c.buffer.size() < kMaxHeadBytes) {
      c.searched = c.buffer.size();
      return false;
    }
    end = c.buffer.size();
    complete = false;
  }
  prepare_head(c, std::string_view(c.buffer).substr(0, end), complete);
  if (complete) {
    c.buffer.erase(0, end);
  } else {
    c.buffer.clear();  // the rest of an oversized head: never read
  }
  c.searched = 0;
  return true;
}

// A fixed answer written by the front layer itself (503, 408): one try,
// without blocking; the connection is closed after it.
void send_plain(int fd, int status, const char* reason, const std::string& message) {
  const std::string body = error_body(message);
  const std::string text = "HTTP/1.1 " + std::to_string(status) + " " + reason +
                           "\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: " +
                           std::to_string(body.size()) + "\r\nConnection: close\r\n" +
                           (status == 503 ? "Retry-After: 1\r\n" : "") + "\r\n" + body;
  (void)!send(fd, text.data(), text.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
}

// httplib's view of one request on a connection: reads come from the
// prepared head only (the server never reads a request body), writes go to
// the socket, each within kWriteTimeout and all before the connection's
// deadline, and stop at once when the server stops.
class ConnectionStream : public httplib::Stream {
 public:
  ConnectionStream(Connection& c, int stop_fd) : c_(c), stop_fd_(stop_fd) {}
  using httplib::Stream::write;

  bool is_readable() const override { return c_.head_read < c_.head.size(); }
  bool is_writable() const override { return true; }
  ssize_t read(char* ptr, size_t size) override {
    const size_t n = std::min(size, c_.head.size() - c_.head_read);
    std::memcpy(ptr, c_.head.data() + c_.head_read, n);
    c_.head_read += n;
    return static_cast<ssize_t>(n);
  }
  ssize_t write(const char* ptr, size_t size) override {
    for (;;) {
      const ssize_t n = ::send(c_.fd, ptr, size, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n >= 0) return n;
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) return -1;
      const auto left = std::chrono::duration_cast<milliseconds>(c_.deadline - Clock::now());
      const auto wait = std::min(left, kWriteTimeout);
      if (wait.count() <= 0) return -1;
      pollfd p[2] = {{c_.fd, POLLOUT, 0}, {stop_fd_, POLLIN, 0}};
      const int r = ::poll(p, 2, static_cast<int>(wait.count()));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0 || (p[1].revents & POLLIN) != 0) return -1;
    }
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override { address(true, ip, port); }
  void get_local_ip_and_port(std::string& ip, int& port) const override { address(false, ip, port); }
  socket_t socket() const override { return c_.fd; }

 private:
  void address(bool remote, std::string& ip, int& port) const {
    sockaddr_storage a{};
    socklen_t n = sizeof a;
    const int r = remote ? getpeername(c_.fd, reinterpret_cast<sockaddr*>(&a), &n)
                         : getsockname(c_.fd, reinterpret_cast<sockaddr*>(&a), &n);
    char host[NI_MAXHOST] = "", service[NI_MAXSERV] = "";
    if (r == 0 && getnameinfo(reinterpret_cast<sockaddr*>(&a), n, host, sizeof host, service, sizeof service,
                              NI_NUMERICHOST | NI_NUMERICSERV) == 0) {
      ip = host;
      port = std::atoi(service);
    }
  }

  Connection& c_;
  int stop_fd_;
};

class Server;

// Reads request heads for all connections on one thread, hands complete
// ones to `threads` workers, and takes kept-alive connections back.
class Gate {
 public:
  Gate(Server& server, size_t threads, milliseconds deadline);
  Gate(const Gate&) = delete;
  Gate& operator=(const Gate&) = delete;
  ~Gate() { stop_and_join(); }

  // From the accept loop: a new connection (or 503 past the cap).
  void admit(int fd);
  // From any thread: closes the connections that wait, wakes the workers.
  void stop();
  void stop_and_join();

 private:
  void read_loop();
  void work_loop();
  void serve(std::unique_ptr<Connection> c);
  // The connection to the reading thread (kept alive, or to be drained).
  void give_back(std::unique_ptr<Connection> c);
  void close_now(std::unique_ptr<Connection> c);
  // Closed after its unread bytes are read and dropped (for at most kDrain).
  void close_gracefully(std::unique_ptr<Connection> c);
  // A connection whose head is complete: to a worker.
  void enqueue(std::unique_ptr<Connection> c);
  // Reads what c has for us; false when c is to be closed.
  bool read_some(Connection& c, std::unique_ptr<Connection>& owner);
  void wake() const {
    const uint64_t one = 1;
    (void)!::write(wake_fd_, &one, sizeof one);
  }

  Server& server_;
  const milliseconds deadline_;
  int wake_fd_ = -1;  // wakes the reading thread
  int stop_fd_ = -1;  // readable once the server stops
  std::atomic<bool> stopping_{false};
  std::atomic<size_t> open_{0};
  std::mutex mutex_;
  std::condition_variable ready_cv_;
  std::vector<std::unique_ptr<Connection>> incoming_;  // for the reading thread
  std::vector<std::unique_ptr<Connection>> ready_;     // heads complete, for the workers, oldest first
  std::thread reader_;
  std::vector<std::thread> workers_;
  bool joined_ = false;
};

// httplib's server, with the Gate in front: the accept loop hands each
// socket to the Gate at once (a task queue that runs the task in place), and
// the Gate's workers call process_request for one request at a time.
class Server : public httplib::Server {
 public:
  // httplib's listen backlog is fixed at 5 when the library is compiled; a
  // second listen() on the bound socket sets a deeper one, so that a burst of
  // connections waits in the kernel's queue instead of retrying its SYN.
  void set_listen_backlog(int backlog) { ::listen(svr_sock_, backlog); }
  void set_gate(Gate* gate) { gate_ = gate; }
  bool serve_request(httplib::Stream& strm, bool close_connection, bool& connection_closed) {
    return process_request(strm, close_connection, connection_closed, nullptr);
  }

 private:
  bool process_and_close_socket(socket_t sock) override {
    gate_->admit(sock);
    return true;
  }
  Gate* gate_ = nullptr;
};

class InPlaceQueue : public httplib::TaskQueue {
 public:
  void enqueue(std::function<void()> fn) override { fn(); }
  void shutdown() override {}
};

Gate::Gate(Server& server, size_t threads, milliseconds deadline) : server_(server), deadline_(deadline) {
  // Room for every connection in each list: moving one never allocates.
  incoming_.reserve(kMaxConnections);
  ready_.reserve(kMaxConnections);
  wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  stop_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  reader_ = std::thread([this] { read_loop(); });
  for (size_t i = 0; i < threads; ++i) workers_.emplace_back([this] { work_loop(); });
}

void Gate::admit(int fd) {
  if (stopping_) {
    ::close(fd);
    return;
  }
  if (open_.load() >= kMaxConnections) {
    try {
      send_plain(fd, 503, "Service Unavailable",
                 "the server has " + std::to_string(kMaxConnections) + " connections open, its limit: try again");
    } catch (...) {
    }
    ::shutdown(fd, SHUT_RDWR);
    ::close(fd);
    return;
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  std::unique_ptr<Connection> c;
  try {
    c = std::make_unique<Connection>(fd, open_);
  } catch (...) {
    ::close(fd);
    return;
  }
  c->deadline = Clock::now() + kKeepAlive;
  give_back(std::move(c));
}

void Gate::give_back(std::unique_ptr<Connection> c) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    incoming_.push_back(std::move(c));
  }
  wake();
}

void Gate::close_now(std::unique_ptr<Connection> c) { c.reset(); }

void Gate::close_gracefully(std::unique_ptr<Connection> c) {
  if (stopping_) return close_now(std::move(c));
  ::shutdown(c->fd, SHUT_WR);
  c->draining = true;
  c->drained = 0;
  c->deadline = Clock::now() + kDrain;
  give_back(std::move(c));
}

void Gate::enqueue(std::unique_ptr<Connection> c) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ready_.push_back(std::move(c));
  }
  ready_cv_.notify_one();
}

void Gate::stop() {
  if (stopping_.exchange(true)) return;
  const uint64_t one = 1;
  (void)!::write(stop_fd_, &one, sizeof one);
  wake();
  std::lock_guard<std::mutex> lock(mutex_);
  ready_cv_.notify_all();
}

void Gate::stop_and_join() {
  stop();
  if (joined_) return;
  joined_ = true;
  if (reader_.joinable()) reader_.join();
  for (auto& w : workers_) w.join();
  incoming_.clear();
  ready_.clear();
  ::close(wake_fd_);
  ::close(stop_fd_);
}

bool Gate::read_some(Connection& c, std::unique_ptr<Connection>& owner) {
  char buf[16384];
  const size_t room = c.draining ? sizeof buf : std::min(sizeof buf, kMaxHeadBytes + 1 - std::min(c.buffer.size(), kMaxHeadBytes));
  const ssize_t n = ::recv(c.fd, buf, room, MSG_DONTWAIT);
  if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
  if (n == 0) return false;  // the client closed: a head cut short gets no answer
  if (c.draining) {
    c.drained += static_cast<size_t>(n);
    return c.drained < kDrainBytes;
  }
  if (!c.started) {
    c.started = true;
    c.deadline = Clock::now() + deadline_;
  }
  c.buffer.append(buf, static_cast<size_t>(n));
  if (take_head(c)) enqueue(std::move(owner));
  return true;
}

void Gate::read_loop() {
  std::vector<std::unique_ptr<Connection>> conns;
  std::vector<pollfd> fds;
  conns.reserve(kMaxConnections);
  fds.reserve(kMaxConnections + 1);
  while (!stopping_) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (auto& c : incoming_) conns.push_back(std::move(c));
      incoming_.clear();
    }
    const auto now = Clock::now();
    auto next = now + milliseconds(1000);
    fds.assign(1, pollfd{wake_fd_, POLLIN, 0});
    for (auto& c : conns) {
      try {
        // A kept-alive connection may come back with the next head already read.
        if (!c->draining && !c->buffer.empty() && take_head(*c)) {
          enqueue(std::move(c));
          continue;
        }
      } catch (...) {
        c.reset();  // no memory for its head: closed
        continue;
      }
      next = std::min(next, c->deadline);
    }
    std::erase(conns, nullptr);
    for (auto& c : conns) fds.push_back(pollfd{c->fd, POLLIN, 0});
    const auto wait = std::chrono::duration_cast<milliseconds>(next - now).count();
    if (::poll(fds.data(), fds.size(), static_cast<int>(std::max<int64_t>(wait, 0) + 1)) < 0 && errno != EINTR) break;
    if (fds[0].revents & POLLIN) {
      uint64_t count = 0;
      (void)!::read(wake_fd_, &count, sizeof count);
    }
    const auto after = Clock::now();
    for (size_t i = 0; i < conns.size(); ++i) {
      auto& c = conns[i];
      bool keep = true;
      try {
        if (fds[i + 1].revents & (POLLIN | POLLHUP | POLLERR)) keep = read_some(*c, c);
        if (!c) continue;  // its head went to a worker
        if (keep && after >= c->deadline) {
          if (c->started && !c->draining) {
            send_plain(c->fd, 408, "Request Timeout",
                       "the request head did not arrive within the deadline of " + std::to_string(deadline_.count()) +
                           " ms");
          }
          keep = false;
        }
      } catch (...) {
        keep = false;  // no memory for this connection's bytes: closed
      }
      if (!keep) c.reset();
    }
    std::erase(conns, nullptr);
  }
  conns.clear();
}

void Gate::work_loop() {
  for (;;) {
    std::unique_ptr<Connection> c;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      ready_cv_.wait(lock, [&] { return stopping_ || !ready_.empty(); });
      if (stopping_) return;
      c = std::move(ready_.front());
      ready_.erase(ready_.begin());
    }
    try {
      serve(std::move(c));
    } catch (...) {
      // Out of memory outside the request itself: the connection is closed
      // (its destructor), the worker goes on.
    }
  }
}

void Gate::serve(std::unique_ptr<Connection> c) {
  while (c) {
    if (Clock::now() >= c->deadline) {
      // It waited for a worker past its deadline: refused, not served late.
      send_plain(c->fd, 503, "Service Unavailable",
                 "no worker was free within the deadline of " + std::to_string(deadline_.count()) + " ms: try again");
      return close_gracefully(std::move(c));
    }
    c->deadline = Clock::now() + deadline_;  // for writing the answer
    const bool last = c->close_after || c->requests + 1 >= kKeepAliveRequests || stopping_;
    bool closed = false, ok = false;
    current_connection = c.get();
    try {
      ConnectionStream strm(*c, stop_fd_);
      ok = server_.serve_request(strm, last, closed);
    } catch (...) {
      ok = false;  // failed even to answer (out of memory): the connection is dropped, the server goes on
    }
    current_connection = nullptr;
    ++c->requests;
    if (!ok || closed || last || stopping_) return c->close_after ? close_gracefully(std::move(c)) : close_now(std::move(c));
    c->started = !c->buffer.empty();
    c->deadline = Clock::now() + (c->started ? deadline_ : kKeepAlive);
    bool next = false;
    try {
      next = c->started && take_head(*c);
    } catch (...) {
      return close_now(std::move(c));
    }
    if (!next) return give_back(std::move(c));
  }
}

// The request deadline: kDefaultDeadline, or TOKPOS_SERVE_DEADLINE_MS.
milliseconds request_deadline(std::ostream& err) {
  const char* text = std::getenv(kDeadlineVariable);
  if (!text || !*text) return kDefaultDeadline;
  int64_t ms = 0;
  const char* end = text + std::strlen(text);
  const auto [ptr, ec] = std::from_chars(text, end, ms);
  if (ec != std::errc() || ptr != end || ms < 100 || ms > 3600000) {
    err << "tokpos serve: warning: " << kDeadlineVariable << " = '" << text
        << "' is not an integer in [100, 3600000] (milliseconds); using " << kDefaultDeadline.count() << "\n";
    err.flush();
    return kDefaultDeadline;
  }
  return milliseconds(ms);
}

void add_routes(httplib::Server& svr, const frontend::TrainedPositions* trained, const frontend::TrainingRun* run) {
  for (const char* name : {"index.html", "app.js", "style.css"}) {
    const Asset* asset = find_asset(name);
    if (!asset) continue;
    auto serve_asset = [asset](const httplib::Request&, httplib::Response& res) {
      res.set_content(reinterpret_cast<const char*>(asset->data), asset->size, content_type(asset->name));
      res.set_header("Cache-Control", "no-cache");
    };
    std::string pattern = "/" + std::string(name);
    // A route is a regular expression: escape the dot.
    for (size_t dot = pattern.find('.'); dot != std::string::npos; dot = pattern.find('.', dot + 2)) {
      pattern.insert(dot, "\\");
    }
    svr.Get(pattern, serve_asset);
    if (std::string_view(name) == "index.html") svr.Get("/", serve_asset);
  }
  auto api = [trained, run](ApiAnswer (*fn)(const Params&, const frontend::TrainedPositions*,
                                             const frontend::TrainingRun*)) {
    return [fn, trained, run](const httplib::Request& req, httplib::Response& res) {
      ApiAnswer a = fn(Params(req.params.begin(), req.params.end()), trained, run);
      res.status = a.status;
      // What set_content does, without its copy of a body of up to ~10 MiB.
      res.body = std::move(a.body);
      res.set_header("Content-Type", kJson);
    };
  };
  using Run = const frontend::TrainingRun*;
  svr.Get("/api/embed", api(&api_embed));
  svr.Get("/api/similarity", api(&api_similarity));
  svr.Get("/api/wavelengths", api([](const Params& params, const frontend::TrainedPositions*, Run) {
            return api_wavelengths(params);
          }));
  svr.Get("/api/trained", api([](const Params&, const frontend::TrainedPositions* t, Run) { return api_trained(t); }));
  svr.Get("/api/run", api([](const Params&, const frontend::TrainedPositions*, Run r) { return api_run(r); }));
  svr.Get("/api/run/table",
          api([](const Params& params, const frontend::TrainedPositions*, Run r) { return api_run_table(params, r); }));
  // Every other method is answered 405 by the pre-routing handler, before
  // httplib would read a body: no route takes one.
}

constexpr int kListenBacklog = 256;

void configure(httplib::Server& svr, const ServeOptions& options, const frontend::TrainedPositions* trained,
               const frontend::TrainingRun* run) {
  // The accept loop hands each connection to the Gate at once.
  svr.new_task_queue = [] { return new InPlaceQueue; };
  svr.set_payload_max_length(kMaxPayloadBytes);
  // What the Keep-Alive header of an answer says; the Gate applies them.
  svr.set_keep_alive_timeout(std::chrono::duration_cast<std::chrono::seconds>(kKeepAlive).count());
  svr.set_keep_alive_max_count(kKeepAliveRequests);
  svr.set_tcp_nodelay(true);
  // SO_REUSEADDR only (a restart may bind a port in TIME_WAIT); not
  // httplib's default SO_REUSEPORT, with which a second server would share a
  // port in use instead of failing.
  svr.set_socket_options([](int sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  svr.set_default_headers({{"X-Content-Type-Options", "nosniff"},
                           {"Referrer-Policy", "no-referrer"},
                           {"X-Frame-Options", "DENY"},
                           {"Content-Security-Policy", kContentSecurityPolicy},
                           // Ranges are not served (the Gate drops Range lines); without this
                           // httplib would answer HEAD with "Accept-Ranges: bytes".
                           {"Accept-Ranges", "none"}});

  const bool loopback = is_loopback_host(options.host);
  const std::string bound = options.host;
  // What every request head is checked for before anything else: true when
  // res holds the answer (431, 413, 405, 403).
  const auto screen = [loopback, bound](const httplib::Request& req, httplib::Response& res) {
    // The client's own header lines, as the Gate counted them (httplib adds
    // REMOTE_ADDR, REMOTE_PORT, LOCAL_ADDR and LOCAL_PORT to req.headers).
    if (const Connection* c = current_connection; c && c->too_many_headers) {
      res.status = 431;
      const std::string limit = " over the limit of " + std::to_string(kMaxHeaders);
      res.set_content(error_body(c->header_lines > kMaxHeaders
                                     ? "the request has " + std::string(c->head_complete ? "" : "more than ") +
                                           std::to_string(c->header_lines) + " header lines," + limit
                                     : "the request head is over " + std::to_string(kMaxHeadBytes) +
                                           " bytes without its end (at most " + std::to_string(kMaxHeaders) +
                                           " header lines of at most " + std::to_string(kMaxLineBytes) +
                                           " bytes each, " + std::to_string(kMaxHeadBytes) + " bytes in all)"),
                      kJson);
      return true;
    }
    // A body is never read: one declared over the limit is 413, and any
    // other method than GET and HEAD is 405 before httplib would read it.
    if (req.has_header("Content-Length")) {
      const std::string text = req.get_header_value("Content-Length");
      uint64_t length = 0;
      const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), length);
      if (ec != std::errc() || ptr != text.data() + text.size() || length > kMaxPayloadBytes) {
        res.status = 413;
        res.set_content(error_body("Content-Length: " + text.substr(0, 32) + " is over the limit of " +
                                   std::to_string(kMaxPayloadBytes) + " bytes for a request body"),
                        kJson);
        return true;
      }
    }
    if (req.method != "GET" && req.method != "HEAD") {
      method_not_allowed(req, res);
      return true;
    }
    // On loopback, only loopback names: a page of another site whose name is
    // made to resolve to 127.0.0.1 (DNS rebinding) is refused.
    if (loopback && req.has_header("Host")) {
      const std::string host = host_name(req.get_header_value("Host"));
      if (!is_loopback_host(host) && host != bound) {
        res.status = 403;
        res.set_content(error_body("Host " + host + " is not a loopback name; use the printed URL"),
                        kJson);
        return true;
      }
    }
    return false;
  };
  svr.set_pre_routing_handler([screen](const httplib::Request& req, httplib::Response& res) {
    return screen(req, res) ? httplib::Server::HandlerResponse::Handled : httplib::Server::HandlerResponse::Unhandled;
  });
  // "Expect: 100-continue" is answered before routing: cpp-httplib would
  // send "100 Continue", inviting a body no route reads, and only then the
  // 405. A request the screen refuses gets its final answer instead.
  svr.set_expect_100_continue_handler([screen](const httplib::Request& req, httplib::Response& res) {
    return screen(req, res) ? res.status : 100;
  });
  // Any error status without a body of its own (no route, bad request line,
  // body or URI too long) gets a JSON one.
  svr.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    const std::string what = res.status == 404 ? "no such path: " + req.path : status_text(res.status);
    res.set_content(error_body(what), kJson);
  });
  svr.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    // The request's own memory is freed by now (it unwound to here); if even
    // this small answer cannot be made, the exception leaves process_request
    // and the Gate drops the connection.
    res.status = 500;
    try {
      std::rethrow_exception(ep);
    } catch (const std::bad_alloc&) {
      res.set_content(error_body("internal error: out of memory (std::bad_alloc); the server goes on"), kJson);
    } catch (const std::exception& e) {
      res.set_content(error_body(std::string("internal error: ") + e.what()), kJson);
    } catch (...) {
      res.set_content(error_body("internal error: unknown exception"), kJson);
    }
  });
  add_routes(svr, trained, run);
}

std::string url_of(const std::string& host, int port) {
  const bool v6 = host.find(':') != std::string::npos && host.front() != '[';
  return "http://" + (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port) + "/";
}

}  // namespace

int run_serve(const ServeOptions& options, std::ostream& out, std::ostream& err) {
  // SIGINT and SIGTERM go to one waiting thread (blocked here, before any
  // other thread starts, so every thread inherits the mask); a peer that
  // closes early must not kill the process with SIGPIPE.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);
  // Requests run side by side, one thread each; each one's kernels use one thread.
  tokpos::set_num_threads(1);

  // --weights: the trained position table, or a training run's snapshots
  // (the last one is the trained table), read once; an error stops serve
  // with the library's message.
  std::unique_ptr<const frontend::TrainedPositions> trained;
  std::unique_ptr<const frontend::TrainingRun> run;
  if (!options.weights.empty()) {
    try {
      if (frontend::is_training_run(options.weights)) {
        if (!options.preset.empty() || !options.map.empty()) {
          throw Error(Status::kInvalidArgument, "--preset and --map read a checkpoint; '" + options.weights +
                                                    "' is a training run (it has \"" + frontend::kRunMetadataKey +
                                                    "\" metadata): leave them out");
        }
        run = std::make_unique<const frontend::TrainingRun>(frontend::load_training_run(options.weights));
      } else {
        if (options.preset.empty()) {
          throw Error(Status::kInvalidArgument, "--weights requires --preset gpt2|bert for a checkpoint: '" +
                                                    options.weights + "' has no \"" + frontend::kRunMetadataKey +
                                                    "\" metadata, so it is not a training run");
        }
        const NameMap names = frontend::parse_name_map("tokpos serve", options.preset, options.map);
        trained = std::make_unique<const frontend::TrainedPositions>(
            frontend::load_trained_positions(options.weights, options.preset, names));
      }
    } catch (const Error& e) {
      err << "tokpos serve: error: " << e.what() << "\n";
      return 1;
    }
  }

  Server svr;
  configure(svr, options, run ? &run->snapshots.back() : trained.get(), run.get());
  const milliseconds deadline = request_deadline(err);

  if (!is_loopback_host(options.host)) {
    err << "tokpos serve: warning: binding " << options.host
        << ", not a loopback address: other machines may reach this server, which has no authentication\n";
    err.flush();
  }
  errno = 0;
  int port = options.port;
  bool bound = false;
  if (port == 0) {
    port = svr.bind_to_any_port(options.host);
    bound = port > 0;
  } else {
    bound = svr.bind_to_port(options.host, port);
  }
  if (bound) svr.set_listen_backlog(kListenBacklog);
  if (!bound) {
    const int e = errno;
    err << "tokpos serve: error: cannot listen on " << options.host << " port " << options.port;
    if (e != 0) err << " (" << std::strerror(e) << ")";
    err << "\n";
    return 1;
  }
  Gate gate(svr, static_cast<size_t>(options.threads), deadline);
  svr.set_gate(&gate);

  std::atomic<bool> listening_done{false};
  std::atomic<int> stopped_by{0};
  std::thread watcher([&] {
    int sig = 0;
    sigwait(&stop_signals, &sig);
    if (listening_done) return;
    stopped_by = sig;
    // stop() only takes effect once the accept loop runs: wait for it.
    while (!svr.is_running() && !listening_done) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    svr.stop();
    // Connections still reading a head are closed, writes to clients stop;
    // requests being computed finish.
    gate.stop();
  });

  out << "tokpos serve: listening on " << url_of(options.host, port) << std::endl;
  const bool ok = svr.listen_after_bind();
  listening_done = true;
  if (stopped_by == 0) pthread_kill(watcher.native_handle(), SIGTERM);  // wakes sigwait
  watcher.join();
  gate.stop_and_join();
  if (stopped_by != 0) {
    out << "tokpos serve: stopped on " << (stopped_by == SIGINT ? "SIGINT" : "SIGTERM") << std::endl;
    return 0;
  }
  err << "tokpos serve: error: the server stopped " << (ok ? "unexpectedly" : "with an accept error") << "\n";
  return 1;
}

}  // namespace tokpos::serve
