#include "io/posix_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/check.h"

namespace tokpos::detail {

const char* file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "a special file";
}

int open_regular_file(const char* where, const std::string& path, struct stat* st) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused below.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) fail(Status::kIoError, where, "cannot open ", path, ": ", std::strerror(errno));
  auto refuse = [&](int err, auto&&... why) {
    ::close(fd);
    fail(Status::kIoError, where, "cannot open ", path, ": ", why..., err ? std::strerror(err) : "");
  };
  if (::fstat(fd, st) != 0) {
    const int err = errno;
    ::close(fd);
    fail(Status::kIoError, where, "cannot stat ", path, ": ", std::strerror(err));
  }
  if (S_ISDIR(st->st_mode)) refuse(0, std::strerror(EISDIR), " (a directory, not a regular file)");
  if (!S_ISREG(st->st_mode)) refuse(0, "it is ", file_kind(st->st_mode), ", not a regular file");
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) refuse(errno, "");
  return fd;
}

}  // namespace tokpos::detail
