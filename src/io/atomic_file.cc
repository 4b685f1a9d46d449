#include "io/atomic_file.h"
#include "io/posix_file.h"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>

#include "common/check.h"

namespace tokpos::detail {

namespace {

std::atomic<long long> g_fail_after{-1};

// How many links a chain may have before it counts as a loop (Linux's own limit).
constexpr int kMaxLinks = 40;

// The part of `path` up to and including its last '/' ("" for a bare name).
std::string dir_prefix(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? std::string() : path.substr(0, slash + 1);
}

// 72 unpredictable bits as 12 file-name characters, from the kernel's
// generator (std::random_device where getrandom is unavailable).
std::string random_suffix() {
  unsigned char bytes[9];
  size_t got = 0;
  while (got < sizeof bytes) {
    const ssize_t n = ::getrandom(bytes + got, sizeof bytes - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  if (got < sizeof bytes) {
    std::random_device rd;
    for (unsigned char& b : bytes) b = static_cast<unsigned char>(rd());
  }
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  std::string s;
  for (size_t i = 0; i < sizeof bytes; i += 3) {
    const unsigned v = (bytes[i] << 16) | (bytes[i + 1] << 8) | bytes[i + 2];
    for (int shift = 18; shift >= 0; shift -= 6) s += kAlphabet[(v >> shift) & 63];
  }
  return s;
}

// What the write replaces: the regular file at `path`, or the one a chain of
// symbolic links at `path` ends in. Anything else is refused (Error(kIoError)
// naming it): renaming over a device, a FIFO or a socket would swap the node
// itself for a regular file, and a directory cannot be renamed over.
struct Target {
  std::string path;    // where the new file goes: `path` itself, or the end of its links
  bool exists = false;
  mode_t mode = 0;     // the existing file's permission bits, kept by the new one
};

Target resolve_target(const char* where, const std::string& path) {
  if (path.empty()) fail(Status::kIoError, where, "cannot write '': the path is empty");
  std::string current = path;
  for (int links = 0;; ++links) {
    struct stat st {};
    if (::lstat(current.c_str(), &st) != 0) {
      const int err = errno;
      if (links == 0) {
        if (err != ENOENT) fail(Status::kIoError, where, "cannot write ", path, ": ", std::strerror(err));
        if (path.back() == '/')
          fail(Status::kIoError, where, "cannot write ", path, ": it names a directory (it ends with '/'), not a regular file");
        return {path, false, 0};  // a new file
      }
      if (err == ENOENT)
        fail(Status::kIoError, where, "cannot write ", path, ": it is a symbolic link to ", current,
             ", which does not exist (tokpos replaces the file a link points to, and does not create one)");
      fail(Status::kIoError, where, "cannot write ", path, ": following its symbolic link to ", current, ": ",
           std::strerror(err));
    }
    if (S_ISREG(st.st_mode)) return {current, true, static_cast<mode_t>(st.st_mode & 07777)};
    if (!S_ISLNK(st.st_mode)) {
      if (links == 0)
        fail(Status::kIoError, where, "cannot write ", path, ": it is ", file_kind(st.st_mode),
             ", not a regular file (tokpos cannot rename a new file over it)");
      fail(Status::kIoError, where, "cannot write ", path, ": it is a symbolic link to ", current, ", ",
           file_kind(st.st_mode), ", not a regular file (tokpos cannot rename a new file over it)");
    }
    if (links == kMaxLinks)
      fail(Status::kIoError, where, "cannot write ", path, ": ", std::strerror(ELOOP));
    // Follow one link: a relative target is relative to the link's own directory.
    std::string target(static_cast<size_t>(st.st_size > 0 ? st.st_size : 255) + 1, '\0');
    ssize_t n;
    while ((n = ::readlink(current.c_str(), target.data(), target.size())) >= 0 &&
           static_cast<size_t>(n) == target.size())
      target.resize(target.size() * 2);
    if (n < 0)
      fail(Status::kIoError, where, "cannot write ", path, ": reading the symbolic link ", current, ": ",
           std::strerror(errno));
    target.resize(static_cast<size_t>(n));
    current = !target.empty() && target[0] == '/' ? target : dir_prefix(current) + target;
  }
}

// Creates the temporary file beside `target`: a hidden name with 72 random
// bits, created afresh (O_EXCL: never an existing file, never through a
// planted link), so no other process can predict or redirect it and
// concurrent writers in one process never share one. A new file is created
// with 0666 and the kernel applies the umask (and a directory's default ACL),
// as open(2) and fopen would; no umask has to be read, which is process-global
// and cannot be read without briefly changing it. A replacement starts as
// 0600 and is given the old file's mode by the caller.
int create_temporary(const char* where, const std::string& path, const Target& target, std::string* tmp) {
  const std::string prefix = dir_prefix(target.path);
  std::string name = target.path.substr(prefix.size());
  if (name.size() > 200) name.resize(200);  // the suffix must still fit in NAME_MAX
  int err = 0;
  for (int attempt = 0; attempt < 100; ++attempt) {
    *tmp = prefix + "." + name + ".tmp." + random_suffix();
    const int fd = ::open(tmp->c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                          target.exists ? 0600 : 0666);
    if (fd >= 0) return fd;
    err = errno;
    if (err != EEXIST && err != EINTR) break;
  }
  fail(Status::kIoError, where, "cannot write ", path, ": creating ", *tmp, ": ", std::strerror(err));
}

}  // namespace

void inject_write_failure_for_testing(long long bytes) { g_fail_after.store(bytes); }

namespace {

// The target of `path` (resolve_target), in a directory this process may
// create the temporary file in; throws otherwise.
Target writable_target(const char* where, const std::string& path) {
  Target target = resolve_target(where, path);
  const std::string dir = dir_prefix(target.path).empty() ? "." : dir_prefix(target.path);
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) {
    fail(Status::kIoError, where, "cannot write ", path, ": its directory ", dir, ": ", std::strerror(errno));
  }
  if (!S_ISDIR(st.st_mode)) fail(Status::kIoError, where, "cannot write ", path, ": ", dir, " is not a directory");
  if (::access(dir.c_str(), W_OK | X_OK) != 0) {
    fail(Status::kIoError, where, "cannot write ", path, ": its directory ", dir, ": ", std::strerror(errno));
  }
  return target;
}

// A complete new file in its temporary, not yet renamed over its path.
struct Staged {
  std::string path;  // as the caller named it, for messages
  std::string tmp;
  Target target;
};

// Everything up to the rename: the temporary file beside the target gets the
// old file's mode and all of `pieces`, and reaches the disk. A failure removes
// the temporary and throws; the target is untouched either way.
Staged stage(const char* where, const std::string& path, const Target& target,
             const std::vector<std::pair<const void*, size_t>>& pieces) {
  std::string tmp;
  const int fd = create_temporary(where, path, target, &tmp);
  int err = 0;
  if (target.exists && ::fchmod(fd, target.mode) != 0) {
    err = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(target.mode));
    fail(Status::kIoError, where, "cannot write ", path, ": giving the new file the old one's mode ", mode, ": ",
         std::strerror(err), " (the previous file is unchanged)");
  }
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
  // The data reaches the disk before the rename makes it the file.
  if (err == 0 && ::fsync(fd) != 0) err = errno;
  if (::close(fd) != 0 && err == 0) err = errno;
  if (err != 0) {
    ::unlink(tmp.c_str());
    fail(Status::kIoError, where, "cannot write ", path, ": ", std::strerror(err),
         " (the previous file, if any, is unchanged)");
  }
  return {path, tmp, target};
}

// The rename that makes the staged file the file. On failure the temporary is
// removed and the target keeps its old contents.
void rename_staged(const char* where, const Staged& s, const char* unchanged_note) {
  if (::rename(s.tmp.c_str(), s.target.path.c_str()) != 0) {
    const int err = errno;
    ::unlink(s.tmp.c_str());
    fail(Status::kIoError, where, "cannot rename ", s.tmp, " to ", s.target.path, ": ", std::strerror(err),
         unchanged_note);
  }
}

// And the rename itself reaches the disk: sync the directory that holds it.
// A directory this process may search but not read cannot be opened, and
// some file systems cannot sync a directory (EINVAL); neither loses data.
void sync_directory(const char* where, const std::string& path, const Target& target) {
  const std::string dir = dir_prefix(target.path).empty() ? "." : dir_prefix(target.path);
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return;
  int err = 0;
  if (::fsync(dfd) != 0 && errno != EINVAL) err = errno;
  ::close(dfd);
  if (err != 0)
    fail(Status::kIoError, where, "cannot write ", path, ": the new file is in place, but syncing its directory ",
         dir, " failed: ", std::strerror(err));
}

}  // namespace

void check_file_writable(const char* where, const std::string& path) { (void)writable_target(where, path); }

void write_file_atomically(const char* where, const std::string& path,
                           const std::vector<std::pair<const void*, size_t>>& pieces) {
  const Target target = resolve_target(where, path);
  const Staged s = stage(where, path, target, pieces);
  rename_staged(where, s, "");
  sync_directory(where, path, s.target);
}

void write_files_atomically(const char* where, const std::vector<FileContents>& files) {
  // 1. Every path is checked before any temporary file exists.
  std::vector<Target> targets;
  targets.reserve(files.size());
  for (const FileContents& f : files) targets.push_back(writable_target(where, f.path));
  // 2. Every new file is written in full, each to its own temporary.
  std::vector<Staged> staged;
  staged.reserve(files.size());
  try {
    for (size_t i = 0; i < files.size(); ++i) staged.push_back(stage(where, files[i].path, targets[i], files[i].pieces));
  } catch (...) {
    for (const Staged& s : staged) ::unlink(s.tmp.c_str());
    throw;
  }
  // 3. Only then the renames, which do not fail on a sound file system (each
  //    temporary sits in its target's directory, created by this process).
  for (size_t i = 0; i < staged.size(); ++i) {
    try {
      rename_staged(where, staged[i],
                    i == 0 ? " (no file was replaced)"
                           : " (the files before it were replaced; it and the files after it are unchanged)");
    } catch (...) {
      for (size_t j = i + 1; j < staged.size(); ++j) ::unlink(staged[j].tmp.c_str());
      throw;
    }
  }
  for (const Staged& s : staged) sync_directory(where, s.path, s.target);
}

}  // namespace tokpos::detail
