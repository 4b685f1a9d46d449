// What the files of tokpos._core share: array types, the DLTensor view of
// an ndarray, and one bind_<topic> function per file beside module.cc.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>

#include <dlpack/dlpack.h>

#include "tokpos/error.h"

namespace tokpos::python {

namespace nb = nanobind;

using InArray = nb::ndarray<nb::ro>;  // any dtype, any strides, read-only is fine
using OutArray = nb::ndarray<>;       // must be writable

// A DLTensor over an ndarray's memory. nanobind gives strides in elements
// and data with the byte offset applied, as DLPack's DLTensor expects.
struct Tensor {
  DLTensor dl{};
  int64_t shape[4]{};
  int64_t strides[4]{};

  template <typename A>
  Tensor(const A& a, const char* name) {
    if (a.ndim() > 4) {
      throw tokpos::Error(tokpos::Status::kInvalidArgument,
                          std::string(name) + " has " + std::to_string(a.ndim()) + " dimensions; at most 4 are supported");
    }
    dl.data = const_cast<void*>(static_cast<const void*>(a.data()));
    // The device type is stored as the integer it is (a newer DLPack's value
    // may lie outside this header's enum); the core reads it back the same way.
    const auto device_type = static_cast<int32_t>(a.device_type());
    std::memcpy(&dl.device.device_type, &device_type, sizeof device_type);
    dl.device.device_id = static_cast<int32_t>(a.device_id());
    dl.ndim = static_cast<int32_t>(a.ndim());
    const nb::dlpack::dtype t = a.dtype();
    dl.dtype = {t.code, t.bits, t.lanes};
    for (size_t i = 0; i < a.ndim(); ++i) {
      shape[i] = static_cast<int64_t>(a.shape(i));
      strides[i] = a.stride(i);
    }
    dl.shape = shape;
    dl.strides = strides;
  }
  // dl points into this object: it is made in place, never copied or moved.
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;
};

// An optional argument's tensor, made in place in t.
template <typename A>
inline const DLTensor* maybe(std::optional<Tensor>& t, const std::optional<A>& a, const char* name) {
  if (!a) return nullptr;
  return &t.emplace(*a, name).dl;
}

// Defined in diagnostics.cc, frontend.cc, gguf.cc, io.cc, positions.cc, rope.cc and shard.cc.
void bind_frontend(nb::module_& m);
void bind_io(nb::module_& m);
void bind_gguf(nb::module_& m);
void bind_positions(nb::module_& m);
void bind_rope(nb::module_& m);
void bind_shard(nb::module_& m);
void bind_diagnostics(nb::module_& m);
void bind_quant(nb::module_& m);  // quant.cc

}  // namespace tokpos::python
