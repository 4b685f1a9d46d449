// The C API's GGUF reader: tokpos::GgufFile behind an opaque handle. The
// handle keeps, beside the file, each tensor's (rows, row_bytes) shape and
// its bytes as the ops read them (GgufFile::aligned_bytes: in place, or an
// aligned copy of f32, f16 or bf16 data that the file's alignment leaves
// unaligned), so the blocks DLTensor it hands out points at storage that
// lives as long as the handle.
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "capi/guard.h"
#include "common/check.h"
#include "tokpos/error.h"
#include "tokpos/gguf.h"
#include "tokpos/tokpos.h"

struct tokpos_gguf {
  tokpos::GgufFile file;
  std::vector<std::array<int64_t, 2>> block_shapes;  // per tensor: (rows, row_bytes)
  std::vector<tokpos::GgufFile::AlignedBytes> blocks;  // per tensor: the bytes the blocks DLTensor views
};

namespace {

using tokpos::GgufFile;
using tokpos::GgufType;
using tokpos::GgufValue;
using tokpos::Status;
using tokpos::capi::guard;
using tokpos::detail::check_not_null;
using tokpos::detail::fail;

const tokpos_gguf& handle(const char* fn, const tokpos_gguf* f) {
  check_not_null(fn, "f", f);
  return *f;
}

void check_index(const char* fn, const char* what, int64_t index, size_t count) {
  if (index < 0 || static_cast<uint64_t>(index) >= count)
    fail(Status::kInvalidArgument, fn, what, " index ", index, " is outside [0, ", count, ")");
}

void fill_tensor(const tokpos_gguf& f, size_t i, tokpos_gguf_tensor* out) {
  const tokpos::GgufTensorInfo& t = f.file.tensors()[i];
  tokpos_gguf_tensor r{};
  r.name = t.name.c_str();
  r.ggml_type = static_cast<int32_t>(t.ggml_type);
  r.n_dims = static_cast<int32_t>(t.dims.size());
  for (size_t d = 0; d < t.dims.size() && d < 4; ++d) r.dims[d] = t.dims[d];
  r.nbytes = t.nbytes;
  r.data = f.file.bytes(t.name).data();
  r.blocks.data = const_cast<uint8_t*>(f.blocks[i].bytes.data());
  r.blocks.device = {kDLCPU, 0};
  r.blocks.ndim = 2;
  r.blocks.dtype = {kDLUInt, 8, 1};
  r.blocks.shape = const_cast<int64_t*>(f.block_shapes[i].data());
  r.blocks.strides = nullptr;
  r.blocks.byte_offset = 0;
  *out = r;
}

// The value of key `index`, or its element `element` (-1: the value itself).
GgufValue value_of(const char* fn, const tokpos_gguf* f, int64_t index, int64_t element) {
  const auto& metadata = handle(fn, f).file.metadata();
  check_index(fn, "key", index, metadata.size());
  const auto& kv = metadata[static_cast<size_t>(index)];
  if (element == -1) {
    if (kv.value.is_array())
      fail(Status::kInvalidArgument, fn, "'", tokpos::gguf_printable(kv.key), "' is an array of ", kv.value.size(),
           " elements: ask for an element (0 .. ", kv.value.size(), ")");
    return kv.value;
  }
  if (!kv.value.is_array())
    fail(Status::kInvalidArgument, fn, "'", tokpos::gguf_printable(kv.key), "' is a ", tokpos::gguf_type_name(kv.value.type()),
         ", not an array: ask for element -1");
  if (element < 0 || static_cast<uint64_t>(element) >= kv.value.size())
    fail(Status::kInvalidArgument, fn, "element ", element, " of '", tokpos::gguf_printable(kv.key), "' is outside [0, ", kv.value.size(),
         ")");
  return kv.value.at(static_cast<uint64_t>(element));
}

// The value's conversion, with the key named when it does not fit.
template <typename F>
auto converted(const char* fn, const tokpos_gguf* f, int64_t index, F&& convert) {
  try {
    return convert();
  } catch (const tokpos::Error& e) {
    fail(e.status(), fn, "'", tokpos::gguf_printable(f->file.metadata()[static_cast<size_t>(index)].key), "': ",
         e.what());
  }
}

}  // namespace

extern "C" {

tokpos_status tokpos_gguf_open(tokpos_gguf** out, const char* path) {
  constexpr const char* fn = "tokpos_gguf_open";
  return guard(fn, [&] {
    check_not_null(fn, "out", out);
    check_not_null(fn, "path", path);
    auto* f = new tokpos_gguf{GgufFile::open(path), {}, {}};
    try {
      f->block_shapes.reserve(f->file.tensors().size());
      f->blocks.reserve(f->file.tensors().size());
      for (const auto& t : f->file.tensors()) {
        int64_t rows = 1;
        for (size_t d = 1; d < t.dims.size(); ++d) rows *= t.dims[d];  // the reader checked the product
        f->block_shapes.push_back({rows, static_cast<int64_t>(t.nbytes / static_cast<uint64_t>(rows))});
        f->blocks.push_back(f->file.aligned_bytes(t.name));
      }
    } catch (...) {
      delete f;
      throw;
    }
    *out = f;
  });
}

void tokpos_gguf_free(tokpos_gguf* f) { delete f; }

tokpos_status tokpos_gguf_counts(const tokpos_gguf* f, uint32_t* version, uint64_t* alignment, int64_t* n_tensors,
                                 int64_t* n_keys) {
  constexpr const char* fn = "tokpos_gguf_counts";
  return guard(fn, [&] {
    const GgufFile& file = handle(fn, f).file;
    if (version) *version = file.version();
    if (alignment) *alignment = file.alignment();
    if (n_tensors) *n_tensors = static_cast<int64_t>(file.tensors().size());
    if (n_keys) *n_keys = static_cast<int64_t>(file.metadata().size());
  });
}

tokpos_status tokpos_gguf_tensor_at(const tokpos_gguf* f, int64_t index, tokpos_gguf_tensor* out) {
  constexpr const char* fn = "tokpos_gguf_tensor_at";
  return guard(fn, [&] {
    const tokpos_gguf& h = handle(fn, f);
    check_not_null(fn, "out", out);
    check_index(fn, "tensor", index, h.file.tensors().size());
    fill_tensor(h, static_cast<size_t>(index), out);
  });
}

tokpos_status tokpos_gguf_find_tensor(const tokpos_gguf* f, const char* name, tokpos_gguf_tensor* out) {
  constexpr const char* fn = "tokpos_gguf_find_tensor";
  return guard(fn, [&] {
    const tokpos_gguf& h = handle(fn, f);
    check_not_null(fn, "name", name);
    check_not_null(fn, "out", out);
    const tokpos::GgufTensorInfo& t = h.file.tensor(name);  // names the missing one
    fill_tensor(h, static_cast<size_t>(&t - h.file.tensors().data()), out);
  });
}

tokpos_status tokpos_gguf_key_at(const tokpos_gguf* f, int64_t index, const char** key, int32_t* type,
                                 int32_t* elem_type, uint64_t* count) {
  constexpr const char* fn = "tokpos_gguf_key_at";
  return guard(fn, [&] {
    const auto& metadata = handle(fn, f).file.metadata();
    check_not_null(fn, "key", key);
    check_index(fn, "key", index, metadata.size());
    const auto& kv = metadata[static_cast<size_t>(index)];
    *key = kv.key.c_str();
    if (type) *type = static_cast<int32_t>(kv.value.type());
    if (elem_type) *elem_type = kv.value.is_array() ? static_cast<int32_t>(kv.value.array_type()) : -1;
    if (count) *count = kv.value.is_array() ? kv.value.size() : 1;
  });
}

tokpos_status tokpos_gguf_find_key(const tokpos_gguf* f, const char* key, int64_t* index) {
  constexpr const char* fn = "tokpos_gguf_find_key";
  return guard(fn, [&] {
    const GgufFile& file = handle(fn, f).file;
    check_not_null(fn, "key", key);
    check_not_null(fn, "index", index);
    const GgufValue* v = file.find(key);
    *index = -1;
    if (v == nullptr) return;
    for (size_t i = 0; i < file.metadata().size(); ++i)
      if (&file.metadata()[i].value == v) *index = static_cast<int64_t>(i);
  });
}

tokpos_status tokpos_gguf_get_int64(const tokpos_gguf* f, int64_t index, int64_t element, int64_t* out) {
  constexpr const char* fn = "tokpos_gguf_get_int64";
  return guard(fn, [&] {
    check_not_null(fn, "out", out);
    const GgufValue v = value_of(fn, f, index, element);
    *out = converted(fn, f, index, [&] { return v.type() == GgufType::kBool ? int64_t{v.to_bool()} : v.to_int64(); });
  });
}

tokpos_status tokpos_gguf_get_uint64(const tokpos_gguf* f, int64_t index, int64_t element, uint64_t* out) {
  constexpr const char* fn = "tokpos_gguf_get_uint64";
  return guard(fn, [&] {
    check_not_null(fn, "out", out);
    const GgufValue v = value_of(fn, f, index, element);
    *out = converted(fn, f, index, [&] { return v.to_uint64(); });
  });
}

tokpos_status tokpos_gguf_get_double(const tokpos_gguf* f, int64_t index, int64_t element, double* out) {
  constexpr const char* fn = "tokpos_gguf_get_double";
  return guard(fn, [&] {
    check_not_null(fn, "out", out);
    const GgufValue v = value_of(fn, f, index, element);
    *out = converted(fn, f, index, [&] { return v.to_double(); });
  });
}

tokpos_status tokpos_gguf_get_string(const tokpos_gguf* f, int64_t index, int64_t element, const char** data,
                                     uint64_t* length) {
  constexpr const char* fn = "tokpos_gguf_get_string";
  return guard(fn, [&] {
    check_not_null(fn, "data", data);
    check_not_null(fn, "length", length);
    const GgufValue v = value_of(fn, f, index, element);
    const std::string_view s = converted(fn, f, index, [&] { return v.to_string(); });
    *data = s.data();
    *length = s.size();
  });
}

}  // extern "C"
