// tokpos/files.h: replacing a file atomically, as the .npy and .safetensors
// writers do, for programs that write their own files next to tokpos's.
#pragma once

#include <cstddef>
#include <span>
#include <string>

#include "tokpos/export.h"

namespace tokpos {

// Writes `bytes` to a temporary file beside `path`, fsyncs it, renames it
// over `path` and fsyncs the directory, so readers see either the old file or
// the whole new one. A failure throws Error(kIoError) naming the path and the
// OS error (errno's text), prefixed by `where` (the caller, for the message).
// Every failure up to the rename removes the temporary file and leaves `path`
// untouched. A failed fsync of the directory comes after the rename: the new
// file is then in place and complete, and only its durability across a crash
// is uncertain (the message says "the new file is in place").
//
// - Only a regular file is replaced. A directory, device, FIFO or socket at
//   `path` is refused (kIoError, naming what it is) and left as it was.
// - A symbolic link (or a chain of them) is followed: the regular file at its
//   end is replaced, in that file's own directory, and the links stay links.
//   A link to nothing, or to something that is not a regular file, is refused.
// - The replacement keeps the old file's permission bits; a new file gets
//   0666 masked by the umask, as open(2) would give it.
// - The temporary file has an unpredictable hidden name (.NAME.tmp.XXXXXXXXXXXX)
//   and is created afresh, never through an existing name or link, so
//   concurrent writers of one path (threads or processes) all succeed: the
//   last rename wins, and the file is always one complete version.
TOKPOS_API void write_file_atomically(const std::string& path, std::span<const std::byte> bytes,
                                      const char* where = "tokpos::write_file_atomically");

// Throws the Error(kIoError) that write_file_atomically(path, …) would throw
// for what is at `path` now, and writes nothing: an empty path; a directory,
// device, FIFO or socket; a symbolic link to nothing or to one of those (or a
// loop of links); a target directory that does not exist or that this
// process cannot create a file in. A program that writes several files
// checks every path first, so that one refused path leaves all of them as
// they were (another process may still change a path between the check and
// the write); write_files_atomically does this itself.
TOKPOS_API void check_file_writable(const std::string& path, const char* where = "tokpos::check_file_writable");

// One file of write_files_atomically.
struct FileBytes {
  std::string path;
  std::span<const std::byte> bytes;
};

// write_file_atomically for several files, all or nothing up to the renames:
// every path is checked first (as check_file_writable), every new file is
// then written in full to its own temporary and fsynced, and only when all
// are written are they renamed over their paths, in order. Any failure before
// the renames (a path in the way, a full disk) removes every temporary file
// and leaves every path untouched. Only a failed rename, which a sound file
// system does not give, can leave the earlier files replaced; its message
// says so.
TOKPOS_API void write_files_atomically(std::span<const FileBytes> files,
                                       const char* where = "tokpos::write_files_atomically");

}  // namespace tokpos
