// tokpos/safetensors.h: reading and writing .safetensors files.
//
// Reading maps the file and validates all of it up front (header length
// against the file size, every dtype, shape x dtype size against each byte
// range, ranges inside the data area and not overlapping, unique names);
// each failure is an Error(kCorruptFile) whose message names the file, the
// tensor and the numbers that disagree. A file that cannot be opened or
// mapped is Error(kIoError), with the path and errno's text. Asking for a
// tensor the file lacks, or for a view its dtype does not allow, is
// Error(kInvalidArgument). F32 tensors are then viewed in place (zero-copy);
// F16 and BF16 are widened to float on request.
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
  // Maps and validates the whole file. Throws Error naming what is wrong.
  static SafetensorsFile open(const std::string& path);

  const std::string& path() const { return path_; }
  std::vector<std::string> names() const;  // sorted
  bool contains(const std::string& name) const { return tensors_.count(name) != 0; }
  const TensorInfo& info(const std::string& name) const;  // Error if missing
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // Zero-copy view of an F32 tensor (valid while this object lives).
  std::span<const float> view_f32(const std::string& name) const;
  // Any of F32, F16, BF16 as floats (exact widening); Error for other dtypes.
  std::vector<float> read_f32(const std::string& name) const;
  // Raw bytes of any tensor.
  std::span<const uint8_t> bytes(const std::string& name) const;

 private:
  struct Mapping;
  std::string path_;
  std::shared_ptr<Mapping> map_;
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
