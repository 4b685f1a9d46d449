// The benchmarks' DLTensor over caller memory, as a C caller fills it in:
// CPU, row-major (strides NULL), up to three dims.
#pragma once

#include <dlpack/dlpack.h>

#include <cstdint>
#include <initializer_list>

namespace tokpos::bench {

struct Dl {
  int64_t shape[3] = {};
  DLTensor t{};
  Dl(const void* data, DLDataType dtype, std::initializer_list<int64_t> dims) {
    int i = 0;
    for (int64_t d : dims) shape[i++] = d;
    t.data = const_cast<void*>(data);
    t.device = {kDLCPU, 0};
    t.ndim = i;
    t.dtype = dtype;
    t.shape = shape;
    t.strides = nullptr;
    t.byte_offset = 0;
  }
  Dl(const Dl&) = delete;
  Dl& operator=(const Dl&) = delete;
  const DLTensor* get() const { return &t; }
  operator const DLTensor&() const { return t; }
};

inline constexpr DLDataType kF32{kDLFloat, 32, 1}, kI64{kDLInt, 64, 1}, kU8{kDLUInt, 8, 1};

}  // namespace tokpos::bench
