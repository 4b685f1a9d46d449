#include "ops/tensor.h"

#include <algorithm>
#include <cstring>
#include <sstream>
#include <string>

#include "common/check.h"

namespace tokpos::ops::detail {
namespace {

using tokpos::detail::fail;

// A DLDevice's device_type read as the integer it is: a caller built with a
// newer DLPack may pass a value this header's enum does not list (16, 17, …),
// and loading such a value through the enum type is undefined.
int device_type_of(const DLDevice& d) {
  static_assert(sizeof(d.device_type) == sizeof(int32_t), "DLPack's DLDeviceType is a 32-bit enum");
  int32_t v = 0;
  std::memcpy(&v, &d.device_type, sizeof v);
  return v;
}

const char* device_name(int d) {
  // DLPack's device types up to 1.1 (this header lists those of 0.6, up to 13).
  switch (d) {
    case 1: return "kDLCPU";
    case 2: return "kDLCUDA";
    case 3: return "kDLCUDAHost";
    case 4: return "kDLOpenCL";
    case 7: return "kDLVulkan";
    case 8: return "kDLMetal";
    case 9: return "kDLVPI";
    case 10: return "kDLROCM";
    case 11: return "kDLROCMHost";
    case 12: return "kDLExtDev";
    case 13: return "kDLCUDAManaged";
    case 14: return "kDLOneAPI";
    case 15: return "kDLWebGPU";
    case 16: return "kDLHexagon";
    case 17: return "kDLMAIA";
    default: return "an unknown device type";
  }
}

std::string dl_dtype_string(DLDataType t) {
  const char* code = t.code == kDLInt     ? "int"
                     : t.code == kDLUInt  ? "uint"
                     : t.code == kDLFloat ? "float"
                     : t.code == kDLBfloat ? "bfloat"
                     : nullptr;
  std::ostringstream os;
  if (code) {
    os << code << static_cast<int>(t.bits);
  } else {
    os << "code " << static_cast<int>(t.code) << " bits " << static_cast<int>(t.bits);
  }
  if (t.lanes != 1) os << "x" << t.lanes;
  return os.str();
}

// The DType of a DLPack type, if tokpos has one.
bool to_dtype(DLDataType t, DType* out) {
  if (t.lanes != 1) return false;
  if (t.code == kDLFloat && t.bits == 32) return *out = DType::kF32, true;
  if (t.code == kDLFloat && t.bits == 16) return *out = DType::kF16, true;
  if (t.code == kDLBfloat && t.bits == 16) return *out = DType::kBF16, true;
  if (t.code == kDLInt && t.bits == 32) return *out = DType::kI32, true;
  if (t.code == kDLInt && t.bits == 64) return *out = DType::kI64, true;
  if (t.code == kDLFloat && t.bits == 64) return *out = DType::kF64, true;
  return false;
}

const char* role_types(Role role) {
  switch (role) {
    case Role::kIndex: return "int32 or int64";
    case Role::kTable:
    case Role::kOutput: return "float32, bfloat16 or float16";
    case Role::kGradient:
    case Role::kGradIn: return "float32";
    case Role::kBlocks: return "uint8";
    case Role::kLookupTable:
    case Role::kLookupOutput: return "float32, bfloat16, float16 or float64";
    case Role::kLookupGradient:
    case Role::kLookupGradIn: return "float32 or float64";
  }
  return "";
}

bool role_accepts(Role role, DType d) {
  switch (role) {
    case Role::kIndex: return is_index(d);
    case Role::kTable:
    case Role::kOutput: return is_float(d) && d != DType::kF64;
    case Role::kGradient:
    case Role::kGradIn: return d == DType::kF32;
    case Role::kBlocks: return false;
    case Role::kLookupTable:
    case Role::kLookupOutput: return is_float(d);
    case Role::kLookupGradient:
    case Role::kLookupGradIn: return d == DType::kF32 || d == DType::kF64;
  }
  return false;
}

std::string shape_string(const DLTensor& t) {
  std::ostringstream os;
  os << "(";
  for (int i = 0; i < t.ndim; ++i) os << (i ? ", " : "") << t.shape[i];
  os << (t.ndim == 1 ? ",)" : ")");
  return os.str();
}

}  // namespace

View check_tensor(const char* where, const char* name, const DLTensor* t, Role role,
                  std::initializer_list<int> ndims, bool optional) {
  View v;
  v.name = name;
  if (t == nullptr) {
    if (optional) return v;
    fail(Status::kNullPointer, where, name, " is NULL");
  }
  v.present = true;
  if (const int device = device_type_of(t->device); device != kDLCPU) {
    fail(Status::kUnimplemented, where, name, " is on device ", device_name(device), " (", device, ", id ",
         t->device.device_id,
         "); only kDLCPU (1) is supported");
  }
  DType d{};
  const bool raw = role == Role::kBlocks && t->dtype.code == kDLUInt && t->dtype.bits == 8 && t->dtype.lanes == 1;
  if (!raw && (!to_dtype(t->dtype, &d) || !role_accepts(role, d))) {
    fail(Status::kUnimplemented, where, name, " has dtype ", dl_dtype_string(t->dtype), "; expected ",
         role_types(role));
  }
  v.dtype = d;
  if (std::find(ndims.begin(), ndims.end(), t->ndim) == ndims.end()) {
    std::ostringstream want;
    for (auto it = ndims.begin(); it != ndims.end(); ++it) want << (it == ndims.begin() ? "" : " or ") << *it;
    fail(Status::kInvalidArgument, where, name, " has ", t->ndim, " dimensions; expected ", want.str());
  }
  v.ndim = t->ndim;
  if (t->shape == nullptr) fail(Status::kNullPointer, where, name, "'s shape is NULL");
  const auto esize = raw ? int64_t{1} : static_cast<int64_t>(dtype_size(d));
  int64_t numel = 1;
  for (int i = 0; i < v.ndim; ++i) {
    v.shape[i] = t->shape[i];
    if (v.shape[i] < 0)
      fail(Status::kInvalidArgument, where, name, " shape ", shape_string(*t), ": dimension ", i, " is ",
           v.shape[i], ", must be >= 0");
    if (__builtin_mul_overflow(numel, v.shape[i], &numel))
      fail(Status::kSizeOverflow, where, name, " shape ", shape_string(*t), ": the element count overflows int64");
  }
  int64_t bytes = 0;
  if (__builtin_mul_overflow(numel, esize, &bytes))
    fail(Status::kSizeOverflow, where, name, " shape ", shape_string(*t), ": the size in bytes overflows int64");
  v.numel = numel;
  // Strides in elements: NULL is row-major contiguous.
  if (t->strides == nullptr) {
    // An empty tensor touches no memory: its strides never matter, and the
    // products of its other dimensions may not fit int64.
    int64_t s = 1;
    for (int i = v.ndim - 1; i >= 0; --i) {
      v.strides[i] = numel == 0 ? 0 : s;
      if (numel != 0) s *= v.shape[i];  // a partial product of numel > 0: fits int64
    }
  } else {
    for (int i = 0; i < v.ndim; ++i) {
      v.strides[i] = t->strides[i];
      if (v.strides[i] < 0)
        fail(Status::kInvalidArgument, where, name, " stride ", i, " is ", v.strides[i],
             "; negative strides are not supported");
    }
    // Rows (the D dimension) must be contiguous; index tensors have no D.
    // An empty tensor reads and writes nothing, so its strides never matter
    // (numpy gives a zero-size array strides of 0).
    if (role != Role::kIndex && numel > 0 && v.ndim > 0 && v.shape[v.ndim - 1] > 1 && v.strides[v.ndim - 1] != 1)
      fail(Status::kInvalidArgument, where, name, " has innermost stride ", v.strides[v.ndim - 1],
           "; it must be 1 (rows contiguous)");
  }
  if (role != Role::kIndex && v.ndim > 0 && v.shape[v.ndim - 1] <= 1) v.strides[v.ndim - 1] = 1;
  if (numel == 0) return v;  // nothing is read or written: data may be anything, even NULL
  if (t->data == nullptr)
    fail(Status::kNullPointer, where, name, " is NULL (its data, with shape ", shape_string(*t), ")");
  // The furthest element, in bytes; every step is checked for overflow.
  int64_t last = 0;
  for (int i = 0; i < v.ndim; ++i) {
    int64_t step = 0;
    if (__builtin_mul_overflow(v.shape[i] - 1, v.strides[i], &step) || __builtin_add_overflow(last, step, &last))
      fail(Status::kSizeOverflow, where, name, " shape ", shape_string(*t), " with its strides spans more than int64");
  }
  int64_t span = 0;
  if (__builtin_add_overflow(last, 1, &span) || __builtin_mul_overflow(span, esize, &span))
    fail(Status::kSizeOverflow, where, name, " shape ", shape_string(*t), " with its strides spans more than int64");
  uintptr_t base = 0, end = 0;
  if (t->byte_offset > static_cast<uint64_t>(INT64_MAX) ||
      __builtin_add_overflow(reinterpret_cast<uintptr_t>(t->data), static_cast<uintptr_t>(t->byte_offset), &base) ||
      __builtin_add_overflow(base, static_cast<uintptr_t>(span), &end))
    fail(Status::kSizeOverflow, where, name, " byte_offset ", t->byte_offset, " puts the data past the address space");
  if (base % static_cast<uintptr_t>(esize) != 0)
    fail(Status::kInvalidArgument, where, name, t->byte_offset ? " data + byte_offset = " : " = ",
         reinterpret_cast<const void*>(base), " is not aligned to ", esize, " bytes (its element size)");
  v.data = reinterpret_cast<char*>(base);
  v.lo = base;
  v.hi = end;
  if (role == Role::kOutput || role == Role::kGradient || role == Role::kLookupOutput ||
      role == Role::kLookupGradient) {
    // No two elements may share memory: sorted by stride, each dimension must
    // step past everything the smaller ones cover.
    int order[4] = {0, 1, 2, 3};
    for (int i = 1; i < v.ndim; ++i)  // insertion sort by stride (at most 4 dimensions)
      for (int k = i; k > 0 && v.strides[order[k]] < v.strides[order[k - 1]]; --k) std::swap(order[k], order[k - 1]);
    int64_t covered = 1;
    for (int k = 0; k < v.ndim; ++k) {
      const int i = order[k];
      if (v.shape[i] <= 1) continue;
      if (v.strides[i] < covered)
        fail(Status::kInvalidArgument, where, name, " strides make its elements overlap (dimension ", i,
             ": size ", v.shape[i], ", stride ", v.strides[i], "); an output must not overlap itself");
      covered = v.strides[i] * v.shape[i];
    }
  }
  return v;
}

void check_no_overlap(const char* where, const View& a, const View& b) {
  if (!b.present || b.numel == 0) return;
  check_no_overlap(where, a, b.name, reinterpret_cast<const void*>(b.lo), static_cast<size_t>(b.hi - b.lo));
}

void check_no_overlap(const char* where, const View& a, const char* b_name, const void* b, size_t b_bytes) {
  if (!a.present || a.numel == 0 || b_bytes == 0) return;
  const auto lo = reinterpret_cast<uintptr_t>(b);
  const uintptr_t hi = lo + b_bytes;
  if (a.lo < hi && lo < a.hi)
    fail(Status::kInvalidArgument, where, a.name, " overlaps ", b_name, " (bytes [",
         reinterpret_cast<const void*>(a.lo), ", ", reinterpret_cast<const void*>(a.hi), ") and [",
         reinterpret_cast<const void*>(lo), ", ", reinterpret_cast<const void*>(hi), "))");
}

void check_leading_shape(const char* where, const View& a, const View& b, int n) {
  for (int i = 0; i < n; ++i) {
    if (a.shape[i] != b.shape[i]) {
      std::ostringstream sa, sb;
      for (int k = 0; k < n; ++k) {
        sa << (k ? ", " : "") << a.shape[k];
        sb << (k ? ", " : "") << b.shape[k];
      }
      fail(Status::kShapeMismatch, where, a.name, " starts with shape (", sa.str(), ") but ", b.name,
           " has (", sb.str(), ")");
    }
  }
}

}  // namespace tokpos::ops::detail
