// The lab kits' files (lab/ in the source tree), embedded at build time by
// cmake/embed_lab.cmake: each one's path relative to lab/ (KIND/...) and its
// bytes, sorted by path.
#pragma once

#include <cstddef>
#include <string_view>

namespace tokpos::frontend::detail {

struct LabFile {
  std::string_view path;
  std::string_view bytes;
};

extern const LabFile kLabFiles[];
extern const std::size_t kLabFileCount;

}  // namespace tokpos::frontend::detail
