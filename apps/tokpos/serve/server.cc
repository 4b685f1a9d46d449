// tokpos serve: the HTTP side. Routes, limits, errors as JSON, and a clean
// stop on SIGINT and SIGTERM. The API itself is in api.cc.
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <iterator>
#include <string>
#include <thread>

#include <httplib.h>
#include <nlohmann/json.hpp>

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

// httplib's listen backlog is fixed at 5 when the library is compiled; a
// second listen() on the bound socket sets a deeper one, so that a burst of
// connections waits in the kernel's queue instead of retrying its SYN.
class Server : public httplib::Server {
 public:
  void set_listen_backlog(int backlog) { ::listen(svr_sock_, backlog); }
};
constexpr int kListenBacklog = 256;

constexpr size_t kMaxHeaders = 64;           // more header lines get 431
constexpr time_t kReadTimeoutSeconds = 5;    // per read: a stalled client is dropped
constexpr time_t kWriteTimeoutSeconds = 5;   // per write
constexpr time_t kKeepAliveSeconds = 2;      // an idle kept-alive connection is closed after this
constexpr size_t kKeepAliveRequests = 1000;  // requests on one connection

// What the page may load: its own files only (no CDN, no other origin).
constexpr const char* kContentSecurityPolicy =
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

std::string error_body(const std::string& message) {
  return json{{"error", message}}.dump(-1, ' ', false, json::error_handler_t::replace);
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

void add_routes(httplib::Server& svr) {
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
  auto api = [](ApiAnswer (*fn)(const Params&)) {
    return [fn](const httplib::Request& req, httplib::Response& res) {
      ApiAnswer a = fn(Params(req.params.begin(), req.params.end()));
      res.status = a.status;
      res.set_content(std::move(a.body), kJson);
    };
  };
  svr.Get("/api/embed", api(&api_embed));
  svr.Get("/api/similarity", api(&api_similarity));
  svr.Get("/api/wavelengths", api(&api_wavelengths));
  // Every other method: 405. These routes let the server read (and bound)
  // a request body, so the next request on a kept-alive connection is intact.
  svr.Post(".*", method_not_allowed);
  svr.Put(".*", method_not_allowed);
  svr.Patch(".*", method_not_allowed);
  svr.Delete(".*", method_not_allowed);
  svr.Options(".*", method_not_allowed);
}

void configure(httplib::Server& svr, const ServeOptions& options) {
  const size_t threads = static_cast<size_t>(options.threads);
  svr.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  svr.set_payload_max_length(kMaxPayloadBytes);
  svr.set_read_timeout(kReadTimeoutSeconds, 0);
  svr.set_write_timeout(kWriteTimeoutSeconds, 0);
  svr.set_keep_alive_timeout(kKeepAliveSeconds);
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
                           {"Content-Security-Policy", kContentSecurityPolicy}});

  const bool loopback = is_loopback_host(options.host);
  const std::string bound = options.host;
  svr.set_pre_routing_handler([loopback, bound](const httplib::Request& req, httplib::Response& res) {
    if (req.headers.size() > kMaxHeaders) {
      res.status = 431;
      res.set_content(error_body("the request has " + std::to_string(req.headers.size()) +
                                 " header lines, over the limit of " + std::to_string(kMaxHeaders)),
                      kJson);
      return httplib::Server::HandlerResponse::Handled;
    }
    // Methods with no route of their own (CONNECT, TRACE, PRI).
    static constexpr const char* kRouted[] = {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"};
    if (std::find(std::begin(kRouted), std::end(kRouted), req.method) == std::end(kRouted)) {
      method_not_allowed(req, res);
      return httplib::Server::HandlerResponse::Handled;
    }
    // On loopback, only loopback names: a page of another site whose name is
    // made to resolve to 127.0.0.1 (DNS rebinding) is refused.
    if (loopback && req.has_header("Host")) {
      const std::string host = host_name(req.get_header_value("Host"));
      if (!is_loopback_host(host) && host != bound) {
        res.status = 403;
        res.set_content(error_body("Host " + host + " is not a loopback name; use the printed URL"),
                        kJson);
        return httplib::Server::HandlerResponse::Handled;
      }
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  // Any error status without a body of its own (no route, bad request line,
  // body or URI too long) gets a JSON one.
  svr.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    const std::string what = res.status == 404 ? "no such path: " + req.path : status_text(res.status);
    res.set_content(error_body(what), kJson);
  });
  svr.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "unknown exception";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    res.status = 500;
    res.set_content(error_body("internal error: " + what), kJson);
  });
  add_routes(svr);
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

  Server svr;
  configure(svr, options);

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
  });

  out << "tokpos serve: listening on " << url_of(options.host, port) << std::endl;
  const bool ok = svr.listen_after_bind();
  listening_done = true;
  if (stopped_by == 0) pthread_kill(watcher.native_handle(), SIGTERM);  // wakes sigwait
  watcher.join();
  if (stopped_by != 0) {
    out << "tokpos serve: stopped on " << (stopped_by == SIGINT ? "SIGINT" : "SIGTERM") << std::endl;
    return 0;
  }
  err << "tokpos serve: error: the server stopped " << (ok ? "unexpectedly" : "with an accept error") << "\n";
  return 1;
}

}  // namespace tokpos::serve
