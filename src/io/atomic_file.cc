#include "io/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <atomic>
#include <cstring>

#include "common/check.h"

namespace tokpos::detail {

namespace {
std::atomic<long long> g_fail_after{-1};
}

void inject_write_failure_for_testing(long long bytes) { g_fail_after.store(bytes); }

void write_file_atomically(const char* where, const std::string& path,
                           const std::vector<std::pair<const void*, size_t>>& pieces) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    fail(Status::kIoError, where, "cannot write ", path, ": creating ", tmp, ": ",
         std::strerror(errno));
  int err = 0;
  long long budget = g_fail_after.load();
  for (const auto& [data, size] : pieces) {
    const char* c = static_cast<const char*>(data);
    size_t n = size;
    while (n > 0 && err == 0) {
      size_t chunk = n;
      if (budget >= 0) {
        if (budget == 0) {
          err = EIO;  // the injected failure, as a full disk or a dying device would report
          break;
        }
        chunk = std::min<size_t>(n, static_cast<size_t>(budget));
      }
      const ssize_t w = ::write(fd, c, chunk);
      if (w > 0 && budget >= 0) budget -= w;
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        err = w < 0 ? errno : EIO;
        break;
      }
      c += w;
      n -= static_cast<size_t>(w);
    }
  }
  if (err == 0 && ::fsync(fd) != 0) err = errno;
  if (::close(fd) != 0 && err == 0) err = errno;
  if (err != 0) {
    ::unlink(tmp.c_str());
    fail(Status::kIoError, where, "cannot write ", path, ": ", std::strerror(err),
         " (the previous file, if any, is unchanged)");
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    err = errno;
    ::unlink(tmp.c_str());
    fail(Status::kIoError, where, "cannot rename ", tmp, " to ", path, ": ", std::strerror(err));
  }
}

}  // namespace tokpos::detail
