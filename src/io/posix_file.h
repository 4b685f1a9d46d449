// Private to the io layer: opening a file to read, and naming what a path is.
#pragma once

#include <sys/stat.h>

#include <string>

namespace tokpos::detail {

// "a FIFO", "a directory", "a character device", …: what stat found where a
// regular file should be.
const char* file_kind(mode_t mode);

// Opens path for reading (O_CLOEXEC) and returns the descriptor, with *st
// filled by fstat. Only a regular file is accepted: a directory, FIFO,
// device or socket is Error(kIoError) naming it, without waiting on a FIFO
// (it is opened O_NONBLOCK, cleared once the file is known to be regular).
// Any OS failure is Error(kIoError) with the path and errno's text.
int open_regular_file(const char* where, const std::string& path, struct stat* st);

}  // namespace tokpos::detail
