// tokpos/gguf.h: reading GGUF files, llama.cpp's model format (versions 2 and 3).
//
// The layout (ggml's docs/gguf.md): the magic "GGUF", a uint32 version, a
// uint64 tensor count and a uint64 key/value count; the key/value pairs
// (a string key, a uint32 value type, the value); one info per tensor (a
// string name, a uint32 n_dims, n_dims uint64 dims with ne[0] first, a
// uint32 ggml type, a uint64 offset); padding up to `general.alignment`
// (32 when the key is absent); then the data section. A string is a uint64
// length and that many bytes; an array is a uint32 element type, a uint64
// count and the elements. Every number is little-endian.
//
// Opening validates all of the file before it returns, and every failure is
// Error(kCorruptFile) whose message names the file, the byte offset, the
// field, the value and its limit:
//  - the magic; the version (1 and big-endian files are refused by name);
//  - the tensor and key/value counts against the bytes that remain (each
//    entry needs a minimum number of bytes, so a count the file cannot hold
//    is refused before anything is allocated for it);
//  - every string length and array length against the bytes that remain;
//    the value types (0..12) and array element types; array nesting at
//    most kGgufMaxArrayDepth deep; bool values 0 or 1;
//  - `general.alignment`: a uint32, a nonzero power of two;
//  - every tensor: a name of at most 64 bytes, n_dims in 1..4, every dim
//    >= 1, the element count and the byte size without overflow, the ggml
//    type known (tokpos/ggml_type.h) and ne[0] a whole number of its blocks,
//    the offset a multiple of the alignment, the data range inside the file,
//    no two ranges overlapping (sorted by offset: O(n log n));
//  - unique tensor names and unique keys.
// No allocation is sized by a number in the file beyond what the file's own
// bytes back; the whole check is O(n log n) in the number of entries.
//
// A path that cannot be opened, or that is not a regular file (a directory,
// a FIFO, a device), is Error(kIoError) with the path and the reason; a FIFO
// is refused without waiting for a writer. Asking for a tensor or a value
// the file lacks, or a value as a type it is not, is Error(kInvalidArgument).
//
// Keys, string values and tensor names are kept as the file's bytes (UTF-8
// by the spec, not checked: a file with other bytes is read, not refused).
// Wherever they are shown as text, one rule applies: valid UTF-8 stays as it
// is and each byte that is not part of it becomes the four characters \xNN
// (two lowercase hex digits), which is Python's errors="backslashreplace"
// (gguf_text). Terminals and error messages also get every control character
// (C0, DEL, C1) as the \xNN of its bytes (gguf_printable). A file in which two
// keys, or two tensor names, read as the same text by gguf_text is refused.
//
// open() maps the file: the metadata values and the tensor bytes are views
// into the mapping (zero copy), and every GgufFile, GgufValue and span
// handed out keeps it alive (a copy of the file object shares it; spans are
// valid while the file object or a copy lives). As with every mmap reader,
// the file must not be truncated or rewritten in place while it is mapped:
// the OS then delivers SIGBUS (which kills the process) on the next access
// to a page past the new end, and no tokpos::Error can be raised for it.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tokpos/export.h"
#include "tokpos/ggml_type.h"

namespace tokpos {

// GGUF's value types (gguf_type in ggml's gguf.h, GGUFValueType in gguf-py).
enum class GgufType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};

// "UINT8", "STRING", ... as gguf-py names them; "?" for a value not a type.
TOKPOS_API const char* gguf_type_name(GgufType type);

// A key, string value or tensor name as text: valid UTF-8 as it is, each
// byte outside it as \xNN (lowercase hex): the rule of the reader, the CLI's
// --json and Python's errors="backslashreplace". Always valid UTF-8.
TOKPOS_API std::string gguf_text(std::string_view bytes);
// The same for a terminal or an error message: also each byte of a control
// character (U+0000..U+001F, U+007F, U+0080..U+009F) as \xNN, so no byte of
// the file reaches a terminal as a control sequence (ESC, CR, NUL, CSI).
TOKPOS_API std::string gguf_printable(std::string_view bytes);

// Arrays of arrays nest at most this deep (an array of scalars is depth 1).
inline constexpr int kGgufMaxArrayDepth = 8;

// One metadata value: a scalar, a string, or an array of any of them. A
// view into the file's bytes, which it keeps alive; cheap to copy.
class TOKPOS_API GgufValue {
 public:
  GgufType type() const { return type_; }
  bool is_array() const { return type_ == GgufType::kArray; }

  // Scalars. Each is Error(kInvalidArgument) naming the value's type when it
  // does not fit the request.
  uint64_t to_uint64() const;          // any integer type holding a value >= 0
  int64_t to_int64() const;            // any integer type holding a value <= INT64_MAX
  double to_double() const;            // FLOAT32 (widened exactly) or FLOAT64
  bool to_bool() const;                // BOOL
  std::string_view to_string() const;  // STRING: the bytes as in the file (UTF-8 by the spec)

  // Arrays. Error(kInvalidArgument) when this is not an array, or i >= size().
  GgufType array_type() const;  // the elements' type
  uint64_t size() const;        // the number of elements
  GgufValue at(uint64_t i) const;
  // The whole array, converted as the scalar accessors convert each element.
  std::vector<std::string> to_strings() const;
  std::vector<int64_t> to_int64s() const;
  std::vector<double> to_doubles() const;

 private:
  friend struct GgufParser;
  GgufType type_ = GgufType::kUint8;
  GgufType elem_ = GgufType::kUint8;  // arrays: the element type
  uint64_t count_ = 0;                // arrays: the element count; strings: the length
  const uint8_t* data_ = nullptr;     // the scalar's bytes, the string's bytes, the array's first element
  // Arrays of strings or arrays: each element's byte offset from data_, and
  // the end of the last (one uint64 per element, which takes at least 8
  // bytes in the file).
  std::shared_ptr<const std::vector<uint64_t>> starts_;
  std::shared_ptr<const void> owner_;  // the file's bytes
};

struct TOKPOS_API GgufKeyValue {
  std::string key;
  GgufValue value;
};

struct TOKPOS_API GgufTensorInfo {
  std::string name;
  GgmlType ggml_type = GgmlType::kF32;
  std::vector<int64_t> dims;  // ne[0] first, as in the file: ne[0] is the row length
  uint64_t offset = 0;        // from the start of the data section (data_offset()), as in the file
  uint64_t nbytes = 0;        // the bytes of the tensor's data
  // numpy's order, the dims reversed: (rows, cols) for a 2-D table.
  std::vector<int64_t> shape() const { return {dims.rbegin(), dims.rend()}; }
};

class TOKPOS_API GgufFile {
 public:
  // Maps and validates the file. Throws Error as described above.
  static GgufFile open(const std::string& path);
  // Validates bytes held in memory; `name` stands for the file in messages.
  // The bytes are copied, so they need not outlive the call.
  static GgufFile parse(std::span<const uint8_t> bytes, std::string name);

  const std::string& name() const { return name_; }      // the path, or parse's name
  uint32_t version() const { return version_; }          // 2 or 3
  uint64_t alignment() const { return alignment_; }      // general.alignment, or 32
  uint64_t data_offset() const { return data_offset_; }  // where the data section starts in the file
  uint64_t file_size() const { return size_; }

  // The metadata in the file's order, and one value by key (nullptr if absent).
  const std::vector<GgufKeyValue>& metadata() const { return metadata_; }
  const GgufValue* find(std::string_view key) const;

  // The tensors in the file's order, and one by name: Error(kInvalidArgument)
  // naming the missing name and listing a few of those present.
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo& tensor(std::string_view name) const;
  // A tensor's data in place (zero copy): tensor(name).nbytes bytes.
  std::span<const uint8_t> bytes(std::string_view name) const;
  // The same bytes, where an f32, f16 or bf16 tensor's elements can be read
  // as their type: in place, except when general.alignment (1 or 2) leaves
  // such data at an address that is not a multiple of its element size; then
  // a copy in aligned memory. `owner` keeps the bytes alive (the mapping, or
  // the copy); `copied` says which.
  struct AlignedBytes {
    std::span<const uint8_t> bytes;
    std::shared_ptr<const void> owner;
    bool copied = false;
  };
  AlignedBytes aligned_bytes(std::string_view name) const;

 private:
  friend struct GgufParser;
  std::string name_;
  std::shared_ptr<const void> owner_;  // the mapping, or parse's copy
  const uint8_t* base_ = nullptr;
  uint64_t size_ = 0;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<GgufKeyValue> metadata_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> key_index_;     // key -> index in metadata_
  std::map<std::string, size_t, std::less<>> tensor_index_;  // name -> index in tensors_
};

}  // namespace tokpos
