// Private: atomic file replacement shared by the .npy and .safetensors writers.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace tokpos::detail {

// Writes the pieces, in order, to a temporary file beside `path`, fsyncs it,
// renames it over `path` and fsyncs the directory. A failure throws
// Error(kIoError) naming the path and the OS error (strerror). Up to the
// rename, the temporary file is removed and `path` is untouched; a failed
// directory fsync comes after it: the new file is in place and complete, and
// only its durability across a crash is uncertain. `where` names the caller in the
// message. Only a regular file is replaced (a directory, device, FIFO or
// socket is refused); a symbolic link is followed to the regular file it ends
// in, which is replaced in its own directory; the old file's mode is kept, and
// a new file gets 0666 & ~umask. The temporary name is random and created
// with O_EXCL | O_NOFOLLOW, so concurrent writers of one path all succeed.
// The contract in full: include/tokpos/files.h.
void write_file_atomically(const char* where, const std::string& path,
                           const std::vector<std::pair<const void*, size_t>>& pieces);

// Throws the Error(kIoError) write_file_atomically would throw for what is at
// `path` now, before anything is written: an empty path, a directory, device,
// FIFO or socket, a symbolic link to nothing or to one of those, a link loop,
// or a directory (the target's) this process cannot create a file in. Writes
// nothing. The contract in full: include/tokpos/files.h.
void check_file_writable(const char* where, const std::string& path);

// One file for write_files_atomically: its path and its bytes, in pieces.
struct FileContents {
  std::string path;
  std::vector<std::pair<const void*, size_t>> pieces;
};

// write_file_atomically for several files at once, all or nothing up to the
// renames: every path is checked first (as check_file_writable), then every
// new file is written in full to its temporary and fsynced, and only when
// all are written are they renamed over their paths, in order, and the
// directories fsynced. Any failure before the renames (a path in the way, a
// full disk, an injected failure) removes every temporary and leaves every
// path untouched. A failed rename (which a sound file system does not give)
// says which files were already replaced.
void write_files_atomically(const char* where, const std::vector<FileContents>& files);

// Test hook: the next atomic writes fail with EIO after `bytes` bytes have
// reached the temporary file (negative: off). Lets tests interrupt a write
// half-way, as a full disk would, and check that nothing was lost.
void inject_write_failure_for_testing(long long bytes);

}  // namespace tokpos::detail
