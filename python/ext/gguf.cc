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
#include "tokpos/gguf.h"

namespace tokpos::python {
namespace {

GgufFile open_file(const std::string& path) {
  nb::gil_scoped_release release;
  return GgufFile::open(path);
}

// A string of the file as Python text: UTF-8 by the spec, with any bytes
// that are not UTF-8 replaced (U+FFFD) rather than refused.
nb::object text(std::string_view s) {
  return nb::steal(PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "replace"));
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
      return std::move(items);
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
    out.append(nb::make_tuple(kv.key, type, value_object(kv.value)));
  }
  return out;
}

// [(name, ggml type, dims with ne[0] first, offset in the file, bytes)].
std::vector<std::tuple<std::string, int, std::vector<int64_t>, uint64_t, uint64_t>> tensors(const GgufFile& f) {
  std::vector<std::tuple<std::string, int, std::vector<int64_t>, uint64_t, uint64_t>> out;
  for (const auto& t : f.tensors())
    out.emplace_back(t.name, static_cast<int>(t.ggml_type), t.dims, f.data_offset() + t.offset, t.nbytes);
  return out;
}

// The tensor's bytes as a read-only (rows, row_bytes) uint8 numpy array,
// rows the product of the dims after ne[0].
nb::ndarray<nb::numpy, const uint8_t, nb::ndim<2>> tensor_data(const GgufFile& f, const std::string& name) {
  const GgufTensorInfo& t = f.tensor(name);
  int64_t rows = 1;
  for (size_t d = 1; d < t.dims.size(); ++d) rows *= t.dims[d];
  const std::span<const uint8_t> bytes = f.bytes(name);
  auto* keep = new GgufFile(f);  // shares the mapping
  nb::capsule owner(keep, [](void* p) noexcept { delete static_cast<GgufFile*>(p); });
  const size_t shape[2] = {static_cast<size_t>(rows), static_cast<size_t>(t.nbytes / static_cast<uint64_t>(rows))};
  return nb::ndarray<nb::numpy, const uint8_t, nb::ndim<2>>(bytes.data(), 2, shape, owner);
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
      .def("tensor_data", &tensor_data, nb::arg("name"));
}

}  // namespace tokpos::python
