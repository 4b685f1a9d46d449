// Random DLTensors into tokpos_op_compose_forward and tokpos_op_compose_backward:
// fuzzer-chosen dtype codes, bits and lanes, ndim, shapes (negative, huge,
// overflowing), strides (0, padded, negative, huge), byte offsets, devices
// (any int32, DLPack 1.x's 14..17 among them), NULL data, ids and position
// values, start, and placements inside one shared 64 KiB arena, so outputs
// may overlap inputs or each other.
//
// The library cannot know how large a caller's buffer is, only what shapes
// and strides claim. So the harness passes a tensor only if either
//   - the library is bound to refuse it on its own (another device, a dtype
//     or ndim it does not take, a negative or overflowing shape, NULL data
//     under a non-empty shape, misaligned data, an inner stride other than
//     1, an output overlapping itself), or
//   - every element it describes lies inside the arena.
// Then every crash, sanitizer report or out-of-bounds access is the
// library's. After the call:
//   - failure: not one byte of the arena changed, and tokpos_last_error() explains;
//   - success: the call was valid by the specification (every tensor
//     acceptable, shapes consistent, ids in [0, V), positions in [0, L),
//     no output overlapping an input, another output or itself), only the
//     outputs' bytes changed, and they hold exactly the reference values
//     (float32 sums rounded once; the backward's documented summation order).
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <vector>

#include "tokpos/tokpos.h"
#include "../half_reference.h"

namespace {

__extension__ typedef __int128 i128;

constexpr int64_t kArena = 1 << 16;
constexpr i128 kMaxElems = 1 << 16;  // larger tensors (not refused) would only make slow runs
constexpr i128 kI64Max = INT64_MAX;

[[noreturn]] void fail(const char* what, const char* detail = "") {
  std::fprintf(stderr, "fuzz_dlpack: %s %s (last error: \"%s\")\n", what, detail, tokpos_last_error());
  std::abort();
}

// ---- Element conversions (independent of the library) -----------------------------

using tokpos::testing::bits_of;
using tokpos::testing::float_of;
using tokpos::testing::from_bf16;
using tokpos::testing::from_f16;
using tokpos::testing::to_bf16;
using tokpos::testing::to_f16;

// ---- Tensors --------------------------------------------------------------------------

enum Role { kOut, kIds, kTok, kPos, kPids, kDout, kGtok, kGpos, kRoles };
const char* const kRoleName[kRoles] = {"out", "ids", "token_table", "pos_table", "position_ids",
                                       "d_out", "d_token_table", "d_pos_table"};
// A DLTensor's device type as the integer it holds (it may lie outside the enum).
int32_t device_type_of(const DLTensor& t) {
  int32_t v;
  std::memcpy(&v, &t.device.device_type, sizeof v);
  return v;
}

bool index_role(Role r) { return r == kIds || r == kPids; }
bool output_role(Role r) { return r == kOut || r == kGtok || r == kGpos; }
bool f32_only_role(Role r) { return r == kDout || r == kGtok || r == kGpos; }

enum Elem { kNone, kF32, kBF16, kF16, kI32, kI64 };

Elem elem_for(Role r, DLDataType d) {
  if (d.lanes != 1) return kNone;
  if (index_role(r)) {
    if (d.code == kDLInt && d.bits == 32) return kI32;
    if (d.code == kDLInt && d.bits == 64) return kI64;
    return kNone;
  }
  if (d.code == kDLFloat && d.bits == 32) return kF32;
  if (f32_only_role(r)) return kNone;
  if (d.code == kDLFloat && d.bits == 16) return kF16;
  if (d.code == kDLBfloat && d.bits == 16) return kBF16;
  return kNone;
}
int64_t elem_size(Elem e) { return e == kF32 || e == kI32 ? 4 : e == kI64 ? 8 : 2; }

struct Tensor {
  bool present = false;  // false: the DLTensor pointer passed is NULL
  Role role = kOut;
  DLTensor t{};
  int64_t shape[6]{}, strides[6]{};
  // From classify():
  bool refuse = false;  // the library must refuse any call that uses this tensor
  const char* why = "";
  bool empty = false;      // no elements (nothing read or written)
  bool big = false;        // acceptable but more than kMaxElems elements: not passed
  bool in_bounds = false;  // every element inside the arena
  Elem elem = kNone;
  int64_t es = 0;
  int64_t start = 0;  // arena byte position of element 0
  int64_t eff[6]{};   // strides in effect
  i128 numel = 0;
  i128 lo = 0, hi = 0;  // smallest and largest element offsets
};

bool expects_ndim(Role r, int ndim) {
  switch (r) {
    case kIds:
    case kPids: return ndim == 1 || ndim == 2;
    case kOut:
    case kDout: return ndim == 2 || ndim == 3;
    default: return ndim == 2;
  }
}

void classify(Tensor& x, const unsigned char* arena) {
  x.refuse = false;
  x.why = "";
  x.empty = x.big = x.in_bounds = false;
  if (!x.present) return;
  const DLTensor& t = x.t;
  auto refuse = [&](const char* why) {
    if (!x.refuse) x.why = why;
    x.refuse = true;
  };
  if (device_type_of(t) != kDLCPU) refuse("device");
  x.elem = elem_for(x.role, t.dtype);
  x.es = x.elem == kNone ? 0 : elem_size(x.elem);
  if (x.elem == kNone) refuse("dtype");
  if (t.ndim < 0 || t.ndim > 6 || (t.ndim > 0 && t.shape == nullptr)) {
    refuse("ndim or shape pointer");
    return;
  }
  if (!expects_ndim(x.role, t.ndim)) refuse("ndim");
  for (int i = 0; i < t.ndim; ++i)
    if (t.shape[i] < 0) refuse("negative shape");
  if (x.refuse) return;
  const int n = t.ndim;
  i128 numel = 1;
  for (int i = 0; i < n; ++i) {
    if (t.shape[i] == 0) x.empty = true;
    numel = numel > (i128{1} << 62) || t.shape[i] > (int64_t{1} << 62) ? i128{1} << 100 : numel * t.shape[i];
  }
  x.numel = x.empty ? 0 : numel;
  i128 acc = 1;
  for (int i = n - 1; i >= 0; --i) {
    if (t.strides != nullptr) {
      x.eff[i] = t.strides[i];
    } else {
      x.eff[i] = acc > kI64Max ? INT64_MAX : static_cast<int64_t>(acc);
      const int64_t dim = t.shape[i] > 0 ? t.shape[i] : 1;
      acc = acc > (i128{1} << 62) || dim > (int64_t{1} << 62) ? i128{1} << 100 : acc * dim;
    }
  }
  if (x.empty) return;
  if (x.numel > kI64Max) refuse("element count overflows");
  i128 lo = 0, hi = 0;
  bool overflow = false;
  for (int i = 0; i < n; ++i) {
    const i128 span = static_cast<i128>(t.shape[i] - 1) * x.eff[i];
    if (span > (i128{1} << 100) || span < -(i128{1} << 100)) {
      overflow = true;
      continue;
    }
    (span < 0 ? lo : hi) += span;
  }
  if (overflow || (hi + 1) * x.es > kI64Max || -lo * x.es > kI64Max) refuse("extent overflows");
  if (t.byte_offset > static_cast<uint64_t>(INT64_MAX)) refuse("byte_offset");
  if (t.data == nullptr) refuse("NULL data");
  if (x.role != kIds && x.role != kPids && t.shape[n - 1] > 1 && x.eff[n - 1] != 1) refuse("inner stride");
  if (x.es > 0 && (reinterpret_cast<uintptr_t>(t.data) + t.byte_offset) % static_cast<uint64_t>(x.es) != 0)
    refuse("misaligned");
  if (output_role(x.role))
    for (int i = 0; i < n; ++i)
      if (t.shape[i] > 1 && x.eff[i] == 0) refuse("output broadcast");
  if (x.refuse) return;
  x.lo = lo;
  x.hi = hi;
  if (x.numel > kMaxElems) {
    x.big = true;
    return;
  }
  const auto* p = static_cast<const unsigned char*>(t.data);
  if (p < arena || p >= arena + kArena) return;
  const i128 start = static_cast<i128>(p - arena) + t.byte_offset;
  x.start = static_cast<int64_t>(std::min<i128>(start, kArena));  // where relocate() starts from
  if (start + lo * x.es < 0 || start + (hi + 1) * x.es > kArena) return;
  x.in_bounds = true;
}

// Moves an acceptable tensor that lies (partly) outside the arena inside it.
void relocate(Tensor& x, unsigned char* arena) {
  const i128 lo_b = x.lo * x.es, hi_b = (x.hi + 1) * x.es;
  if (hi_b - lo_b > kArena) return;
  i128 s = std::min<i128>(std::max<i128>(x.start, -lo_b), kArena - hi_b);
  s -= s % x.es;
  if (s + lo_b < 0) s += x.es;
  x.t.byte_offset = 0;
  x.t.data = arena + static_cast<int64_t>(s);
}

int64_t offset_of(const Tensor& x, const int64_t* idx) {
  int64_t off = 0;
  for (int i = 0; i < x.t.ndim; ++i) off += idx[i] * x.eff[i];
  return x.start + off * x.es;
}

// Visits every element's arena byte position.
template <class F>
void each_element(const Tensor& x, F f) {
  if (!x.present || x.empty || !x.in_bounds) return;
  int64_t idx[6] = {};
  const int n = x.t.ndim;
  for (i128 k = 0; k < x.numel; ++k) {
    f(offset_of(x, idx));
    for (int d = n - 1; d >= 0; --d) {
      if (++idx[d] < x.t.shape[d]) break;
      idx[d] = 0;
    }
  }
}

float load_float(const unsigned char* mem, const Tensor& x, int64_t at) {
  if (x.elem == kF32) {
    float v;
    std::memcpy(&v, mem + at, 4);
    return v;
  }
  uint16_t h;
  std::memcpy(&h, mem + at, 2);
  return x.elem == kBF16 ? from_bf16(h) : from_f16(h);
}
int64_t load_index(const unsigned char* mem, const Tensor& x, int64_t at) {
  if (x.elem == kI64) {
    int64_t v;
    std::memcpy(&v, mem + at, 8);
    return v;
  }
  int32_t v;
  std::memcpy(&v, mem + at, 4);
  return v;
}
void store_index(unsigned char* mem, const Tensor& x, int64_t at, int64_t v) {
  if (x.elem == kI64) {
    std::memcpy(mem + at, &v, 8);
  } else {
    const auto w = static_cast<int32_t>(v);
    std::memcpy(mem + at, &w, 4);
  }
}
// Bits equal, or both NaN.
bool same_value(const unsigned char* got, Elem e, float want) {
  if (e == kF32) {
    float g;
    std::memcpy(&g, got, 4);
    return std::isnan(want) ? std::isnan(g) : bits_of(g) == bits_of(want);
  }
  uint16_t g;
  std::memcpy(&g, got, 2);
  const float gf = e == kBF16 ? from_bf16(g) : from_f16(g);
  if (std::isnan(want)) return std::isnan(gf);
  return g == (e == kBF16 ? to_bf16(want) : to_f16(want));
}

// ---- Generation -------------------------------------------------------------------------

DLDataType valid_type(FuzzedDataProvider& f, Role r) {
  if (index_role(r)) return f.ConsumeBool() ? DLDataType{kDLInt, 64, 1} : DLDataType{kDLInt, 32, 1};
  if (f32_only_role(r)) return {kDLFloat, 32, 1};
  switch (f.ConsumeIntegralInRange<int>(0, 2)) {
    case 0: return {kDLFloat, 32, 1};
    case 1: return {kDLBfloat, 16, 1};
    default: return {kDLFloat, 16, 1};
  }
}

void generate(FuzzedDataProvider& f, Tensor& x, Role role, const std::vector<int64_t>& canon, unsigned char* arena,
              std::vector<int64_t>& anchors) {
  x.present = true;
  x.role = role;
  DLTensor& t = x.t;
  // dtype
  // Each choice's first value (what an exhausted input gives) is the usual one.
  const int dt = f.ConsumeIntegralInRange<int>(0, 31);
  if (dt == 31) {
    t.dtype = {f.ConsumeIntegral<uint8_t>(), f.ConsumeIntegral<uint8_t>(), f.ConsumeIntegral<uint16_t>()};
  } else if (dt >= 29) {
    static const DLDataType others[] = {{kDLFloat, 64, 1}, {kDLInt, 8, 1},   {kDLUInt, 8, 1},   {kDLInt, 16, 1},
                                        {kDLUInt, 64, 1},  {kDLBfloat, 16, 1}, {kDLFloat, 16, 1}, {kDLInt, 32, 1},
                                        {kDLInt, 64, 1},   {kDLFloat, 32, 1}, {kDLComplex, 64, 1}, {kDLUInt, 32, 1}};
    t.dtype = others[f.ConsumeIntegralInRange<size_t>(0, sizeof others / sizeof others[0] - 1)];
  } else if (dt == 28) {
    t.dtype = valid_type(f, role);
    t.dtype.lanes = static_cast<uint16_t>(f.ConsumeIntegralInRange<int>(0, 4));
  } else {
    t.dtype = valid_type(f, role);
  }
  // device: any int32, stored as bytes (a newer DLPack's types, 14 and up,
  // lie past this header's enum, whose values end at 13)
  t.device = DLDevice{kDLCPU, 0};
  if (f.ConsumeIntegralInRange<int>(0, 31) == 31) {
    const int32_t type = f.ConsumeBool() ? f.ConsumeIntegralInRange<int32_t>(0, 31) : f.ConsumeIntegral<int32_t>();
    std::memcpy(&t.device.device_type, &type, sizeof type);
    t.device.device_id = f.ConsumeIntegralInRange<int>(-1, 3);
  }
  // shape
  int ndim = static_cast<int>(canon.size());
  if (f.ConsumeIntegralInRange<int>(0, 23) == 23) ndim = f.ConsumeIntegralInRange<int>(-1, 6);
  for (int i = 0; i < 6; ++i)
    x.shape[i] = i < static_cast<int>(canon.size()) ? canon[static_cast<size_t>(i)] : f.ConsumeIntegralInRange<int64_t>(0, 4);
  if (ndim > 0 && f.ConsumeIntegralInRange<int>(0, 11) == 11) {
    static const int64_t odd[] = {-1, -(int64_t{1} << 40), 0, 1, 2, 7, int64_t{1} << 31, int64_t{1} << 40,
                                  int64_t{1} << 62, INT64_MAX, INT64_MIN};
    const int k = f.ConsumeIntegralInRange<int>(0, ndim - 1);
    const int which = f.ConsumeIntegralInRange<int>(0, 12);
    x.shape[k] = which < 11 ? odd[which] : x.shape[k] + (which == 11 ? 1 : -1);
  }
  t.ndim = ndim;
  t.shape = x.shape;
  if (ndim > 0 && f.ConsumeIntegralInRange<int>(0, 63) == 63) t.shape = nullptr;
  // strides
  t.strides = nullptr;
  if (ndim > 0 && ndim <= 6 && f.ConsumeBool()) {
    i128 acc = 1;
    for (int i = ndim - 1; i >= 0; --i) {
      int64_t s;
      const int mode = f.ConsumeIntegralInRange<int>(0, 11);
      const int64_t contiguous = static_cast<int64_t>(std::min<i128>(acc, i128{1} << 62));
      if (i == ndim - 1 && mode < 9) {
        s = 1;
      } else if (mode < 6) {
        s = contiguous + (mode >= 4 ? f.ConsumeIntegralInRange<int64_t>(1, 5) : 0);
      } else if (mode == 6) {
        s = 0;
      } else if (mode == 7) {
        s = f.ConsumeIntegralInRange<int64_t>(-3, 70);
      } else if (mode == 8) {
        s = -contiguous;
      } else if (mode == 9) {
        s = int64_t{1} << f.ConsumeIntegralInRange<int>(16, 62);
      } else if (mode == 10) {
        s = f.ConsumeBool() ? INT64_MAX : INT64_MIN;
      } else {
        s = f.ConsumeIntegralInRange<int64_t>(0, 3);
      }
      x.strides[i] = s;
      const i128 extent = (s < 0 ? -static_cast<i128>(s) : static_cast<i128>(s)) * (x.shape[i] > 1 ? x.shape[i] : 1);
      acc = std::max<i128>(acc, std::min<i128>(extent, i128{1} << 62));
    }
    t.strides = x.strides;
  }
  // byte_offset
  const int64_t es = std::max<int64_t>(1, t.dtype.bits / 8);
  switch (f.ConsumeIntegralInRange<int>(0, 19)) {
    case 19: t.byte_offset = f.ConsumeIntegralInRange<uint64_t>(0, 255); break;
    case 18: t.byte_offset = (uint64_t{1} << 63) + f.ConsumeIntegralInRange<uint64_t>(0, 64); break;
    case 17: t.byte_offset = f.ConsumeIntegralInRange<uint64_t>(uint64_t{1} << 32, uint64_t{1} << 62); break;
    case 16:
    case 15:
    case 14: t.byte_offset = static_cast<uint64_t>(es * f.ConsumeIntegralInRange<int64_t>(1, 64)); break;
    default: t.byte_offset = 0;
  }
  // data: in the role's own 8 KiB (apart from the others), next to an
  // earlier tensor (to overlap it or not), anywhere, or NULL
  int64_t base;
  switch (f.ConsumeIntegralInRange<int>(0, 7)) {
    case 7:
      base = anchors.empty() ? 0 : anchors[f.ConsumeIntegralInRange<size_t>(0, anchors.size() - 1)];
      base += f.ConsumeIntegralInRange<int64_t>(-64, 256) * (f.ConsumeBool() ? es : 1);
      break;
    case 6: base = f.ConsumeIntegralInRange<int64_t>(0, kArena - 1); break;
    default: base = role * (kArena / kRoles) + f.ConsumeIntegralInRange<int64_t>(0, 63) * 8;
  }
  base = std::min<int64_t>(std::max<int64_t>(base, 0), kArena - 1);
  anchors.push_back(base);
  t.data = f.ConsumeIntegralInRange<int>(0, 31) == 31 ? nullptr : arena + base;
}

// Id and position values, decided up front (while the input still has
// bytes): all valid, one hot row, valid but one bad element, or anything.
struct IndexPlan {
  int mode = 0;
  uint64_t seed = 1;
  uint64_t bad_at = 0;
  int bad_kind = 0;
};
IndexPlan plan_indices(FuzzedDataProvider& f) {
  IndexPlan p;
  p.mode = f.ConsumeIntegralInRange<int>(0, 5);
  p.seed = f.ConsumeIntegral<uint64_t>();
  p.bad_at = f.ConsumeIntegralInRange<uint64_t>(0, 255);
  p.bad_kind = f.ConsumeIntegralInRange<int>(0, 7);
  return p;
}
void fill_indices(const IndexPlan& plan, const Tensor& x, int64_t limit, unsigned char* arena) {
  if (!x.present || x.refuse || x.empty || !x.in_bounds) return;
  limit = std::min<int64_t>(std::max<int64_t>(limit, 1), int64_t{1} << 20);
  uint64_t s = plan.seed * 0x9E3779B97F4A7C15ull + 1;
  const uint64_t bad_at = plan.bad_at % static_cast<uint64_t>(x.numel);
  uint64_t k = 0;
  each_element(x, [&](int64_t at) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    const int64_t r = static_cast<int64_t>((s >> 33) % static_cast<uint64_t>(limit));
    int64_t v = r;
    if (plan.mode == 2 || plan.mode == 3) v = (s >> 40) % 4 == 0 ? r : 0;  // one hot row
    if (plan.mode == 4 && k == bad_at) {
      static const int64_t bad[] = {-1, 0, 1, 5, INT32_MIN, INT64_MAX, -(int64_t{1} << 40), (int64_t{1} << 32) + 1};
      v = plan.bad_kind == 1 ? limit : plan.bad_kind == 3 ? limit + 5 : bad[plan.bad_kind];
    }
    if (plan.mode == 5) v = static_cast<int64_t>(s);
    store_index(arena, x, at, v);
    ++k;
  });
}

// ---- The specification's view of a call ------------------------------------------------

struct Batch {
  int64_t B = 0, T = 0;
  bool one_d = false;
};
Batch batch_of(const Tensor& ids) {
  Batch b;
  b.one_d = ids.t.ndim == 1;
  b.B = b.one_d ? 1 : ids.t.shape[0];
  b.T = b.one_d ? ids.t.shape[0] : ids.t.shape[1];
  return b;
}
// ids (B, T) or (N); rows (B, T, D) or (N, D).
bool rows_match_ids(const Tensor& rows, const Tensor& ids) {
  if (rows.t.ndim != ids.t.ndim + 1) return false;
  for (int i = 0; i < ids.t.ndim; ++i)
    if (rows.t.shape[i] != ids.t.shape[i]) return false;
  return true;
}
bool same_shape(const Tensor& a, const Tensor& b) {
  if (a.t.ndim != b.t.ndim) return false;
  for (int i = 0; i < a.t.ndim; ++i)
    if (a.t.shape[i] != b.t.shape[i]) return false;
  return true;
}
int64_t elem_at(const Tensor& x, int64_t b, int64_t t, const Batch& bt) {
  int64_t idx[2];
  if (bt.one_d) {
    idx[0] = t;
  } else {
    idx[0] = b;
    idx[1] = t;
  }
  return offset_of(x, idx);
}
int64_t row_elem(const Tensor& x, int64_t b, int64_t t, int64_t d, const Batch& bt) {
  int64_t idx[3];
  if (bt.one_d) {
    idx[0] = t;
    idx[1] = d;
  } else {
    idx[0] = b;
    idx[1] = t;
    idx[2] = d;
  }
  return offset_of(x, idx);
}
int64_t table_elem(const Tensor& x, int64_t r, int64_t d) {
  const int64_t idx[2] = {r, d};
  return offset_of(x, idx);
}

// Marks outputs' bytes; true if an output byte is covered twice.
bool mark(const Tensor& x, std::vector<uint8_t>& mask) {
  bool twice = false;
  each_element(x, [&](int64_t at) {
    for (int64_t k = 0; k < x.es; ++k) {
      if (mask[static_cast<size_t>(at + k)]) twice = true;
      mask[static_cast<size_t>(at + k)] = 1;
    }
  });
  return twice;
}
bool touches(const Tensor& x, const std::vector<uint8_t>& mask) {
  bool hit = false;
  each_element(x, [&](int64_t at) {
    for (int64_t k = 0; k < x.es; ++k) hit = hit || mask[static_cast<size_t>(at + k)];
  });
  return hit;
}

// The position of (b, t), or false if it is outside [0, L).
bool position(const unsigned char* mem, const Tensor* pids, int64_t start, int64_t b, int64_t t, const Batch& bt,
              int64_t L, int64_t* out) {
  const i128 p = pids != nullptr ? static_cast<i128>(load_index(mem, *pids, elem_at(*pids, b, t, bt)))
                                 : static_cast<i128>(start) + t;
  if (p < 0 || p >= L) return false;
  *out = static_cast<int64_t>(p);
  return true;
}

// Grouped sums in the order kernels.h defines.
void index_add(std::vector<float>& grad, int64_t D, const std::vector<int64_t>& rows,
               const std::vector<std::vector<float>>& src) {
  std::map<int64_t, std::vector<size_t>> groups;
  for (size_t n = 0; n < rows.size(); ++n) groups[rows[n]].push_back(n);
  for (const auto& [r, list] : groups) {
    float* g = grad.data() + r * D;
    if (list.size() <= 64) {
      for (size_t n : list)
        for (int64_t d = 0; d < D; ++d) g[d] = g[d] + src[n][static_cast<size_t>(d)];
      continue;
    }
    for (size_t k = 0; k < list.size(); k += 64) {
      const size_t end = std::min(list.size(), k + 64);
      for (int64_t d = 0; d < D; ++d) {
        float block = src[list[k]][static_cast<size_t>(d)];
        for (size_t j = k + 1; j < end; ++j) block = block + src[list[j]][static_cast<size_t>(d)];
        g[d] = g[d] + block;
      }
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static unsigned char* const arena = new unsigned char[kArena];
  static unsigned char* const snapshot = new unsigned char[kArena];
  static std::vector<uint8_t> mask(kArena);
  FuzzedDataProvider f(data, size);

  const bool backward = f.ConsumeBool();
  // Shifted so that an exhausted input (zeros) gives B = 2, T = 3, N = 7.
  const bool one_d = f.ConsumeIntegralInRange<int>(0, 2) == 2;
  const int64_t B = (f.ConsumeIntegralInRange<int64_t>(0, 5) + 2) % 6;
  const int64_t T = (f.ConsumeIntegralInRange<int64_t>(0, 40) + 3) % 41;
  const int64_t N = one_d ? (f.ConsumeIntegralInRange<int64_t>(0, 200) + 7) % 201 : B * T;
  const int64_t D = f.ConsumeIntegralInRange<int>(0, 15) == 15 ? 0 : f.ConsumeIntegralInRange<int64_t>(1, 9);
  const int64_t V = (f.ConsumeIntegralInRange<int64_t>(0, 11) + 4) % 12 + 1;
  const int64_t L = (f.ConsumeIntegralInRange<int64_t>(0, 47) + 7) % 48 + 1;

  // Arena: 16-bit units holding f16 values in [-8, 8], finite read as f32,
  // bf16 or f16, with a few special patterns.
  static uint16_t values[4096];
  static const bool made = [] {
    for (int k = 0; k < 4096; ++k) values[k] = to_f16(static_cast<float>(k - 2048) / 256.0f);
    return true;
  }();
  (void)made;
  uint64_t s = f.ConsumeIntegral<uint64_t>() | 1;
  for (int64_t k = 0; k < kArena; k += 2) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    std::memcpy(arena + k, &values[s >> 52], 2);
  }
  for (int k = f.ConsumeIntegralInRange<int>(0, 6); k > 0; --k) {
    static const uint16_t special[] = {0x7c00, 0xfc00, 0x7e00, 0x0001, 0x7bff, 0x8000, 0x7f80, 0xff80, 0x7fc1, 0x03ff};
    const uint16_t h = special[f.ConsumeIntegralInRange<size_t>(0, 9)];
    std::memcpy(arena + 2 * f.ConsumeIntegralInRange<int64_t>(0, kArena / 2 - 1), &h, 2);
  }

  const IndexPlan id_plan = plan_indices(f), pos_plan = plan_indices(f);
  int64_t start;
  switch (f.ConsumeIntegralInRange<int>(0, 7)) {
    case 7: start = f.ConsumeIntegralInRange<int64_t>(-3, -1); break;
    case 6: start = INT64_MAX - f.ConsumeIntegralInRange<int64_t>(0, 50); break;
    case 5: start = f.ConsumeIntegral<int64_t>(); break;
    case 4:
    case 3: start = f.ConsumeIntegralInRange<int64_t>(0, 60); break;
    default: start = 0;
  }

  Tensor x[kRoles];
  std::vector<int64_t> anchors;
  const std::vector<int64_t> ids_shape = one_d ? std::vector<int64_t>{N} : std::vector<int64_t>{B, T};
  const std::vector<int64_t> rows_shape = one_d ? std::vector<int64_t>{N, D} : std::vector<int64_t>{B, T, D};
  const Role order_fwd[] = {kTok, kPos, kIds, kPids, kOut};
  const Role order_bwd[] = {kDout, kIds, kPids, kGtok, kGpos};
  for (Role r : backward ? order_bwd : order_fwd) {
    const bool required = r == kOut || r == kIds || r == kTok || r == kDout;
    const bool present = required ? f.ConsumeIntegralInRange<int>(0, 63) != 63
                         : r == kPids ? f.ConsumeIntegralInRange<int>(0, 2) == 2
                                      : f.ConsumeIntegralInRange<int>(0, 3) != 3;
    if (!present) continue;
    const std::vector<int64_t> canon = r == kIds || r == kPids ? ids_shape
                                       : r == kOut || r == kDout ? rows_shape
                                       : r == kTok || r == kGtok ? std::vector<int64_t>{V, D}
                                                                 : std::vector<int64_t>{L, D};
    generate(f, x[r], r, canon, arena, anchors);
    classify(x[r], arena);
    if (x[r].present && !x[r].refuse && !x[r].empty && !x[r].big && !x[r].in_bounds) {
      relocate(x[r], arena);
      classify(x[r], arena);
    }
    // Not refusable and not inside the arena: the library could not tell; do not pass it.
    if (x[r].present && !x[r].refuse && !x[r].empty && !x[r].in_bounds) return 0;
  }
  const Tensor& tok_or_grad = backward ? x[kGtok] : x[kTok];
  const Tensor& pos_or_grad = backward ? x[kGpos] : x[kPos];
  const int64_t Vr = tok_or_grad.present && tok_or_grad.t.ndim == 2 && tok_or_grad.t.shape ? tok_or_grad.t.shape[0] : V;
  const int64_t Lr = pos_or_grad.present && pos_or_grad.t.ndim == 2 && pos_or_grad.t.shape ? pos_or_grad.t.shape[0] : L;
  fill_indices(id_plan, x[kIds], Vr, arena);
  fill_indices(pos_plan, x[kPids], Lr, arena);

  std::memcpy(snapshot, arena, kArena);
  auto ptr = [&](Role r) { return x[r].present ? &x[r].t : nullptr; };
  const tokpos_status st = backward
                               ? tokpos_op_compose_backward(ptr(kGtok), ptr(kGpos), ptr(kDout), ptr(kIds), ptr(kPids), start)
                               : tokpos_op_compose_forward(ptr(kOut), ptr(kIds), ptr(kTok), ptr(kPos), ptr(kPids), start);

  if (st != TOKPOS_OK) {
    if (std::memcmp(arena, snapshot, kArena) != 0) fail("a refused call changed memory:", tokpos_status_string(st));
    if (tokpos_last_error()[0] == '\0') fail("a refused call left no message");
    return 0;
  }

  // Accepted: the call must have been valid.
  const Role used_fwd[] = {kOut, kIds, kTok};
  const Role used_bwd[] = {kDout, kIds};
  for (Role r : backward ? std::vector<Role>(std::begin(used_bwd), std::end(used_bwd))
                         : std::vector<Role>(std::begin(used_fwd), std::end(used_fwd))) {
    if (!x[r].present) fail("accepted a NULL tensor:", kRoleName[r]);
    if (x[r].refuse) fail(kRoleName[r], x[r].why);
  }
  const bool pos_used = pos_or_grad.present;
  const Role table_roles[] = {kTok, kPos, kGtok, kGpos};
  for (Role r : table_roles)
    if (x[r].present && x[r].refuse) fail(kRoleName[r], x[r].why);
  if (pos_used && x[kPids].present && x[kPids].refuse) fail("position_ids", x[kPids].why);
  const Tensor& ids = x[kIds];
  const Tensor& rows = backward ? x[kDout] : x[kOut];
  if (!rows_match_ids(rows, ids)) fail("accepted rows whose shape does not match ids:", kRoleName[rows.role]);
  const Batch bt = batch_of(ids);
  const int64_t Dr = rows.t.shape[rows.t.ndim - 1];
  const Tensor* pids = pos_used && x[kPids].present ? &x[kPids] : nullptr;
  if (pids != nullptr && !same_shape(*pids, ids)) fail("accepted position_ids of another shape than ids");
  for (const Tensor* tab : {&tok_or_grad, &pos_or_grad})
    if (tab->present && tab->t.shape[1] != Dr) fail("accepted a table of another width:", kRoleName[tab->role]);
  const bool nonempty = bt.B * bt.T > 0;
  if (nonempty && tok_or_grad.present)
    for (int64_t b = 0; b < bt.B; ++b)
      for (int64_t t = 0; t < bt.T; ++t) {
        const int64_t id = load_index(snapshot, ids, elem_at(ids, b, t, bt));
        if (id < 0 || id >= tok_or_grad.t.shape[0]) fail("accepted an id out of range");
      }
  if (nonempty && pos_used)
    for (int64_t b = 0; b < bt.B; ++b)
      for (int64_t t = 0; t < bt.T; ++t) {
        int64_t p;
        if (!position(snapshot, pids, start, b, t, bt, pos_or_grad.t.shape[0], &p)) fail("accepted a position out of range");
      }
  // Overlaps: outputs with themselves, each other, and the inputs.
  std::fill(mask.begin(), mask.end(), 0);
  if (backward) {
    if (mark(x[kGtok], mask)) fail("accepted a d_token_table that overlaps itself");
    if (x[kGpos].present && touches(x[kGpos], mask)) fail("accepted gradients that overlap each other");
    if (mark(x[kGpos], mask)) fail("accepted a d_pos_table that overlaps itself (or d_token_table)");
    if (touches(x[kDout], mask) || touches(ids, mask) || (pids && touches(*pids, mask)))
      fail("accepted a gradient that overlaps an input");
  } else {
    if (mark(x[kOut], mask)) fail("accepted an out that overlaps itself");
    if (touches(ids, mask) || touches(x[kTok], mask) || (x[kPos].present && touches(x[kPos], mask)) ||
        (pids && touches(*pids, mask)))
      fail("accepted an out that overlaps an input");
  }
  // Nothing outside the outputs changed.
  for (int64_t k = 0; k < kArena; ++k)
    if (!mask[static_cast<size_t>(k)] && arena[k] != snapshot[k]) fail("an accepted call wrote outside its outputs");

  // The values.
  if (!backward) {
    const Tensor& out = x[kOut];
    const Tensor& tok = x[kTok];
    for (int64_t b = 0; b < bt.B; ++b)
      for (int64_t t = 0; t < bt.T; ++t) {
        const int64_t id = load_index(snapshot, ids, elem_at(ids, b, t, bt));
        int64_t p = 0;
        if (pos_used) position(snapshot, pids, start, b, t, bt, x[kPos].t.shape[0], &p);
        for (int64_t d = 0; d < Dr; ++d) {
          const float tv = load_float(snapshot, tok, table_elem(tok, id, d));
          const unsigned char* got = arena + row_elem(out, b, t, d, bt);
          if (pos_used) {
            const float want = tv + load_float(snapshot, x[kPos], table_elem(x[kPos], p, d));
            if (!same_value(got, out.elem, want)) fail("forward value differs from the reference");
          } else if (!same_value(got, out.elem, tv) && !same_value(got, out.elem, tv + 0.0f)) {
            fail("forward value (token rows only) differs from the reference");
          }
        }
      }
    return 0;
  }
  // Backward: sources in (b, t) order, grouped by token row and by position.
  std::vector<std::vector<float>> src;
  std::vector<int64_t> id_rows, pos_rows;
  for (int64_t b = 0; b < bt.B; ++b)
    for (int64_t t = 0; t < bt.T; ++t) {
      std::vector<float> row(static_cast<size_t>(Dr));
      for (int64_t d = 0; d < Dr; ++d) row[static_cast<size_t>(d)] = load_float(snapshot, x[kDout], row_elem(x[kDout], b, t, d, bt));
      src.push_back(std::move(row));
      id_rows.push_back(load_index(snapshot, ids, elem_at(ids, b, t, bt)));
      int64_t p = 0;
      if (pos_used) position(snapshot, pids, start, b, t, bt, x[kGpos].t.shape[0], &p);
      pos_rows.push_back(p);
    }
  for (Role r : {kGtok, kGpos}) {
    const Tensor& g = x[r];
    if (!g.present || g.empty) continue;
    const int64_t R = g.t.shape[0];
    std::vector<float> want(static_cast<size_t>(R * Dr));
    for (int64_t i = 0; i < R; ++i)
      for (int64_t d = 0; d < Dr; ++d) want[static_cast<size_t>(i * Dr + d)] = load_float(snapshot, g, table_elem(g, i, d));
    index_add(want, Dr, r == kGtok ? id_rows : pos_rows, src);
    for (int64_t i = 0; i < R; ++i)
      for (int64_t d = 0; d < Dr; ++d)
        if (!same_value(arena + table_elem(g, i, d), kF32, want[static_cast<size_t>(i * Dr + d)]))
          fail("backward value differs from the reference:", kRoleName[r]);
  }
  return 0;
}
