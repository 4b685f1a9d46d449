// Shared by the fuzz targets: a private temporary file per process.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

namespace tokpos::fuzz {

inline std::string write_temp(const uint8_t* data, size_t size, const char* suffix) {
  static const std::string path = "/tmp/tokpos_fuzz_" + std::to_string(::getpid()) + suffix;
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) __builtin_trap();
  if (size > 0 && std::fwrite(data, 1, size, f) != size) __builtin_trap();
  std::fclose(f);
  return path;
}

}  // namespace tokpos::fuzz
