#include "tokpos/files.h"

#include "io/atomic_file.h"

namespace tokpos {

void write_file_atomically(const std::string& path, std::span<const std::byte> bytes, const char* where) {
  detail::write_file_atomically(where, path, {{bytes.data(), bytes.size()}});
}

void check_file_writable(const std::string& path, const char* where) { detail::check_file_writable(where, path); }

}  // namespace tokpos
