#include "tokpos/files.h"

#include "io/atomic_file.h"

#include <vector>

namespace tokpos {

void write_file_atomically(const std::string& path, std::span<const std::byte> bytes, const char* where) {
  detail::write_file_atomically(where, path, {{bytes.data(), bytes.size()}});
}

void check_file_writable(const std::string& path, const char* where) { detail::check_file_writable(where, path); }

void write_files_atomically(std::span<const FileBytes> files, const char* where) {
  std::vector<detail::FileContents> contents;
  contents.reserve(files.size());
  for (const FileBytes& f : files) contents.push_back({f.path, {{f.bytes.data(), f.bytes.size()}}});
  detail::write_files_atomically(where, contents);
}

}  // namespace tokpos
