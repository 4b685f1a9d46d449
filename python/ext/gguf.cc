// tokpos._core: the GGUF reader (tokpos/gguf.h). The file is mapped and
// validated whole by the C++ reader; tensor data comes back as read-only
// uint8 arrays over the mapping (zero copy), each holding a reference to the
// mapping, so an array outlives the file object safely.
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "bind.h"
#include "tokpos/error.h"
#include "tokpos/gguf.h"

namespace tokpos::python {
namespace {

GgufFile open_file(const std::string& path) {
  nb::gil_scoped_release release;
  return GgufFile::open(path);
}

// A key, string value or tensor name as Python text: the rule of
// tokpos/gguf.h, valid UTF-8 as it is and each other byte as \xNN, which is
// errors="backslashreplace" (the same text as gguf_text and the CLI's --json).
nb::object text(std::string_view s) {
  PyObject* o = PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "backslashreplace");
  if (o == nullptr) throw nb::python_error();
  return nb::steal(o);
}

nb::object value_object(const GgufValue& v) {
  switch (v.type()) {
    case GgufType::kString: return text(v.to_string());
    case GgufType::kBool: return nb::bool_(v.to_bool());
    case GgufType::kFloat32:
    case GgufType::kFloat64: return nb::float_(v.to_double());
    case GgufType::kInt8:
    case GgufType::kInt16:
    case GgufType::kInt32:
    case GgufType::kInt64: return nb::int_(v.to_int64());
    case GgufType::kArray: {
      nb::list items;
      for (uint64_t i = 0; i < v.size(); ++i) items.append(value_object(v.at(i)));
      return items;
    }
    default: return nb::int_(v.to_uint64());
  }
}

// [(key, type name, value)] in the file's order; an array's type is
// "ARRAY[element type]".
nb::list metadata(const GgufFile& f) {
  nb::list out;
  for (const auto& kv : f.metadata()) {
    std::string type = gguf_type_name(kv.value.type());
    if (kv.value.is_array()) type += std::string("[") + gguf_type_name(kv.value.array_type()) + "]";
    out.append(nb::make_tuple(text(kv.key), type, value_object(kv.value)));
  }
  return out;
}

// [(name, ggml type, dims with ne[0] first, offset in the file, bytes)],
// the name as text().
nb::list tensors(const GgufFile& f) {
  nb::list out;
  for (const auto& t : f.tensors()) {
    out.append(nb::make_tuple(text(t.name), static_cast<int>(t.ggml_type), nb::cast(t.dims),
                              f.data_offset() + t.offset, t.nbytes));
  }
  return out;
}

// The tensor's bytes as a read-only (rows, row_bytes) uint8 numpy array,
// rows the product of the dims after ne[0]: a view of the mapping, or, for
// f32, f16 or bf16 data that general.alignment leaves unaligned for its
// elements, an aligned copy (GgufFile::aligned_bytes).
nb::ndarray<nb::numpy, const uint8_t, nb::ndim<2>> data_of(const GgufFile& f, const GgufTensorInfo& t) {
  int64_t rows = 1;
  for (size_t d = 1; d < t.dims.size(); ++d) rows *= t.dims[d];
  GgufFile::AlignedBytes bytes = f.aligned_bytes(t.name);
  const uint8_t* data = bytes.bytes.data();
  auto* keep = new std::shared_ptr<const void>(std::move(bytes.owner));  // the mapping, or the copy
  nb::capsule owner(keep, [](void* p) noexcept { delete static_cast<std::shared_ptr<const void>*>(p); });
  const size_t shape[2] = {static_cast<size_t>(rows), static_cast<size_t>(t.nbytes / static_cast<uint64_t>(rows))};
  return nb::ndarray<nb::numpy, const uint8_t, nb::ndim<2>>(data, 2, shape, owner);
}

// By name (a name the file lacks is the reader's error, listing some it has).
nb::ndarray<nb::numpy, const uint8_t, nb::ndim<2>> tensor_data(const GgufFile& f, const std::string& name) {
  return data_of(f, f.tensor(name));
}

// By index in the file's order: the way to a name that is not UTF-8.
nb::ndarray<nb::numpy, const uint8_t, nb::ndim<2>> tensor_data_at(const GgufFile& f, size_t index) {
  if (index >= f.tensors().size()) {
    throw Error(Status::kInvalidArgument, "gguf: " + f.name() + ": tensor index " + std::to_string(index) +
                                              " is outside [0, " + std::to_string(f.tensors().size()) + ")");
  }
  return data_of(f, f.tensors()[index]);
}

}  // namespace

void bind_gguf(nb::module_& m) {
  nb::class_<GgufFile>(m, "GgufFile")
      .def_static("open", &open_file, nb::arg("path"))
      .def_prop_ro("name", &GgufFile::name)
      .def_prop_ro("version", &GgufFile::version)
      .def_prop_ro("alignment", &GgufFile::alignment)
      .def_prop_ro("data_offset", &GgufFile::data_offset)
      .def_prop_ro("file_size", &GgufFile::file_size)
      .def("metadata", &metadata)
      .def("tensors", &tensors)
      .def("tensor_data", &tensor_data, nb::arg("name"))
      .def("tensor_data_at", &tensor_data_at, nb::arg("index"));
}

}  // namespace tokpos::python
