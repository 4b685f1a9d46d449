// tokpos serve: the page's files, compiled into the binary at build time
// (embed_assets.cmake writes their bytes into a generated source file).
#pragma once

#include <cstddef>
#include <string_view>

namespace tokpos::serve {

struct Asset {
  const char* name;  // file name in apps/tokpos/serve/assets, e.g. "app.js"
  const unsigned char* data;
  size_t size;
};

extern const Asset kAssets[];
extern const size_t kNumAssets;

// The asset of that file name, or nullptr.
inline const Asset* find_asset(std::string_view name) {
  for (size_t i = 0; i < kNumAssets; ++i) {
    if (name == kAssets[i].name) return &kAssets[i];
  }
  return nullptr;
}

}  // namespace tokpos::serve
