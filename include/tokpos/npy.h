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
// Throws Error(kIoError) naming the path and the OS error (errno's text) when
// the write fails; Error(kInvalidArgument) or Error(kShapeMismatch) for a bad
// descr or a byte count that disagrees with shape and descr.
TOKPOS_API void write_npy(const std::string& path, const std::string& descr,
                          const std::vector<int64_t>& shape, const void* data, size_t bytes);

// Reads a .npy file. Error(kIoError) when it cannot be opened or read (the
// path and errno's text); Error(kCorruptFile) naming what is wrong with a
// malformed file; Error(kUnimplemented) for a well-formed file that uses
// what tokpos does not read (format version 2 or 3, Fortran order, a dtype
// other than little-endian f2, f4, f8, i1 to i8 or u1 to u8).
TOKPOS_API NpyArray read_npy(const std::string& path);

}  // namespace tokpos
