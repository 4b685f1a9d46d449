// tokpos serve as a child process for the tests: `tokpos serve --port 0`
// started with fork and exec, its printed URL read, stopped by a signal.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <httplib.h>

namespace serve_test {

// A loopback TCP connection to port, or -1.
int connect_to(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Reads whatever is in fd until `until` is found or timeout_ms passes.
std::string read_until(int fd, const std::string& until, int timeout_ms) {
  std::string got;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (got.find(until) == std::string::npos) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
    char buf[4096];
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n <= 0) break;
    got.append(buf, static_cast<size_t>(n));
  }
  return got;
}

// `tokpos serve --port 0 ...` as a child process, with its stdout and stderr.
class ServerProcess {
 public:
  // extra: flags after "serve"; env: NAME=VALUE settings for the child.
  explicit ServerProcess(std::vector<std::string> extra = {}, std::vector<std::string> env = {}) {
    int out[2], err[2];
    if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      for (auto& e : env) putenv(e.data());
      dup2(out[1], 1);
      dup2(err[1], 2);
      std::vector<std::string> args = {TOKPOS_CLI, "serve"};
      if (std::find(extra.begin(), extra.end(), "--port") == extra.end()) extra.insert(extra.begin(), {"--port", "0"});
      args.insert(args.end(), extra.begin(), extra.end());
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(TOKPOS_CLI, argv.data());
      _exit(127);
    }
    close(out[1]);
    close(err[1]);
    out_fd_ = out[0];
    err_fd_ = err[0];
    // "tokpos serve: listening on http://HOST:PORT/"
    stdout_ = read_until(out_fd_, "/\n", 20000);
    const auto at = stdout_.find("listening on http://");
    if (at == std::string::npos) return;
    const auto colon = stdout_.rfind(':', stdout_.find("/\n"));
    port_ = std::atoi(stdout_.c_str() + colon + 1);
    url_ = stdout_.substr(at + 13, stdout_.find("/\n") - at - 12);
  }
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;
  ~ServerProcess() {
    if (pid_ > 0 && !exited_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (out_fd_ >= 0) close(out_fd_);
    if (err_fd_ >= 0) close(err_fd_);
  }

  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  // Still running: not exited, not killed by a signal (the status is then lost).
  bool alive() {
    if (pid_ <= 0 || exited_) return false;
    if (waitpid(pid_, nullptr, WNOHANG) != pid_) return true;
    exited_ = true;
    return false;
  }
  const std::string& url() const { return url_; }

  // Polls until the API answers (the socket already accepts once the URL is printed).
  bool wait_ready() const {
    if (port_ <= 0) return false;
    httplib::Client cli("127.0.0.1", port_);
    cli.set_connection_timeout(2, 0);
    for (int i = 0; i < 200; ++i) {
      auto res = cli.Get("/api/wavelengths");
      if (res && res->status == 200) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }

  // Sends sig and waits (up to wait_ms) for the exit; the exit status, or -1
  // if it did not exit by itself (it is then killed).
  int stop(int sig, int wait_ms = 20000) {
    if (pid_ <= 0) return -1;
    kill(pid_, sig);
    int st = 0;
    for (int i = 0; i < wait_ms / 10; ++i) {
      const pid_t r = waitpid(pid_, &st, WNOHANG);
      if (r == pid_) {
        exited_ = true;
        stdout_ += read_until(out_fd_, "\x01", 200);
        stderr_ += read_until(err_fd_, "\x01", 200);
        return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return -1;
  }

  // Waits for the process to exit by itself (up to 20 s): its status, or -1.
  int wait_exit() {
    int st = 0;
    for (int i = 0; i < 2000; ++i) {
      if (waitpid(pid_, &st, WNOHANG) == pid_) {
        exited_ = true;
        stderr_ += read_until(err_fd_, "\x01", 200);
        return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return -1;
  }

  const std::string& out() const { return stdout_; }
  // stderr so far (reads what is there now).
  const std::string& err() {
    stderr_ += read_until(err_fd_, "\x01", 300);
    return stderr_;
  }

 private:
  pid_t pid_ = -1;
  int out_fd_ = -1, err_fd_ = -1;
  int port_ = 0;
  bool exited_ = false;
  std::string url_, stdout_, stderr_;
};

}  // namespace serve_test
