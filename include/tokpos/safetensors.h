// tokpos/safetensors.h: reading and writing .safetensors files.
//
// Reading validates all of the file up front (header length against the file
// size, every dtype, shape x dtype size against each byte range, ranges
// inside the data area and not overlapping, unique names); each failure is an
// Error(kCorruptFile) whose message names the file, the tensor and the
// numbers that disagree. A path that cannot be opened, or that is not a
// regular file (a directory, a FIFO, a device such as /dev/zero), is
// Error(kIoError) with the path and the reason; a FIFO is refused without
// waiting for a writer. Asking for a tensor the file lacks, or for a view its
// dtype or access mode does not allow, is Error(kInvalidArgument). The header
// is parsed in O(n log n) for n tensors.
//
// Two access modes:
//  - Access::kMap (the default) maps the file. F32 tensors are viewed in
//    place (zero-copy: view_f32, bytes); the presets borrow those views. As
//    with every mmap reader, the file must not be truncated or rewritten in
//    place while it is mapped: the OS then delivers SIGBUS (which kills the
//    process) on the next access to a page past the new end, and no
//    tokpos::Error can be raised for it. Use it for files that nothing else
//    writes (replace a file with write_safetensors, which renames a new one
//    into place and leaves the mapped one intact).
//  - Access::kRead validates the header read with pread and reads each
//    tensor with pread when asked (read_f32, read_bytes: a copy). A file
//    truncated after it was opened is then Error(kCorruptFile) "F: truncated
//    while reading: ...", and a failing read is Error(kIoError); never a
//    signal. view_f32 and bytes are refused in this mode (kInvalidArgument).
//    `tokpos embed` and the path-taking presets read this way.
// F16 and BF16 are widened to float on request in either mode.
//
// Writing is atomic: a temporary file in the same directory, fsync, rename.
// A failed or interrupted write never leaves a partial file and never loses
// the previous one; it is Error(kIoError) with the path and errno's text.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tokpos/export.h"

namespace tokpos {

struct TOKPOS_API TensorInfo {
  std::string dtype;  // "F32", "F16", "BF16", "I64", ... as in the file
  std::vector<int64_t> shape;
  uint64_t offset = 0;  // byte offset inside the data area
  uint64_t bytes = 0;
  int64_t numel() const;
};

class TOKPOS_API SafetensorsFile {
 public:
  enum class Access {
    kMap,   // map the file: zero-copy views; truncation while mapped is SIGBUS (above)
    kRead,  // pread the header and each tensor on request: copies; truncation is an Error
  };
  // Opens and validates the whole header. Throws Error naming what is wrong.
  static SafetensorsFile open(const std::string& path, Access access = Access::kMap);

  const std::string& path() const { return path_; }
  Access access() const { return access_; }
  std::vector<std::string> names() const;  // sorted
  bool contains(const std::string& name) const { return tensors_.count(name) != 0; }
  const TensorInfo& info(const std::string& name) const;  // Error if missing
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // Zero-copy view of an F32 tensor (valid while this object or a copy of it
  // lives). Access::kMap only.
  std::span<const float> view_f32(const std::string& name) const;
  // Any of F32, F16, BF16 as floats (exact widening); Error for other dtypes.
  std::vector<float> read_f32(const std::string& name) const;
  // Rows [row_begin, row_begin + rows) of an F32, F16 or BF16 tensor (rows
  // are its first dimension; each holds the product of the others) as
  // floats, widened exactly, into out, which must hold exactly that many
  // numbers. Only those rows' bytes are read: Access::kRead preads them, so a
  // rank of a sharded load reads its own rows and no others. Error
  // (kInvalidArgument) for a 0-D tensor, another dtype, a range outside
  // [0, shape[0]) or an out of another size; either mode.
  void read_f32_rows(const std::string& name, int64_t row_begin, int64_t rows, std::span<float> out) const;
  // Raw bytes of any tensor, in place. Access::kMap only.
  std::span<const uint8_t> bytes(const std::string& name) const;
  // Raw bytes of any tensor, copied; either mode.
  std::vector<uint8_t> read_bytes(const std::string& name) const;

 private:
  struct Mapping;
  std::string path_;
  Access access_ = Access::kMap;
  std::shared_ptr<Mapping> map_;  // the mapping (kMap) or the open descriptor (kRead)
  uint64_t data_offset_ = 0;      // where the data area starts in the file
  const uint8_t* data_ = nullptr;  // start of the data area
  std::map<std::string, TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

// One tensor to write: its name, dtype ("F32", "F16", "BF16", "I64"), shape and bytes.
struct TensorRef {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  const void* data;
  uint64_t bytes;
};
// Writes the tensors (sorted by name, laid out without gaps) atomically.
TOKPOS_API void write_safetensors(const std::string& path, const std::vector<TensorRef>& tensors,
                                  const std::map<std::string, std::string>& metadata = {});

// Bytes per element of a safetensors dtype name, or 0 if unknown.
TOKPOS_API size_t safetensors_dtype_size(const std::string& dtype);

}  // namespace tokpos
