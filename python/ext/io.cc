// tokpos._core: the safetensors bindings (tokpos/safetensors.h). The reader
// is the C++ one, opened with pread (Access::kRead): a path that is not a
// regular file (a FIFO, a directory, a device) is refused without waiting, a
// file cut short while it is read is an error, never a signal, and
// read_rows reads only the rows asked for (one rank's shard). The writer is
// tokpos::write_safetensors, atomic as every tokpos writer (a temporary file
// beside the target, fsync, rename): it follows a symbolic link and replaces
// the file the link ends in, keeps an existing file's mode, gives a new one
// 0666 & ~umask, and refuses to replace anything that is not a regular file.
#include <nanobind/stl/map.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "bind.h"
#include "tokpos/safetensors.h"

namespace tokpos::python {
namespace {

using Rows = nb::ndarray<float, nb::c_contig, nb::device::cpu>;

SafetensorsFile open_file(const std::string& path) {
  nb::gil_scoped_release release;
  return SafetensorsFile::open(path, SafetensorsFile::Access::kRead);
}

// (dtype, shape) of one tensor, as the file states them.
std::pair<std::string, std::vector<int64_t>> tensor_info(const SafetensorsFile& f, const std::string& name) {
  const TensorInfo& i = f.info(name);
  return {i.dtype, i.shape};
}

// out (rows, ...) float32 = rows [row_begin, row_begin + rows) of the tensor.
void read_rows(const SafetensorsFile& f, const std::string& name, int64_t row_begin, const Rows& out) {
  if (out.ndim() < 1) {
    throw Error(Status::kInvalidArgument, "tokpos: read_rows needs an output with a row dimension");
  }
  const auto rows = static_cast<int64_t>(out.shape(0));
  const std::span<float> s(out.data(), out.size());
  nb::gil_scoped_release release;
  f.read_f32_rows(name, row_begin, rows, s);
}

// The safetensors name of an array's dtype.
std::string dtype_name(const std::string& tensor, const nb::dlpack::dtype& t) {
  using Code = nb::dlpack::dtype_code;
  const auto code = static_cast<Code>(t.code);
  if (t.lanes == 1) {
    if (code == Code::Float && t.bits == 32) return "F32";
    if (code == Code::Float && t.bits == 16) return "F16";
    if (code == Code::Float && t.bits == 64) return "F64";
    if (code == Code::Bfloat && t.bits == 16) return "BF16";
    if (code == Code::Int && t.bits == 64) return "I64";
    if (code == Code::Int && t.bits == 32) return "I32";
    if (code == Code::Int && t.bits == 16) return "I16";
    if (code == Code::Int && t.bits == 8) return "I8";
    if (code == Code::UInt && t.bits == 8) return "U8";
    if (code == Code::Bool && t.bits == 8) return "BOOL";
  }
  throw Error(Status::kInvalidArgument, "tokpos: write_safetensors: tensor '" + tensor + "' has a dtype (code " +
                                            std::to_string(t.code) + ", " + std::to_string(t.bits) +
                                            " bits) that safetensors files here do not hold");
}

// Writes (name, array) pairs, each a C-contiguous CPU array, to path.
void write(const std::string& path, const std::vector<std::pair<std::string, InArray>>& tensors,
           const std::map<std::string, std::string>& metadata) {
  std::vector<TensorRef> refs;
  for (const auto& [name, a] : tensors) {
    if (a.device_type() != nb::device::cpu::value) {
      throw Error(Status::kInvalidArgument, "tokpos: write_safetensors: tensor '" + name + "' is not in CPU memory");
    }
    std::vector<int64_t> shape(a.ndim());
    int64_t expected = 1;
    for (size_t d = a.ndim(); d-- > 0;) {
      shape[d] = static_cast<int64_t>(a.shape(d));
      if (shape[d] > 1 && a.stride(d) != expected) {
        throw Error(Status::kInvalidArgument,
                    "tokpos: write_safetensors: tensor '" + name + "' is not C-contiguous");
      }
      expected *= shape[d];
    }
    refs.push_back({name, dtype_name(name, a.dtype()), std::move(shape), a.data(),
                    static_cast<uint64_t>(a.nbytes())});
  }
  nb::gil_scoped_release release;
  write_safetensors(path, refs, metadata);
}

}  // namespace

void bind_io(nb::module_& m) {
  nb::class_<SafetensorsFile>(m, "SafetensorsFile")
      .def_static("open", &open_file, nb::arg("path"))
      .def_prop_ro("path", &SafetensorsFile::path)
      .def("names", &SafetensorsFile::names)
      .def("info", &tensor_info, nb::arg("name"))
      .def("read_rows", &read_rows, nb::arg("name"), nb::arg("row_begin"), nb::arg("out"));
  m.def("write_safetensors", &write, nb::arg("path"), nb::arg("tensors"), nb::arg("metadata"));
}

}  // namespace tokpos::python
