// tokpos/npy.h: NumPy .npy files (format version 1.0), little-endian, C order.
//
// Writing is atomic: the data goes to a temporary file in the same directory,
// is fsync'ed, then renamed over the target, so a failed write never leaves a
// partial file or loses the previous one.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tokpos/export.h"

namespace tokpos {

struct NpyArray {
  std::string descr;  // "<f4", "<f2", "<u2", "<f8", "<i8"
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;  // raw little-endian bytes, C order
};

// Writes `bytes` bytes of data with the given descr and shape.
// Throws Error(kInvalidArgument) naming the path and the OS error on failure.
TOKPOS_API void write_npy(const std::string& path, const std::string& descr,
                          const std::vector<int64_t>& shape, const void* data, size_t bytes);

// Reads a .npy file; Error(kInvalidArgument) names what is wrong with it.
TOKPOS_API NpyArray read_npy(const std::string& path);

}  // namespace tokpos
