// The kernels (src/kernels/kernels.h): every registered back end against the
// reference, within the tolerance it declares (0: bit for bit), on many
// shapes, element types, index types, layouts, thread counts and streaming
// settings (ggml's test-backend-ops style: each case prints its parameters);
// every back end against the definitions written out here (the forward, the
// typed forward, the backward's summation order); the row grouping; the
// registry; the 16-bit conversions against formulas of their own.
//
// A back end added to backends() is covered by these tests as it is.
#pragma GCC diagnostic ignored "-Wpsabi"  // GCC vectors passed to convert.h's templates (no ABI involved)

#include <gtest/gtest.h>
#include <omp.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "common/convert.h"
#include "common/rope_angle.h"
#include "common/parallel.h"
#include "kernels/kernels.h"
#include "kernels/cpu/cpu_common.h"
#include "test_util.h"
#include "tokpos/dtype.h"
#include "tokpos/threading.h"
#include "replaced_new.h"

namespace {

namespace kn = tokpos::kernels;
namespace fp = tokpos::fp;
using tokpos::DType;
using tokpos::testing::bitwise_equal;
using tokpos::testing::ids_mod;
using tokpos::testing::noise;

constexpr int kThreadCounts[] = {1, 2, 7};
constexpr DType kFloatTypes[] = {DType::kF32, DType::kBF16, DType::kF16};
constexpr int64_t kNeverStream = INT64_MAX;  // Exec::stream_min_bytes
constexpr int64_t kAlwaysStream = 0;

// The back ends compared with the reference: every registered one but it.
std::vector<const kn::KernelTable*> candidates() {
  std::vector<const kn::KernelTable*> out;
  for (const kn::KernelTable* k : kn::backends())
    if (k != &kn::reference_kernels()) out.push_back(k);
  return out;
}

// ---- The 16-bit formats, written out from their definitions -----------------

// The value binary16 bits h denote (exact in double).
double f16_value(uint16_t h) {
  const int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  const double s = (h & 0x8000) ? -1.0 : 1.0;
  if (e == 31) return m ? std::numeric_limits<double>::quiet_NaN() : s * HUGE_VAL;
  return s * (e == 0 ? std::ldexp(m, -24) : std::ldexp(m + 1024, e - 25));
}

// The value bfloat16 bits h denote (8 exponent bits, 7 mantissa bits, bias 127).
double bf16_value(uint16_t h) {
  const int e = (h >> 7) & 0xff, m = h & 0x7f;
  const double s = (h & 0x8000) ? -1.0 : 1.0;
  if (e == 255) return m ? std::numeric_limits<double>::quiet_NaN() : s * HUGE_VAL;
  return s * (e == 0 ? std::ldexp(m, -133) : std::ldexp(m + 128, e - 134));
}

// The bits of the value of a binary format (exp_bits, mant_bits) nearest to x,
// ties to the even significand; from half an ulp above the largest finite
// value on: Inf. Exact arithmetic in double (x / quantum only rescales x).
// NaN: the quiet NaN with x's sign.
uint16_t nearest_bits(float x, int exp_bits, int mant_bits) {
  const auto sign = static_cast<uint16_t>(std::signbit(x) ? 1u << (exp_bits + mant_bits) : 0u);
  const int bias = (1 << (exp_bits - 1)) - 1, emin = 1 - bias;
  const auto inf = static_cast<uint16_t>(((1u << exp_bits) - 1) << mant_bits);
  if (std::isnan(x)) return static_cast<uint16_t>(sign | inf | (1u << (mant_bits - 1)));
  const double a = std::fabs(static_cast<double>(x));
  if (std::isinf(a)) return static_cast<uint16_t>(sign | inf);
  const int e = a == 0 ? emin : std::max(std::ilogb(a), emin);
  const double quantum = std::ldexp(1.0, e - mant_bits);
  const double r = std::nearbyint(a / quantum) * quantum;  // the default rounding mode: ties to even
  if (r == 0) return sign;
  const int re = std::ilogb(r);
  if (re > bias) return static_cast<uint16_t>(sign | inf);
  if (re < emin) return static_cast<uint16_t>(sign | static_cast<uint16_t>(r / std::ldexp(1.0, emin - mant_bits)));
  const auto mantissa = static_cast<uint32_t>(r / std::ldexp(1.0, re - mant_bits)) - (1u << mant_bits);
  return static_cast<uint16_t>(sign | static_cast<uint32_t>(re + bias) << mant_bits | mantissa);
}
uint16_t nearest_f16(float x) {
  return nearest_bits(x, 5, 10);
}
uint16_t nearest_bf16(float x) {
  return nearest_bits(x, 8, 7);
}

// Element k of an array of `type` (f32, bf16 or f16), widened by the formulas above.
double element(DType type, const void* base, size_t k) {
  switch (type) {
    case DType::kBF16: return bf16_value(static_cast<const uint16_t*>(base)[k]);
    case DType::kF16: return f16_value(static_cast<const uint16_t*>(base)[k]);
    default: return static_cast<const float*>(base)[k];
  }
}
// Element k of an array of `type` = v rounded to nearest even by nearest_bits.
void put(DType type, void* base, size_t k, float v) {
  switch (type) {
    case DType::kBF16: static_cast<uint16_t*>(base)[k] = nearest_bf16(v); break;
    case DType::kF16: static_cast<uint16_t*>(base)[k] = nearest_f16(v); break;
    default: static_cast<float*>(base)[k] = v; break;
  }
}

// ---- Comparisons -----------------------------------------------------------------

double relative_difference(double a, double b) {
  if (a == b || (std::isnan(a) && std::isnan(b))) return 0;
  if (std::isnan(a) || std::isnan(b) || std::isinf(a) || std::isinf(b)) return HUGE_VAL;
  return std::fabs(a - b) / std::max(std::fabs(a), std::fabs(b));
}

// got (n elements of type) agrees with want as back end `be` declares: bit for
// bit (tolerance 0), else a largest relative difference within its tolerance.
::testing::AssertionResult agrees(const kn::KernelTable& be, const void* want, const void* got, size_t n,
                                  DType type) {
  const size_t es = tokpos::dtype_size(type);
  const auto* w = static_cast<const uint8_t*>(want);
  const auto* g = static_cast<const uint8_t*>(got);
  if (be.tolerance == 0) {
    if (std::memcmp(w, g, n * es) == 0) return ::testing::AssertionSuccess();
    size_t k = 0;
    while (std::memcmp(w + k * es, g + k * es, es) == 0) ++k;
    return ::testing::AssertionFailure() << be.name << " differs from bit-for-bit at element " << k << " of " << n
                                         << ": want " << element(type, w, k) << ", got " << element(type, g, k);
  }
  double worst = 0;
  size_t at = 0;
  for (size_t k = 0; k < n; ++k) {
    const double r = relative_difference(element(type, w, k), element(type, g, k));
    if (r > worst) worst = r, at = k;
  }
  if (worst <= be.tolerance) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << be.name << " relative difference " << worst << " > its tolerance "
                                       << be.tolerance << " at element " << at << ": want "
                                       << element(type, w, at) << ", got " << element(type, g, at);
}
::testing::AssertionResult agrees(const kn::KernelTable& be, const std::vector<float>& want,
                                  const std::vector<float>& got) {
  if (want.size() != got.size()) return ::testing::AssertionFailure() << "sizes differ";
  return agrees(be, want.data(), got.data(), want.size(), DType::kF32);
}

// The comparison itself: bit for bit at tolerance 0, else relative.
TEST(Kernels, AgreementFollowsTheDeclaredTolerance) {
  const kn::KernelTable exact{"exact", 0.0, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr};
  const kn::KernelTable loose{"loose", 1e-3, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr};
  const std::vector<float> want{1.0f, -2.0f, 0.0f, HUGE_VALF};
  EXPECT_TRUE(agrees(exact, want, want));
  EXPECT_FALSE(agrees(exact, want, {1.0f, -2.0f, -0.0f, HUGE_VALF}));  // -0 is other bits
  EXPECT_FALSE(agrees(exact, want, {1.0f + 0x1p-23f, -2.0f, 0.0f, HUGE_VALF}));
  EXPECT_TRUE(agrees(loose, want, {1.0005f, -2.001f, -0.0f, HUGE_VALF}));
  EXPECT_FALSE(agrees(loose, want, {1.0f, -2.01f, 0.0f, HUGE_VALF}));
  EXPECT_FALSE(agrees(loose, want, {1.0f, -2.0f, 1e-30f, HUGE_VALF}));
  EXPECT_FALSE(agrees(loose, want, {1.0f, -2.0f, 0.0f, 3e38f}));
  EXPECT_FALSE(agrees(loose, want, {std::nanf(""), -2.0f, 0.0f, HUGE_VALF}));
  const uint16_t h_want[] = {0x3c01, 0x3c00}, h_got[] = {0x3c01, 0x3c02};  // f16: 1 vs 1 + 2^-9
  EXPECT_FALSE(agrees(loose, h_want, h_got, 2, DType::kF16));
  EXPECT_TRUE(agrees(loose, h_want, h_got, 1, DType::kF16));
}

// ---- Test data -------------------------------------------------------------------

// Noise over many binades (2^-12 .. 2^11): sums of it depend on their order.
std::vector<float> wide_noise(size_t n, uint64_t seed) {
  auto v = noise(n, seed);
  for (size_t i = 0; i < n; ++i) v[i] = std::ldexp(v[i], static_cast<int>((i * 2654435761u) % 24) - 12);
  return v;
}

// `bytes` bytes filled with `fill`, starting `offset` bytes past a 64-byte boundary.
class Bytes {
 public:
  Bytes(size_t bytes, size_t offset, uint8_t fill) : storage_(bytes + 64 + offset, fill), size_(bytes) {
    const auto misalign = static_cast<size_t>(reinterpret_cast<uintptr_t>(storage_.data()) % 64);
    data_ = storage_.data() + (64 - misalign) % 64 + offset;
  }
  Bytes(const Bytes&) = delete;
  Bytes& operator=(const Bytes&) = delete;
  uint8_t* data() { return data_; }
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  std::vector<uint8_t> storage_;
  uint8_t* data_;
  size_t size_;
};

// A table in every float type: rows x D values, row r at r * stride (stride >=
// D), the same layout for each type. The padding between rows is NaN, so a
// kernel that reads it shows. f32 values span 2^-30 .. 2^17, so f16 outputs
// overflow and go subnormal; the 16-bit tables are random finite bit patterns.
struct Table {
  int64_t stride = 0;
  std::vector<float> f32;
  std::vector<uint16_t> bf16, f16;
  kn::Rows view(DType type) const {
    switch (type) {
      case DType::kBF16: return {bf16.data(), type, stride};
      case DType::kF16: return {f16.data(), type, stride};
      default: return {f32.data(), DType::kF32, stride};
    }
  }
};
Table make_table(int64_t rows, int64_t D, int64_t stride, uint64_t seed) {
  Table tb;
  tb.stride = stride;
  const auto n = static_cast<size_t>(rows * stride);
  tb.f32.assign(n, std::numeric_limits<float>::quiet_NaN());
  tb.bf16.assign(n, 0x7fc1);
  tb.f16.assign(n, 0x7e01);
  const auto v = noise(static_cast<size_t>(rows * D), seed);
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t d = 0; d < D; ++d) {
      const auto i = static_cast<size_t>(r * D + d), k = static_cast<size_t>(r * stride + d);
      tb.f32[k] = std::ldexp(v[i], static_cast<int>(i * 7919 % 48) - 30);
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      auto h = static_cast<uint16_t>(x);
      tb.bf16[k] = (h & 0x7f80) == 0x7f80 ? static_cast<uint16_t>(h & 0xbfff) : h;  // no Inf/NaN
      h = static_cast<uint16_t>(x >> 16);
      tb.f16[k] = (h & 0x7c00) == 0x7c00 ? static_cast<uint16_t>(h & 0xbfff) : h;
    }
  return tb;
}

// How the views lie in memory.
enum class Layout {
  kContiguous,  // ids (B, T) dense; output rows dense; table stride D
  kStrided,     // ids with st = 2, sb = 2T + 3; output rows with padding between them; table strides > D
  kBroadcast,   // ids with sb = 0 (one row for every b); output time-major with padding; table strides > D
};
constexpr Layout kLayouts[] = {Layout::kContiguous, Layout::kStrided, Layout::kBroadcast};
const char* layout_name(Layout l) {
  return l == Layout::kContiguous ? "contiguous" : l == Layout::kStrided ? "strided" : "broadcast";
}

// An index view of `type` holding logical(b, t) = values[b*T + t] (kBroadcast:
// values[t] for every b), with `filler` in the gaps.
struct Ids {
  std::vector<int64_t> i64;
  std::vector<int32_t> i32;
  kn::Index index;
};
Ids make_ids(const std::vector<int64_t>& values, int64_t B, int64_t T, Layout layout, DType type, int64_t filler) {
  Ids ids;
  int64_t sb = T, st = 1, size = B * T;
  if (layout == Layout::kStrided) st = 2, sb = 2 * T + 3, size = B * sb;
  if (layout == Layout::kBroadcast) sb = 0, size = T;
  std::vector<int64_t> v(static_cast<size_t>(size), filler);
  for (int64_t b = 0; b < (layout == Layout::kBroadcast ? 1 : B); ++b)
    for (int64_t t = 0; t < T; ++t) v[b * sb + t * st] = values[b * T + t];
  if (type == DType::kI32) {
    ids.i32.assign(v.begin(), v.end());
    ids.index = {ids.i32.data(), DType::kI32, sb, st};
  } else {
    ids.i64 = std::move(v);
    ids.index = {ids.i64.data(), DType::kI64, sb, st};
  }
  return ids;
}
int64_t logical(const std::vector<int64_t>& values, Layout layout, int64_t b, int64_t t, int64_t T) {
  return layout == Layout::kBroadcast ? values[t] : values[b * T + t];
}

// Output rows: (b, t) at b*sb + t*st elements; `elems` elements in all.
struct OutLayout {
  int64_t sb, st, elems;
};
OutLayout out_layout(Layout layout, int64_t B, int64_t T, int64_t D) {
  if (layout == Layout::kStrided) {
    const int64_t st = D + 5, sb = T * st + 3;
    return {sb, st, B * sb};
  }
  if (layout == Layout::kBroadcast) {  // time-major: rows of one t for all b, then the next t
    const int64_t sb = D + 2, st = B * sb + 1;
    return {sb, st, T * st};
  }
  return {T * D, D, B * T * D};
}

// The index cases: the id type, and positions start + t or explicit (of a type).
struct IdCase {
  DType ids;
  std::optional<DType> pos_ids;
};
constexpr IdCase kIdCases[] = {
    {DType::kI64, std::nullopt}, {DType::kI32, std::nullopt}, {DType::kI64, DType::kI32}, {DType::kI32, DType::kI64}};
std::string id_case_name(const IdCase& c) {
  return std::string("ids ") + tokpos::dtype_name(c.ids) + " positions " +
         (c.pos_ids ? std::string("explicit ") + tokpos::dtype_name(*c.pos_ids) : std::string("start+t"));
}

// Source rows (B, T, D) in a layout: contiguous, strided (st = D + 4, sb =
// T*st + 5, NaN between rows) or broadcast (sb = 0: one (T, D) block for every b).
struct SourceBuf {
  std::vector<float> data;
  kn::Source src;
};
SourceBuf make_source(int64_t B, int64_t T, int64_t D, Layout layout, uint64_t seed) {
  SourceBuf s;
  int64_t st = D, sb = T * D, size = B * T * D;
  if (layout == Layout::kStrided) st = D + 4, sb = T * st + 5, size = B * sb;
  if (layout == Layout::kBroadcast) sb = 0, size = T * D;
  s.data.assign(static_cast<size_t>(size), std::numeric_limits<float>::quiet_NaN());
  const auto v = wide_noise(static_cast<size_t>(B * T * D), seed);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t d = 0; d < D; ++d) s.data[b * sb + t * st + d] = v[(b * T + t) * D + d];
  s.src = {s.data.data(), sb, st, B, T, D};
  return s;
}

kn::GradTarget target(std::vector<float>& grad, int64_t stride, const std::vector<int64_t>& rows,
                      const kn::RowGroups& groups, int64_t V) {
  return {grad.data(), stride, rows.data(), &groups, V};
}

// ---- Every back end against the reference, on many shapes -------------------------

// (B, T, D, V)
using Shape = std::tuple<int64_t, int64_t, int64_t, int64_t>;
class ForwardAgreement : public ::testing::TestWithParam<Shape> {};
class KernelAgreement : public ::testing::TestWithParam<Shape> {};

// How a back end runs one forward case: every case at 1 thread, streamed and
// not, into an output on a 64-byte line and one element past it; and at 2 and
// at 7 threads in one of those four settings, which rotate from case to case
// (so every output type meets every setting at every thread count).
struct ForwardRun {
  int threads;
  int64_t stream_min_bytes;
  size_t offset_elems;
};
std::vector<ForwardRun> runs_for(int64_t case_index) {
  std::vector<ForwardRun> runs;
  for (const int64_t stream : {kNeverStream, kAlwaysStream})
    for (const size_t offset : {size_t{0}, size_t{1}}) runs.push_back({1, stream, offset});
  for (const int threads : {2, 7}) {
    const int64_t k = case_index + threads;
    runs.push_back({threads, k % 2 ? kAlwaysStream : kNeverStream, static_cast<size_t>(k / 2 % 2)});
  }
  return runs;
}

// The forward, for every token-table type x position-table type (or none) x
// output type, index case and layout; each back end as runs_for says.
// Out-of-range ids (V + 7, -2, and 2^40 as int64) read unk_id.
TEST_P(ForwardAgreement, ForwardMatchesReference) {
  const auto [B, T, D, V] = GetParam();
  const int64_t N = B * T, L = T + 5, start = 3;
  const Table tok_dense = make_table(V, D, D, 1), tok_strided = make_table(V, D, D + 3, 1);
  const Table pos_dense = make_table(L, D, D, 2), pos_strided = make_table(L, D, D + 1, 2);
  auto ids = ids_mod(N, V, 3);
  if (T > 2) ids[1] = V + 7;  // in the first row: the broadcast layout sees it too
  if (N > 4) ids[N / 2] = -2;
  const auto pos_ids = ids_mod(N, L, 4);
  const auto& ref = kn::reference_kernels();
  const auto backs = candidates();
  int64_t case_index = 0;
  for (const Layout layout : kLayouts)
    for (const IdCase& ic : kIdCases) {
      auto id_values = ids;
      if (ic.ids == DType::kI64 && N > 3) id_values[N - 1] = int64_t{1} << 40;
      const Ids id_view = make_ids(id_values, B, T, layout, ic.ids, V + 11);
      const Ids pos_view = make_ids(pos_ids, B, T, layout, ic.pos_ids.value_or(DType::kI64), L - 1);
      const Table& tok = layout == Layout::kContiguous ? tok_dense : tok_strided;
      const Table& pos = layout == Layout::kContiguous ? pos_dense : pos_strided;
      const OutLayout ol = out_layout(layout, B, T, D);
      for (const DType te : kFloatTypes)
        for (const std::optional<DType> pe : {std::optional<DType>{}, std::optional(DType::kF32),
                                              std::optional(DType::kBF16), std::optional(DType::kF16)})
          for (const DType oe : kFloatTypes) {
            kn::Gather g;
            g.out = {nullptr, oe, ol.sb, ol.st};
            g.ids = id_view.index;
            g.V = V;
            g.unk_id = V / 2;
            g.tok = tok.view(te);
            if (pe) g.pos = pos.view(*pe);
            if (ic.pos_ids) g.pos_ids = pos_view.index;
            g.L = L;
            g.start = start;
            g.B = B, g.T = T, g.D = D;
            const size_t es = tokpos::dtype_size(oe), bytes = static_cast<size_t>(ol.elems) * es;
            Bytes want(bytes, 0, 0xA5);
            g.out.data = want.data();
            ref.compose_forward(g, kn::Exec{});
            for (const kn::KernelTable* be : backs)
              for (const ForwardRun& run : runs_for(case_index)) {
                Bytes got(bytes, run.offset_elems * es, 0xA5);
                g.out.data = got.data();
                be->compose_forward(g, {.threads = run.threads, .stream_min_bytes = run.stream_min_bytes});
                EXPECT_TRUE(agrees(*be, want.data(), got.data(), static_cast<size_t>(ol.elems), oe))
                    << layout_name(layout) << ", " << id_case_name(ic) << ", token " << tokpos::dtype_name(te)
                    << " position " << (pe ? tokpos::dtype_name(*pe) : "none") << " out " << tokpos::dtype_name(oe)
                    << ", threads " << run.threads << " streamed " << (run.stream_min_bytes == kAlwaysStream)
                    << " offset " << run.offset_elems;
              }
            ++case_index;
          }
    }
}

// BERT's fused input stage (f32): with token types from ids, type 0 for every
// token, or none; with LayerNorm or without; every index case and layout.
TEST_P(KernelAgreement, TypedMatchesReference) {
  const auto [B, T, D, V] = GetParam();
  const int64_t N = B * T, L = T + 5, start = 3, kTypes = 3;
  const Table tok_dense = make_table(V, D, D, 1), tok_strided = make_table(V, D, D + 3, 1);
  const Table pos_dense = make_table(L, D, D, 2), pos_strided = make_table(L, D, D + 1, 2);
  const Table types_dense = make_table(kTypes, D, D, 5), types_strided = make_table(kTypes, D, D + 2, 5);
  const auto gamma = noise(static_cast<size_t>(D), 6), beta = noise(static_cast<size_t>(D), 7);
  auto ids = ids_mod(N, V, 3);
  if (T > 2) ids[1] = V + 7;
  const auto pos_ids = ids_mod(N, L, 4), type_ids = ids_mod(N, kTypes, 8);
  const auto& ref = kn::reference_kernels();
  const auto backs = candidates();
  enum class Types { kNone, kZero, kFromIds };
  for (const Layout layout : kLayouts)
    for (const IdCase& ic : kIdCases) {
      const Ids id_view = make_ids(ids, B, T, layout, ic.ids, V + 11);
      const Ids pos_view = make_ids(pos_ids, B, T, layout, ic.pos_ids.value_or(DType::kI64), L - 1);
      const Ids type_view = make_ids(type_ids, B, T, layout, ic.ids, kTypes - 1);
      const bool dense = layout == Layout::kContiguous;
      const OutLayout ol = out_layout(layout, B, T, D);
      for (const Types types : {Types::kNone, Types::kZero, Types::kFromIds})
        for (const bool layer_norm : {false, true}) {
          kn::TypedGather tg;
          kn::Gather& g = tg.g;
          g.out = {nullptr, DType::kF32, ol.sb, ol.st};
          g.ids = id_view.index;
          g.V = V;
          g.unk_id = V - 1;
          g.tok = (dense ? tok_dense : tok_strided).view(DType::kF32);
          g.pos = (dense ? pos_dense : pos_strided).view(DType::kF32);
          if (ic.pos_ids) g.pos_ids = pos_view.index;
          g.L = L;
          g.start = start;
          g.B = B, g.T = T, g.D = D;
          if (types != Types::kNone) tg.types = (dense ? types_dense : types_strided).view(DType::kF32);
          tg.type_rows = kTypes;
          if (types == Types::kFromIds) tg.type_ids = type_view.index;
          if (layer_norm) tg.gamma = gamma.data(), tg.beta = beta.data(), tg.eps = 1e-5;
          const size_t bytes = static_cast<size_t>(ol.elems) * 4;
          Bytes want(bytes, 0, 0xA5);
          g.out.data = want.data();
          ref.compose_typed(tg, kn::Exec{});
          for (const kn::KernelTable* be : backs)
            for (const int threads : kThreadCounts) {
              Bytes got(bytes, 4, 0xA5);
              g.out.data = got.data();
              be->compose_typed(tg, {.threads = threads, .stream_min_bytes = kAlwaysStream});
              EXPECT_TRUE(agrees(*be, want.data(), got.data(), static_cast<size_t>(ol.elems), DType::kF32))
                  << layout_name(layout) << ", " << id_case_name(ic) << ", types " << static_cast<int>(types)
                  << " layer norm " << layer_norm << ", threads " << threads;
            }
        }
    }
}

// The backward: one target (the token gradient, or the position gradient
// alone) and two (tokens and positions start + t, or tokens and random
// position rows), with padded rows (-1), strided and broadcast sources,
// strided gradients (stride > D; the padding must not change); gradients start
// from random values; each back end at 1, 2 and 7 threads, with no workspace
// and with one reused across every call.
TEST_P(KernelAgreement, BackwardMatchesReference) {
  int64_t B, T, D, V;  // named variables, not bindings: the lambdas below capture them
  std::tie(B, T, D, V) = GetParam();
  const int64_t N = B * T, L = T + 5, start = 3;
  auto token_rows = ids_mod(N, V, 6);
  if (N > 2) token_rows[1] = -1;  // padding: skipped
  if (N > 5) token_rows[N - 3] = -1;
  std::vector<int64_t> positions(static_cast<size_t>(N));
  for (int64_t n = 0; n < N; ++n) positions[n] = start + n % T;
  auto random_rows = ids_mod(N, L, 7);
  if (N > 3) random_rows[N - 2] = -1;  // skipped in the position gradient, still in the token gradient
  const kn::RowGroups token_groups = kn::group_rows(token_rows.data(), N, V);
  const kn::RowGroups position_groups = kn::group_rows(positions.data(), N, L);
  const kn::RowGroups random_groups = kn::group_rows(random_rows.data(), N, L);
  const auto& ref = kn::reference_kernels();
  const auto backs = candidates();
  std::vector<kn::Workspace> workspaces(backs.size());
  enum class Targets { kTokens, kPositionsOnly, kTokensAndPositions, kTokensAndRandomRows };
  for (const Layout layout : kLayouts) {
    const SourceBuf source = make_source(B, T, D, layout, 9);
    const bool dense = layout == Layout::kContiguous;
    const int64_t as = dense ? D : D + 3, bs = dense ? D : D + 2;
    const auto init_a = wide_noise(static_cast<size_t>(V * as), 10);
    const auto init_b = wide_noise(static_cast<size_t>(L * bs), 11);
    for (const Targets targets :
         {Targets::kTokens, Targets::kPositionsOnly, Targets::kTokensAndPositions, Targets::kTokensAndRandomRows}) {
      const bool want_a = targets != Targets::kPositionsOnly, want_b = targets != Targets::kTokens;
      const auto& b_rows = targets == Targets::kTokensAndRandomRows ? random_rows : positions;
      const auto& b_groups = targets == Targets::kTokensAndRandomRows ? random_groups : position_groups;
      // Absent targets still carry rows and groups: a kernel must not touch them.
      auto targets_for = [&](std::vector<float>& ga, std::vector<float>& gb) {
        kn::GradTarget a = target(ga, as, token_rows, token_groups, V), b = target(gb, bs, b_rows, b_groups, L);
        if (!want_a) a.grad = nullptr;
        if (!want_b) b.grad = nullptr;
        return std::pair(a, b);
      };
      std::vector<float> ref_a = init_a, ref_b = init_b;
      {
        const auto [a, b] = targets_for(ref_a, ref_b);
        ref.index_add_rows(a, b, source.src, kn::Exec{});
      }
      if (!want_a) {
        EXPECT_TRUE(bitwise_equal(ref_a, init_a));
      }
      if (!want_b) {
        EXPECT_TRUE(bitwise_equal(ref_b, init_b));
      }
      if (want_a && want_b) {  // the definition of two targets: the two one-target scatters
        std::vector<float> one_a = init_a, one_b = init_b;
        auto [a, b] = targets_for(one_a, one_b);
        ref.index_add_rows(a, kn::GradTarget{}, source.src, kn::Exec{});
        ref.index_add_rows(kn::GradTarget{}, b, source.src, kn::Exec{});
        EXPECT_TRUE(bitwise_equal(one_a, ref_a) && bitwise_equal(one_b, ref_b)) << "reference, two targets";
      }
      for (size_t k = 0; k < backs.size(); ++k)
        for (const int threads : kThreadCounts)
          for (const bool with_ws : {false, true}) {
            std::vector<float> ga = init_a, gb = init_b;
            const auto [a, b] = targets_for(ga, gb);
            backs[k]->index_add_rows(a, b, source.src, {.threads = threads, .ws = with_ws ? &workspaces[k] : nullptr});
            const std::string what = std::string(layout_name(layout)) + ", targets " +
                                     std::to_string(static_cast<int>(targets)) + ", threads " +
                                     std::to_string(threads) + (with_ws ? ", workspace" : "");
            EXPECT_TRUE(agrees(*backs[k], ref_a, ga)) << "token gradient, " << what;
            EXPECT_TRUE(agrees(*backs[k], ref_b, gb)) << "position gradient, " << what;
          }
    }
  }
  for (size_t k = 0; k < backs.size(); ++k) {
    // Rows with more than kRowBlock sources need the grouped scatter, whose
    // scratch the cpu back end keeps (with fewer it needs no scratch at all).
    const bool grouped = token_groups.max_sources() > kn::kRowBlock || position_groups.max_sources() > kn::kRowBlock;
    if (backs[k] == &kn::cpu_kernels() && grouped) {
      EXPECT_GT(workspaces[k].bytes(), 0u) << "the cpu back end keeps its scratch";
    }
    workspaces[k].release();
    EXPECT_EQ(workspaces[k].bytes(), 0u);
  }
}

std::string ShapeName(const ::testing::TestParamInfo<Shape>& info) {
  const auto& [B, T, D, V] = info.param;
  return "B" + std::to_string(B) + "_T" + std::to_string(T) + "_D" + std::to_string(D) + "_V" + std::to_string(V);
}

// Threading needs more than 16 tokens and N*D >= 2^17 (2 threads), 7 * 2^16 (7 threads).
INSTANTIATE_TEST_SUITE_P(
    Shapes, ForwardAgreement,
    ::testing::Values(std::make_tuple(1, 1, 1, 1),           // the smallest everything
                      std::make_tuple(1, 1, 4096, 300),      // a decode step
                      std::make_tuple(2, 3, 7, 5),           // D below any vector width
                      std::make_tuple(3, 17, 33, 1),         // V = 1; odd D
                      std::make_tuple(2, 9, 16, 10),         // just past a decode step: streamed; D = 16
                      std::make_tuple(5, 40, 31, 7),         // odd D
                      std::make_tuple(3, 100, 450, 30),      // D not a multiple of 16; 2 threads
                      std::make_tuple(8, 128, 768, 500),     // big enough for 7 threads
                      std::make_tuple(1, 4096, 129, 50257),  // a large vocabulary; 7 threads
                      std::make_tuple(3, 2, 1, 2)),          // fewer tokens than threads
    ShapeName);

INSTANTIATE_TEST_SUITE_P(
    Shapes, KernelAgreement,
    ::testing::Values(std::make_tuple(1, 1, 1, 1),           // the smallest everything
                      std::make_tuple(1, 1, 4096, 300),      // a decode step
                      std::make_tuple(2, 3, 7, 5),           // D below any vector width
                      std::make_tuple(3, 17, 33, 1),         // V = 1: every id is the hot row
                      std::make_tuple(2, 9, 16, 10),         // just past a decode step: streamed; D = 16
                      std::make_tuple(5, 40, 31, 7),         // odd D, a few rows used > 64 times
                      std::make_tuple(4, 256, 100, 97),      // D not a multiple of 8 or 16
                      std::make_tuple(8, 128, 768, 500),     // big enough for 7 threads
                      std::make_tuple(2, 1024, 64, 3),       // hot rows (> 128 uses), 2 threads
                      std::make_tuple(1, 4096, 129, 50257),  // V > 4N: group_rows sorts; 7 threads
                      std::make_tuple(4, 512, 64, 1),        // V = 1, threaded: one hot row, split
                      std::make_tuple(2, 2048, 33, 2),       // two hot rows, odd D
                      std::make_tuple(64, 8, 1024, 40),      // B = 64: positions' last one-at-a-time size
                      std::make_tuple(65, 8, 1024, 40),      // B = 65: positions' first blocked one
                      std::make_tuple(130, 4, 1000, 11),     // B > 128: every position has three blocks
                      std::make_tuple(3, 2, 1, 2)),          // fewer tokens than threads
    ShapeName);

// ---- Every back end against the definitions written out here ----------------------

// out(b, t) = round(widen(tok[row]) + widen(pos[pos])), row = id in [0, V) or
// unk_id, pos = pos_ids(b, t) or start + t, computed with this file's formulas.
TEST(Kernels, ForwardMeetsTheDefinition) {
  const int64_t B = 3, T = 6, D = 7, V = 5, L = T + 6, start = 2, N = B * T, unk = 3;
  const Table tok = make_table(V, D, D + 3, 31), pos = make_table(L, D, D + 1, 32);
  auto ids = ids_mod(N, V, 33);
  ids[2] = V, ids[4] = -1, ids[9] = V + 100, ids[13] = -7;
  const auto pos_ids = ids_mod(N, L, 34);
  for (const kn::KernelTable* be : kn::backends())
    for (const Layout layout : kLayouts)
      for (const IdCase& ic : kIdCases) {
        const Ids id_view = make_ids(ids, B, T, layout, ic.ids, 0);
        const Ids pos_view = make_ids(pos_ids, B, T, layout, ic.pos_ids.value_or(DType::kI64), 0);
        const OutLayout ol = out_layout(layout, B, T, D);
        for (const DType te : kFloatTypes)
          for (const std::optional<DType> pe : {std::optional<DType>{}, std::optional(DType::kF32),
                                                std::optional(DType::kBF16), std::optional(DType::kF16)})
            for (const DType oe : kFloatTypes) {
              const size_t bytes = static_cast<size_t>(ol.elems) * tokpos::dtype_size(oe);
              Bytes want(bytes, 0, 0x5A), got(bytes, 0, 0x5A);
              const kn::Rows tv = tok.view(te);
              for (int64_t b = 0; b < B; ++b)
                for (int64_t t = 0; t < T; ++t) {
                  const int64_t id = logical(ids, layout, b, t, T);
                  const int64_t row = id >= 0 && id < V ? id : unk;
                  const int64_t p = ic.pos_ids ? logical(pos_ids, layout, b, t, T) : start + t;
                  for (int64_t d = 0; d < D; ++d) {
                    auto v = static_cast<float>(element(te, tv.data, static_cast<size_t>(row * tv.stride + d)));
                    if (pe) {
                      const kn::Rows pv = pos.view(*pe);
                      v = v + static_cast<float>(element(*pe, pv.data, static_cast<size_t>(p * pv.stride + d)));
                    }
                    put(oe, want.data(), static_cast<size_t>(b * ol.sb + t * ol.st + d), v);
                  }
                }
              kn::Gather g;
              g.out = {got.data(), oe, ol.sb, ol.st};
              g.ids = id_view.index;
              g.V = V, g.unk_id = unk;
              g.tok = tv;
              if (pe) g.pos = pos.view(*pe);
              if (ic.pos_ids) g.pos_ids = pos_view.index;
              g.L = L;
              g.start = start;
              g.B = B, g.T = T, g.D = D;
              be->compose_forward(g, kn::Exec{});
              EXPECT_TRUE(agrees(*be, want.data(), got.data(), static_cast<size_t>(ol.elems), oe))
                  << layout_name(layout) << ", " << id_case_name(ic) << ", token " << tokpos::dtype_name(te)
                  << " position " << (pe ? tokpos::dtype_name(*pe) : "none") << " out " << tokpos::dtype_name(oe);
            }
      }
}

// x = (tok[row] + types[type]) + pos[pos] in that order, bit for bit; then
// LayerNorm (x - mean) / sqrt(var + eps) * gamma + beta, statistics in double.
TEST(Kernels, TypedMeetsTheDefinition) {
  const int64_t B = 2, T = 5, D = 9, V = 6, L = 8, N = B * T, kTypes = 2;
  const auto tok = wide_noise(static_cast<size_t>(V * D), 41), pos = wide_noise(static_cast<size_t>(L * D), 42),
             types = wide_noise(static_cast<size_t>(kTypes * D), 43);
  const auto gamma = noise(static_cast<size_t>(D), 44), beta = noise(static_cast<size_t>(D), 45);
  auto ids = ids_mod(N, V, 46);
  ids[3] = V + 1;  // UNK
  const auto type_ids = ids_mod(N, kTypes, 47);
  const double eps = 1e-3;
  for (const kn::KernelTable* be : kn::backends())
    for (const bool with_types : {false, true})
      for (const bool layer_norm : {false, true}) {
        std::vector<float> want(static_cast<size_t>(N * D)), got(static_cast<size_t>(N * D), -1.f);
        for (int64_t n = 0; n < N; ++n) {
          const int64_t row = ids[n] >= 0 && ids[n] < V ? ids[n] : 0, p = 1 + n % T;
          for (int64_t d = 0; d < D; ++d) {
            float x = tok[row * D + d];
            if (with_types) x = x + types[type_ids[n] * D + d];
            want[n * D + d] = x + pos[p * D + d];
          }
        }
        kn::TypedGather tg;
        tg.g.out = {got.data(), DType::kF32, T * D, D};
        tg.g.ids = kn::Index::contiguous(ids.data(), T);
        tg.g.V = V, tg.g.unk_id = 0;
        tg.g.tok = {tok.data(), DType::kF32, D};
        tg.g.pos = {pos.data(), DType::kF32, D};
        tg.g.L = L;
        tg.type_rows = kTypes;
        tg.g.start = 1;
        tg.g.B = B, tg.g.T = T, tg.g.D = D;
        if (with_types) tg.type_ids = kn::Index::contiguous(type_ids.data(), T), tg.types = {types.data(), DType::kF32, D};
        if (layer_norm) tg.gamma = gamma.data(), tg.beta = beta.data(), tg.eps = eps;
        be->compose_typed(tg, kn::Exec{});
        if (!layer_norm) {
          EXPECT_TRUE(agrees(*be, want, got)) << "types " << with_types;
          continue;
        }
        for (int64_t n = 0; n < N; ++n) {
          double mean = 0, var = 0;
          for (int64_t d = 0; d < D; ++d) mean += want[n * D + d];
          mean /= D;
          for (int64_t d = 0; d < D; ++d) var += (want[n * D + d] - mean) * (want[n * D + d] - mean);
          var /= D;
          for (int64_t d = 0; d < D; ++d) {
            const double y = (want[n * D + d] - mean) / std::sqrt(var + eps) * gamma[d] + beta[d];
            EXPECT_NEAR(got[n * D + d], y, 1e-5 * (1 + std::fabs(y)) + be->tolerance * std::fabs(y))
                << be->name << " types " << with_types << " token " << n << " d " << d;
          }
        }
      }
}

// The backward's summation order is part of its definition (kernels.h): check
// it against a loop written here that states it, on a row used 199 times
// (blocks of 64: four of them) and a row used once, as the token target and as
// the position target beside it.
TEST(Kernels, BackwardBlocksHotRowsInFixedOrder) {
  const int64_t D = 5, V = 3, N = 200;
  std::vector<int64_t> rows(N, 1);
  rows[7] = 0;
  const auto src = wide_noise(N * D, 15);
  std::vector<float> want(V * D, 0.5f), one_at_a_time(V * D, 0.5f);
  for (int64_t d = 0; d < D; ++d) {
    std::vector<int64_t> list;
    for (int64_t i = 0; i < N; ++i)
      if (rows[i] == 1) list.push_back(i);
    for (size_t b0 = 0; b0 < list.size(); b0 += 64) {
      float block = src[list[b0] * D + d];
      for (size_t k = b0 + 1; k < std::min(list.size(), b0 + 64); ++k) block += src[list[k] * D + d];
      want[1 * D + d] += block;
    }
    for (const int64_t i : list) one_at_a_time[1 * D + d] += src[i * D + d];
    want[0 * D + d] += src[7 * D + d];
    one_at_a_time[0 * D + d] += src[7 * D + d];
  }
  ASSERT_FALSE(bitwise_equal(want, one_at_a_time)) << "the data must tell the two orders apart";
  const kn::RowGroups groups = kn::group_rows(rows.data(), N, V);
  const kn::Source source{src.data(), N * D, D, 1, N, D};
  for (const kn::KernelTable* be : kn::backends())
    for (const int threads : kThreadCounts) {
      kn::Workspace ws;
      const kn::Exec ex{.threads = threads, .ws = &ws};
      std::vector<float> grad(V * D, 0.5f);
      be->index_add_rows(target(grad, D, rows, groups, V), kn::GradTarget{}, source, ex);
      EXPECT_TRUE(agrees(*be, want, grad)) << "threads " << threads;
      std::vector<float> a(V * D, 0.5f), b(V * D, 0.5f);  // both targets, the b one hot
      be->index_add_rows(target(a, D, rows, groups, V), target(b, D, rows, groups, V), source, ex);
      EXPECT_TRUE(agrees(*be, want, a)) << "a target beside a hot b, threads " << threads;
      EXPECT_TRUE(agrees(*be, want, b)) << "hot b target, threads " << threads;
    }
}

// A row used at most 64 times takes its sources one at a time, in order:
// ((g + s_1) + s_2) + s_3, which is not g + ((s_1 + s_2) + s_3) (the data
// below is chosen so the two differ, so this test tells them apart).
TEST(Kernels, BackwardAddsFewSourcesOneAtATime) {
  const int64_t D = 3, V = 2, N = 3;
  const std::vector<int64_t> rows{1, 1, 1};
  const std::vector<float> src{0x1p-24f, 0x1p-24f, 3.0f, 0x1p-24f, 0x1p-24f, -1.0f, 0x1p-24f, 1.0f, 0.25f};
  std::vector<float> want(V * D, 1.0f), blocked(V * D, 1.0f);
  for (int64_t d = 0; d < D; ++d) {
    float g = 1.0f;
    for (int64_t i = 0; i < N; ++i) g += src[i * D + d];
    want[D + d] = g;
    blocked[D + d] = 1.0f + ((src[d] + src[D + d]) + src[2 * D + d]);
  }
  ASSERT_FALSE(bitwise_equal(want, blocked)) << "the data must tell the two orders apart";
  const kn::RowGroups groups = kn::group_rows(rows.data(), N, V);
  const kn::Source source{src.data(), N * D, D, 1, N, D};
  for (const kn::KernelTable* be : kn::backends())
    for (const int threads : kThreadCounts) {
      std::vector<float> grad(V * D, 1.0f);
      be->index_add_rows(target(grad, D, rows, groups, V), kn::GradTarget{}, source, {.threads = threads});
      EXPECT_TRUE(agrees(*be, want, grad)) << "threads " << threads;
      std::vector<float> a(V * D, 1.0f), p(V * D, 1.0f);  // and as either of two targets
      be->index_add_rows(target(a, D, rows, groups, V), target(p, D, rows, groups, V), source, {.threads = threads});
      EXPECT_TRUE(agrees(*be, want, a) && agrees(*be, want, p)) << be->name << " two targets, threads " << threads;
      std::vector<float> q(V * D, 1.0f);
      be->index_add_rows(kn::GradTarget{}, target(q, D, rows, groups, V), source, {.threads = threads});
      EXPECT_TRUE(agrees(*be, want, q)) << "b target alone, threads " << threads;
    }
}

// A decode step's backward (on the calling thread, its position rows held
// in a buffer while consecutive sources share one) gives the reference's
// bits: every element summed in (b, t) order. D = 200 ends off the 16-float
// lines, D = 600 takes more than one chunk of channels; rows repeat, and
// position rows come in runs (consecutive sources sharing one) and alone;
// either gradient may be absent.
TEST(Kernels, DecodeStepBackwardMatchesTheReference) {
  const int64_t V = 9, L = 4;
  struct Case {
    int64_t B, T;
    bool runs;
  };
  for (const int64_t D : {int64_t{200}, int64_t{600}})
    for (const Case c : {Case{16, 1, false}, Case{4, 4, false}, Case{1, 7, false}, Case{13, 1, true}, Case{2, 8, true}}) {
      const int64_t B = c.B, T = c.T, N = B * T;
      std::vector<int64_t> rows(static_cast<size_t>(N)), positions(static_cast<size_t>(N));
      for (int64_t i = 0; i < N; ++i) {
        rows[i] = i % 3 == 2 ? -1 : (i * 5) % V;  // -1: a padding row, no gradient
        positions[i] = c.runs ? (i / 3 + i / 5) % L : i % T % L;
      }
      const kn::RowGroups tok_groups = kn::group_rows(rows.data(), N, V);
      const kn::RowGroups pos_groups = kn::group_rows(positions.data(), N, L);
      const auto src = wide_noise(static_cast<size_t>(N * D), 61);
      const kn::Source source{src.data(), T * D, D, B, T, D};
      for (const auto& which : {std::pair{true, true}, {true, false}, {false, true}}) {
        const bool with_a = which.first, with_b = which.second;
        std::vector<float> want_a(V * D, 0.5f), want_b(L * D, -0.25f);
        auto targets = [&](std::vector<float>& a, std::vector<float>& b) {
          return std::pair{with_a ? target(a, D, rows, tok_groups, V) : kn::GradTarget{},
                           with_b ? target(b, D, positions, pos_groups, L) : kn::GradTarget{}};
        };
        const auto [ra, rb] = targets(want_a, want_b);
        kn::reference_kernels().index_add_rows(ra, rb, source, {});
        for (const kn::KernelTable* be : kn::backends())
          for (const int threads : kThreadCounts) {
            std::vector<float> a(V * D, 0.5f), b(L * D, -0.25f);
            const auto [ta, tb] = targets(a, b);
            be->index_add_rows(ta, tb, source, {.threads = threads});
            EXPECT_TRUE(agrees(*be, want_a, a) && agrees(*be, want_b, b))
                << be->name << " D " << D << " B " << B << " T " << T << " runs " << c.runs << " a " << with_a
                << " b " << with_b << " threads " << threads;
          }
      }
    }
}

// ---- float64 ------------------------------------------------------------------------

bool bitwise_equal(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
}

// n doubles spanning 2^-30 .. 2^17 with full 53-bit significands (a float
// holds none of them exactly), so a kernel that rounds through float shows.
std::vector<double> wide_noise64(size_t n, uint64_t seed) {
  const auto v = wide_noise(n, seed), w = noise(n, seed + 1000);
  std::vector<double> out(n);
  for (size_t i = 0; i < n; ++i)
    out[i] = static_cast<double>(v[i]) * (1.0 + 0x1p-30 * static_cast<double>(w[i]));
  return out;
}

// The float64 forward is the exact double sum tok[row] + pos[pos] (no
// rounding), UNK and vocab-shard rows as for float; every back end, layout,
// index case and thread count.
TEST(Kernels, ForwardF64MeetsTheDefinition) {
  for (const auto& [B, T, D, V] : {Shape{3, 6, 7, 5}, Shape{8, 128, 768, 500}}) {
    const int64_t L = T + 6, start = 2, N = B * T, unk = 3, ts = D + 3, ps = D + 1;
    const auto tok = wide_noise64(static_cast<size_t>(V * ts), 51),
               pos = wide_noise64(static_cast<size_t>(L * ps), 52);
    auto ids = ids_mod(N, V, 53);
    ids[2] = V, ids[4] = -1, ids[N - 1] = V + 100;
    const auto pos_ids = ids_mod(N, L, 54);
    for (const kn::KernelTable* be : kn::backends())
      for (const Layout layout : kLayouts)
        for (const IdCase& ic : kIdCases)
          for (const bool with_pos : {false, true})
            for (const bool shard : {false, true})
              for (const int threads : kThreadCounts) {
                const Ids id_view = make_ids(ids, B, T, layout, ic.ids, 0);
                const Ids pos_view = make_ids(pos_ids, B, T, layout, ic.pos_ids.value_or(DType::kI64), 0);
                const OutLayout ol = out_layout(layout, B, T, D);
                std::vector<double> want(static_cast<size_t>(ol.elems), -7.0), got = want;
                for (int64_t b = 0; b < B; ++b)
                  for (int64_t t = 0; t < T; ++t) {
                    const int64_t id = logical(ids, layout, b, t, T);
                    const bool inside = id >= 0 && id < V;
                    const int64_t row = inside ? id : unk;
                    const int64_t p = ic.pos_ids ? logical(pos_ids, layout, b, t, T) : start + t;
                    for (int64_t d = 0; d < D; ++d) {
                      const double x = shard && !inside ? 0.0 : tok[row * ts + d];
                      want[b * ol.sb + t * ol.st + d] =
                          with_pos ? (shard && !inside ? pos[p * ps + d] : x + pos[p * ps + d]) : x;
                    }
                  }
                kn::Gather g;
                g.out = {got.data(), DType::kF64, ol.sb, ol.st};
                g.ids = id_view.index;
                g.V = V, g.unk_id = unk, g.zero_outside = shard;
                g.tok = {tok.data(), DType::kF64, ts};
                if (with_pos) g.pos = {pos.data(), DType::kF64, ps};
                if (ic.pos_ids) g.pos_ids = pos_view.index;
                g.L = L;
                g.start = start;
                g.B = B, g.T = T, g.D = D;
                be->compose_forward(g, {.threads = threads});
                EXPECT_TRUE(bitwise_equal(want, got))
                    << be->name << " B" << B << " " << layout_name(layout) << ", " << id_case_name(ic)
                    << ", pos " << with_pos << ", shard " << shard << ", threads " << threads;
              }
  }
}

// The float64 backward against its definition (kernels.h) written out here:
// each row's sources in increasing i, one at a time up to kRowBlock, else
// blocks of kRowBlock summed from their first source; padding rows (-1)
// skipped; two targets are the two one-target scatters. Every back end,
// thread count, with and without a workspace, on every agreement shape.
TEST_P(KernelAgreement, BackwardF64MeetsTheDefinition) {
  int64_t B, T, D, V;  // named variables, not bindings: the lambdas below capture them
  std::tie(B, T, D, V) = GetParam();
  const int64_t N = B * T, L = T + 5, start = 3, as = D + 3, bs = D + 2, st = D + 4;
  auto token_rows = ids_mod(N, V, 6);
  if (N > 2) token_rows[1] = -1;
  if (N > 5) token_rows[N - 3] = -1;
  std::vector<int64_t> positions(static_cast<size_t>(N));
  for (int64_t n = 0; n < N; ++n) positions[n] = start + n % T;
  const kn::RowGroups token_groups = kn::group_rows(token_rows.data(), N, V);
  const kn::RowGroups position_groups = kn::group_rows(positions.data(), N, L);
  const auto src = wide_noise64(static_cast<size_t>(N * st), 9);
  const kn::Source64 source{src.data(), T * st, st, B, T, D};
  const auto init_a = wide_noise64(static_cast<size_t>(V * as), 10),
             init_b = wide_noise64(static_cast<size_t>(L * bs), 11);
  auto definition = [&](std::vector<double> grad, int64_t stride, const std::vector<int64_t>& rows, int64_t R,
                        bool blocked) {
    for (int64_t r = 0; r < R; ++r) {
      std::vector<int64_t> list;
      for (int64_t i = 0; i < N; ++i)
        if (rows[i] == r) list.push_back(i);
      const bool blocks = blocked && list.size() > static_cast<size_t>(kn::kRowBlock);
      for (int64_t d = 0; d < D; ++d) {
        double& g = grad[r * stride + d];
        if (!blocks) {
          for (const int64_t i : list) g += src[i * st + d];
          continue;
        }
        for (size_t b0 = 0; b0 < list.size(); b0 += kn::kRowBlock) {
          double block = src[list[b0] * st + d];
          for (size_t k = b0 + 1; k < std::min(list.size(), b0 + kn::kRowBlock); ++k)
            block += src[list[k] * st + d];
          g += block;
        }
      }
    }
    return grad;
  };
  const auto want_a = definition(init_a, as, token_rows, V, true),
             want_b = definition(init_b, bs, positions, L, true);
  if (token_groups.max_sources() > kn::kRowBlock) {
    EXPECT_FALSE(bitwise_equal(want_a, definition(init_a, as, token_rows, V, false)))
        << "the data must tell the blocked order from one at a time";
  }
  for (const kn::KernelTable* be : kn::backends())
    for (const int threads : kThreadCounts)
      for (const bool with_ws : {false, true})
        for (int targets = 0; targets < 3; ++targets) {  // tokens, positions, both
          kn::Workspace ws;
          std::vector<double> ga = init_a, gb = init_b;
          kn::GradTarget64 a{ga.data(), as, token_rows.data(), &token_groups, V};
          kn::GradTarget64 b{gb.data(), bs, positions.data(), &position_groups, L};
          if (targets == 1) a.grad = nullptr;
          if (targets == 0) b.grad = nullptr;
          be->index_add_rows_f64(a, b, source, {.threads = threads, .ws = with_ws ? &ws : nullptr});
          const std::string what = std::string(be->name) + ", targets " + std::to_string(targets) +
                                   ", threads " + std::to_string(threads) + (with_ws ? ", workspace" : "");
          EXPECT_TRUE(bitwise_equal(ga, targets == 1 ? init_a : want_a)) << "token gradient, " << what;
          EXPECT_TRUE(bitwise_equal(gb, targets == 0 ? init_b : want_b)) << "position gradient, " << what;
        }
}

// scale_grad_by_freq's rows (GradTargetOf::row_scale): each source added as
// one fused multiply-add in increasing i, grad = fma(scale[v], s_i, grad),
// for a row used 200 times (no blocks) as for one used once; beside a plain
// position target, which keeps its own order. Every back end and thread
// count, float32 and float64.
template <typename E>
void expect_scaled_rows_fused() {
  const int64_t D = 37, V = 4, N = 300, L = 10;
  std::vector<int64_t> rows(N, 1), positions(N);
  for (int64_t i = 0; i < N; ++i) {
    if (i % 3 == 0) rows[i] = 3;
    if (i % 7 == 0) rows[i] = -1;  // padding
    positions[i] = i % L;
  }
  rows[5] = 0;
  const auto wide = wide_noise64(static_cast<size_t>(N * D), 61),
             init = wide_noise64(static_cast<size_t>(V * D), 62);
  const std::vector<E> src(wide.begin(), wide.end()), grad0(init.begin(), init.end());
  std::vector<E> scale(V, E(0));
  {
    std::vector<int64_t> counts(V, 0);
    for (const int64_t r : rows)
      if (r >= 0) ++counts[r];
    for (int64_t v = 0; v < V; ++v)
      if (counts[v]) scale[v] = static_cast<E>(1.0 / static_cast<double>(counts[v]));
  }
  std::vector<E> want = grad0, unfused = grad0;
  for (int64_t i = 0; i < N; ++i)
    if (rows[i] >= 0)
      for (int64_t d = 0; d < D; ++d) {
        E& g = want[rows[i] * D + d];
        g = std::fma(scale[rows[i]], src[i * D + d], g);
        E& u = unfused[rows[i] * D + d];
        u = u + scale[rows[i]] * src[i * D + d];
      }
  ASSERT_FALSE(std::memcmp(want.data(), unfused.data(), want.size() * sizeof(E)) == 0)
      << "the data must tell a fused multiply-add from a product and a sum";
  const kn::RowGroups groups = kn::group_rows(rows.data(), N, V),
                      pos_groups = kn::group_rows(positions.data(), N, L);
  const kn::SourceOf<E> source{src.data(), N * D, D, 1, N, D};
  const std::vector<E> pos0(static_cast<size_t>(L * D), E(0.25));
  auto run = [&](const kn::KernelTable& be, const kn::GradTargetOf<E>& a, const kn::GradTargetOf<E>& b,
                 const kn::Exec& ex) {
    if constexpr (std::is_same_v<E, double>) {
      be.index_add_rows_f64(a, b, source, ex);
    } else {
      be.index_add_rows(a, b, source, ex);
    }
  };
  std::vector<E> want_pos = pos0;
  run(kn::reference_kernels(), {}, {want_pos.data(), D, positions.data(), &pos_groups, L}, kn::Exec{});
  for (const kn::KernelTable* be : kn::backends())
    for (const int threads : kThreadCounts)
      for (const bool with_pos : {false, true}) {
        kn::Workspace ws;
        std::vector<E> grad = grad0, pos = pos0;
        kn::GradTargetOf<E> a{grad.data(), D, rows.data(), &groups, V};
        a.row_scale = scale.data();
        kn::GradTargetOf<E> b{with_pos ? pos.data() : nullptr, D, positions.data(), &pos_groups, L};
        run(*be, a, b, {.threads = threads, .ws = &ws});
        EXPECT_EQ(std::memcmp(grad.data(), want.data(), grad.size() * sizeof(E)), 0)
            << be->name << " " << sizeof(E) * 8 << "-bit, threads " << threads << ", positions " << with_pos;
        EXPECT_EQ(std::memcmp(pos.data(), with_pos ? want_pos.data() : pos0.data(), pos.size() * sizeof(E)),
                  0)
            << be->name << " position target, threads " << threads;
      }
}

TEST(Kernels, ScaledRowsAreFusedOneAtATime) {
  expect_scaled_rows_fused<float>();
  expect_scaled_rows_fused<double>();
}

// ---- Threads, workspaces, grouping -------------------------------------------------

// Called from two threads of an engine's own OpenMP team at once, each asking
// for 7 threads, a kernel still does every owner's share: the same bits as
// the reference.
TEST(Kernels, FusedBackwardInsideAnOuterParallelRegion) {
  const int64_t B = 4, T = 300, D = 400, V = 37, L = T, N = B * T;  // N*D: 7 threads asked for
  const auto d_out = noise(N * D, 20);
  const auto ids = ids_mod(N, V, 21);
  std::vector<int64_t> pos(N);
  for (int64_t n = 0; n < N; ++n) pos[n] = n % T;
  const kn::RowGroups id_groups = kn::group_rows(ids.data(), N, V), pos_groups = kn::group_rows(pos.data(), N, L);
  const kn::Source source{d_out.data(), T * D, D, B, T, D};
  std::vector<float> want_t = noise(V * D, 22), want_p = noise(L * D, 23);
  kn::reference_kernels().index_add_rows(target(want_t, D, ids, id_groups, V), target(want_p, D, pos, pos_groups, L),
                                         source, kn::Exec{});
  for (const kn::KernelTable* be : candidates()) {
    std::vector<std::vector<float>> got_t(2, noise(V * D, 22)), got_p(2, noise(L * D, 23));
    std::vector<kn::Workspace> ws(2);
#pragma omp parallel for num_threads(2)
    for (int k = 0; k < 2; ++k) {
      be->index_add_rows(target(got_t[k], D, ids, id_groups, V), target(got_p[k], D, pos, pos_groups, L), source,
                         {.threads = 7, .ws = k == 1 ? &ws[1] : nullptr});
    }
    for (int k = 0; k < 2; ++k) {
      EXPECT_TRUE(agrees(*be, want_t, got_t[k])) << "token gradient, outer thread " << k;
      EXPECT_TRUE(agrees(*be, want_p, got_p[k])) << "position gradient, outer thread " << k;
    }
  }
}

// The same for the forward, streamed.
TEST(Kernels, ForwardInsideAnOuterParallelRegion) {
  const int64_t B = 4, T = 300, D = 400, V = 37, L = T, N = B * T;
  const auto tok = noise(V * D, 24), pos = noise(L * D, 25);
  const auto ids = ids_mod(N, V, 26);
  kn::Gather g;
  g.ids = kn::Index::contiguous(ids.data(), T);
  g.V = V;
  g.tok = {tok.data(), DType::kF32, D};
  g.pos = {pos.data(), DType::kF32, D};
  g.B = B, g.T = T, g.D = D;
  std::vector<float> want(N * D);
  g.out = {want.data(), DType::kF32, T * D, D};
  kn::reference_kernels().compose_forward(g, kn::Exec{});
  for (const kn::KernelTable* be : candidates()) {
    std::vector<std::vector<float>> got(2, std::vector<float>(N * D, -1.f));
#pragma omp parallel for num_threads(2)
    for (int k = 0; k < 2; ++k) {
      kn::Gather mine = g;
      mine.out.data = got[k].data();
      be->compose_forward(mine, {.threads = 7, .stream_min_bytes = kAlwaysStream});
    }
    for (int k = 0; k < 2; ++k) EXPECT_TRUE(agrees(*be, want, got[k])) << "outer thread " << k;
  }
}

// One workspace reused across calls of growing and shrinking size gives the
// bits of calls without one; the cpu back end keeps its scratch in it; release() frees it.
TEST(Kernels, WorkspaceIsReusedAndReleased) {
  const kn::KernelTable& cpu = kn::cpu_kernels();
  kn::Workspace ws;
  EXPECT_EQ(ws.bytes(), 0u);
  for (const kn::KernelTable* be : candidates()) {
    const std::vector<std::tuple<int64_t, int64_t, int64_t, int64_t>> shapes{
        {70, 20, 300, 3}, {1, 5, 8, 1000}, {2, 700, 200, 9}, {3, 4, 5, 2}};  // (B, T, D, V)
    for (const auto& [B, T, D, V] : shapes) {
      const int64_t N = B * T, L = T;
      const SourceBuf source = make_source(B, T, D, Layout::kContiguous, 50);
      const auto ids = ids_mod(N, V, 51);
      std::vector<int64_t> pos(N);
      for (int64_t n = 0; n < N; ++n) pos[n] = n % T;
      const kn::RowGroups ig = kn::group_rows(ids.data(), N, V), pg = kn::group_rows(pos.data(), N, L);
      for (const int threads : kThreadCounts) {
        std::vector<float> a0 = wide_noise(V * D, 52), p0 = wide_noise(L * D, 53), a1 = a0, p1 = p0;
        be->index_add_rows(target(a0, D, ids, ig, V), target(p0, D, pos, pg, L), source.src, {.threads = threads});
        be->index_add_rows(target(a1, D, ids, ig, V), target(p1, D, pos, pg, L), source.src,
                           {.threads = threads, .ws = &ws});
        EXPECT_TRUE(bitwise_equal(a0, a1) && bitwise_equal(p0, p1))
            << be->name << " B " << B << " T " << T << " threads " << threads;
        if (be == &cpu) {
          EXPECT_GT(ws.bytes(), 0u);
        }
      }
    }
    ws.release();
    EXPECT_EQ(ws.bytes(), 0u);
  }
}

// group_rows: the counting sort (V <= 4N) and the comparison sort (V > 4N)
// give the same groups, which are the rows in increasing order, each with its
// sources in increasing i; rows < 0 are left out.
TEST(Kernels, GroupRowsCountingAndComparisonSortAgree) {
  auto expected = [](const std::vector<int64_t>& rows, int64_t R) {
    kn::RowGroups g;
    for (int64_t v = 0; v < R; ++v) {
      const auto before = static_cast<int64_t>(g.order.size());
      for (size_t i = 0; i < rows.size(); ++i)
        if (rows[i] == v) g.order.push_back(static_cast<int64_t>(i));
      if (static_cast<int64_t>(g.order.size()) > before) g.rows.push_back(v), g.start.push_back(before);
    }
    g.start.push_back(static_cast<int64_t>(g.order.size()));
    return g;
  };
  const int64_t R = 10;  // rows in [0, R)
  for (const int64_t N : {3, 7, 100, 1000, 5000}) {
    auto rows = ids_mod(N, R, static_cast<uint64_t>(N));
    for (int64_t i = 0; i < N; i += 5) rows[i] = -1;
    if (N > 3) rows[3] = -9;
    const kn::RowGroups want = expected(rows, R);
    const kn::RowGroups counting = kn::group_rows(rows.data(), N, 4 * N);    // V <= 4N
    const kn::RowGroups sorting = kn::group_rows(rows.data(), N, 4 * N + 1);  // V > 4N
    for (const auto* got : {&counting, &sorting}) {
      EXPECT_EQ(got->order, want.order) << "N " << N;
      EXPECT_EQ(got->rows, want.rows) << "N " << N;
      EXPECT_EQ(got->start, want.start) << "N " << N;
    }
    int64_t most = 0;
    for (size_t g = 0; g < want.rows.size(); ++g) {
      EXPECT_EQ(counting.sources(g), want.start[g + 1] - want.start[g]);
      most = std::max(most, want.start[g + 1] - want.start[g]);
    }
    EXPECT_EQ(counting.max_sources(), most);
    EXPECT_EQ(sorting.max_sources(), most);
  }
  // Nothing to group: no rows, one start.
  const std::vector<int64_t> padding{-1, -1, -1};
  for (const int64_t V : {1, 100}) {
    const auto none = kn::group_rows(padding.data(), 3, V);
    EXPECT_TRUE(none.order.empty() && none.rows.empty()) << V;
    EXPECT_EQ(none.start, std::vector<int64_t>{0}) << V;
    EXPECT_EQ(none.max_sources(), 0);
    const auto empty = kn::group_rows(nullptr, 0, V);
    EXPECT_TRUE(empty.order.empty() && empty.rows.empty()) << V;
    EXPECT_EQ(empty.start, std::vector<int64_t>{0}) << V;
  }
}

TEST(Kernels, ThreadsForAGrainOfWork) {
  EXPECT_EQ(kn::threads_for({.threads = 7}, 1000), 1);
  EXPECT_EQ(kn::threads_for({.threads = 7}, int64_t{1} << 30), 7);
  EXPECT_EQ(kn::threads_for({.threads = 1}, int64_t{1} << 30), 1);
  EXPECT_EQ(kn::threads_for({.threads = 0}, int64_t{1} << 30), 1);
  for (int64_t work = 1; work < (int64_t{1} << 24); work = work * 3 + 1) {
    const int t = kn::threads_for({.threads = 7}, work);
    EXPECT_GE(t, 1);
    EXPECT_LE(t, 7);
  }
}

TEST(Kernels, ActiveIsTheCpuBackEnd) {
  EXPECT_STREQ(kn::active_kernels().name, "cpu");
  EXPECT_EQ(&kn::active_kernels(), &kn::cpu_kernels());
  EXPECT_STREQ(kn::reference_kernels().name, "reference");
  EXPECT_EQ(kn::reference_kernels().tolerance, 0.0);
  const auto all = kn::backends();
  ASSERT_GE(all.size(), 2u);
  EXPECT_EQ(all[0], &kn::reference_kernels()) << "the reference comes first";
  EXPECT_NE(std::find(all.begin(), all.end(), &kn::cpu_kernels()), all.end());
  for (size_t i = 0; i < all.size(); ++i) {
    EXPECT_TRUE(all[i]->compose_forward && all[i]->compose_typed && all[i]->index_add_rows) << all[i]->name;
    EXPECT_GE(all[i]->tolerance, 0.0) << all[i]->name;
    for (size_t j = 0; j < i; ++j) EXPECT_STRNE(all[i]->name, all[j]->name);
  }
}

// ---- The streaming threshold ------------------------------------------------------

TEST(Kernels, StreamMinBytesSetting) {
  const int64_t by_default = tokpos::stream_min_bytes();
  EXPECT_GT(by_default, 0);
  if (std::getenv("TOKPOS_STREAM_MIN_BYTES") == nullptr) {
    EXPECT_LE(by_default, int64_t{16} << 20) << "half the last-level cache, at most 16 MiB";
  }
  tokpos::set_stream_min_bytes(0);
  EXPECT_EQ(tokpos::stream_min_bytes(), 0);
  tokpos::set_stream_min_bytes(INT64_MAX);
  EXPECT_EQ(tokpos::stream_min_bytes(), INT64_MAX);
  tokpos::set_stream_min_bytes(-5);  // negative: back to the default
  EXPECT_EQ(tokpos::stream_min_bytes(), by_default);
}

// The start-up value comes from TOKPOS_STREAM_MIN_BYTES, read once. Without
// the variable, the test runs itself again in a child process that has it.
TEST(Kernels, StreamMinBytesFromTheEnvironment) {
  const char* env = std::getenv("TOKPOS_STREAM_MIN_BYTES");
  if (env == nullptr) {
    std::string filter = "--gtest_filter=Kernels.StreamMinBytesFromTheEnvironment";
    std::string exe = "/proc/self/exe";
    char* argv[] = {exe.data(), filter.data(), nullptr};
    std::vector<std::string> vars = {"TOKPOS_STREAM_MIN_BYTES=123456"};
    for (char** e = environ; *e != nullptr; ++e) vars.emplace_back(*e);
    std::vector<char*> envp;
    for (auto& v : vars) envp.push_back(v.data());
    envp.push_back(nullptr);
    pid_t pid = 0;
    ASSERT_EQ(posix_spawn(&pid, exe.c_str(), nullptr, nullptr, argv, envp.data()), 0) << std::strerror(errno);
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status)) << "the child with TOKPOS_STREAM_MIN_BYTES=123456 did not exit";
    EXPECT_EQ(WEXITSTATUS(status), 0) << "the child with TOKPOS_STREAM_MIN_BYTES=123456 failed (output above)";
    return;
  }
  EXPECT_EQ(tokpos::stream_min_bytes(), std::atoll(env));
  tokpos::set_stream_min_bytes(0);
  tokpos::set_stream_min_bytes(-1);  // back to the start-up value: the environment's
  EXPECT_EQ(tokpos::stream_min_bytes(), std::atoll(env));
}

// ---- Conversions (common/convert.h) -------------------------------------------------

// Every binary16 value widens to the float it denotes.
TEST(Kernels, ConversionsAreExact) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    const float f = fp::to_f32(fp::f16_t{static_cast<uint16_t>(h)});
    if (e == 31) {
      EXPECT_TRUE(m ? std::isnan(f) : std::isinf(f)) << h;
      EXPECT_EQ(std::signbit(f), (h & 0x8000) != 0) << h;
      continue;
    }
    const double want = (e == 0 ? std::ldexp(m, -24) : std::ldexp(m + 1024, e - 25)) * ((h & 0x8000) ? -1 : 1);
    ASSERT_EQ(static_cast<double>(f), want) << std::hex << h;
    ASSERT_EQ(std::signbit(f), (h & 0x8000) != 0) << std::hex << h;  // -0 too
    EXPECT_EQ(fp::to_f16(f).bits, h) << std::hex << h;                // and back
  }
  // Every bfloat16 value widens to the float it denotes.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const double want = bf16_value(static_cast<uint16_t>(h));
    const float f = fp::to_f32(fp::bf16_t{static_cast<uint16_t>(h)});
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(f)) << h;
      continue;
    }
    ASSERT_EQ(static_cast<double>(f), want) << std::hex << h;
    EXPECT_EQ(fp::to_bf16(f).bits, h) << std::hex << h;
  }
}

// Inputs that probe a rounding to a 16-bit format: every value of the format
// (as float; `value` widens bits), its float neighbours, the midpoints to the
// next value and their float neighbours, and random float bit patterns.
std::vector<float> rounding_probes(double (*value)(uint16_t)) {
  std::vector<float> xs;
  auto with_neighbours = [&](float x) {
    xs.push_back(x);
    xs.push_back(std::nextafter(x, HUGE_VALF));
    xs.push_back(std::nextafter(x, -HUGE_VALF));
  };
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const double v = value(static_cast<uint16_t>(h));
    if (!std::isfinite(v)) continue;
    with_neighbours(static_cast<float>(v));
    // The next value away from zero (the one past the largest finite: 2^(emax+1)).
    const double next = value(static_cast<uint16_t>(h + 1));
    const double up = std::isfinite(next) ? next : std::ldexp(v >= 0 ? 1.0 : -1.0, std::ilogb(v) + 1);
    if ((h & 0x7fff) != 0x7fff) with_neighbours(static_cast<float>((v + up) / 2));  // exact in float
  }
  uint64_t s = 0x2545F4914F6CDD1Dull;
  for (int i = 0; i < (1 << 21); ++i) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    xs.push_back(std::bit_cast<float>(static_cast<uint32_t>(s)));
  }
  for (const float x : {0.0f, -0.0f, 1e-45f, -1e-45f, 1e-40f, 0x1p-126f, 0x1p-25f, 0x1.000002p-25f, 0x1.8p-24f,
                        0x1p-24f, 65504.0f, 65519.996f, 65520.0f, 65536.0f, 1e5f, 3.4028235e38f, -3.4028235e38f,
                        HUGE_VALF, -HUGE_VALF})
    xs.push_back(x);
  return xs;
}

// float -> binary16 rounds to nearest even (nearest_bits, by exact
// arithmetic, and _Float16 where the compiler has it), subnormals included;
// from 65520 on: Inf; NaN: the quiet NaN 0x7e00 with the sign; +-0 kept.
TEST(Kernels, F32ToF16RoundsToNearestEven) {
  EXPECT_EQ(fp::to_f16(0.0f).bits, 0x0000);
  EXPECT_EQ(fp::to_f16(-0.0f).bits, 0x8000);
  EXPECT_EQ(fp::to_f16(1.0f).bits, 0x3c00);
  EXPECT_EQ(fp::to_f16(1.0f + 0x1p-11f).bits, 0x3c00);       // tie -> even (down)
  EXPECT_EQ(fp::to_f16(1.0f + 3 * 0x1p-11f).bits, 0x3c02);   // tie -> even (up)
  EXPECT_EQ(fp::to_f16(0x1p-25f).bits, 0x0000);              // half the smallest subnormal: tie -> 0
  EXPECT_EQ(fp::to_f16(0x1.000002p-25f).bits, 0x0001);       // just above it
  EXPECT_EQ(fp::to_f16(0x1.8p-24f).bits, 0x0002);            // 1.5 subnormal ulps: tie -> even (up)
  EXPECT_EQ(fp::to_f16(65504.0f).bits, 0x7bff);              // the largest finite
  EXPECT_EQ(fp::to_f16(65519.996f).bits, 0x7bff);            // just below the overflow midpoint
  EXPECT_EQ(fp::to_f16(65520.0f).bits, 0x7c00);              // the midpoint: to even, which is Inf
  EXPECT_EQ(fp::to_f16(-1e9f).bits, 0xfc00);
  EXPECT_EQ(fp::to_f16(HUGE_VALF).bits, 0x7c00);
  EXPECT_EQ(fp::to_f16(std::numeric_limits<float>::quiet_NaN()).bits, 0x7e00);
  EXPECT_EQ(fp::to_f16(-std::numeric_limits<float>::quiet_NaN()).bits, 0xfe00);
  for (const uint32_t nan : {0x7f800001u, 0x7fbfffffu, 0x7fc00000u, 0x7fffffffu, 0xff800001u, 0xffc12345u})
    EXPECT_EQ(fp::to_f16(std::bit_cast<float>(nan)).bits, (nan >> 16 & 0x8000) | 0x7e00) << std::hex << nan;

  // GCC vectors of 16 lanes, as the streaming forward instantiates convert.h's template.
  typedef uint32_t u32x16 __attribute__((vector_size(64)));
  typedef float f32x16 __attribute__((vector_size(64)));
  const auto xs = rounding_probes(f16_value);
  int64_t wrong = 0, wrong_vector = 0, wrong_float16 = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const float x = xs[i];
    const uint16_t got = fp::to_f16(x).bits;
    const uint16_t want = std::isnan(x) ? static_cast<uint16_t>((std::bit_cast<uint32_t>(x) >> 16 & 0x8000) | 0x7e00)
                                        : nearest_f16(x);
    if (got != want && wrong++ < 10) ADD_FAILURE() << std::hexfloat << x << ": want 0x" << std::hex << want << " got 0x" << got;
#if defined(__FLT16_MANT_DIG__)
    const auto native = std::bit_cast<uint16_t>(static_cast<_Float16>(x));
    const bool same = std::isnan(x) ? (got & 0x7c00) == 0x7c00 && (got & 0x3ff) != 0 : native == got;
    if (!same && wrong_float16++ < 10)
      ADD_FAILURE() << std::hexfloat << x << ": _Float16 gives 0x" << std::hex << native << ", to_f16 0x" << got;
#endif
    if (i % 16 == 15) {
      f32x16 v;
      std::memcpy(&v, &xs[i - 15], sizeof v);
      const u32x16 bits = fp::f32_to_f16_bits<u32x16, f32x16>(v);
      for (int lane = 0; lane < 16; ++lane)
        if (bits[lane] != fp::to_f16(xs[i - 15 + lane]).bits && wrong_vector++ < 10)
          ADD_FAILURE() << "vector lane " << lane << ": " << std::hexfloat << xs[i - 15 + lane];
    }
  }
  EXPECT_EQ(wrong, 0) << "of " << xs.size();
  EXPECT_EQ(wrong_vector, 0) << "of " << xs.size();
  EXPECT_EQ(wrong_float16, 0) << "of " << xs.size();
}

// float -> bfloat16 rounds to nearest even; NaN stays NaN (quiet).
TEST(Kernels, Bf16RoundsToNearestEven) {
  EXPECT_EQ(fp::to_bf16(1.0f).bits, 0x3f80);
  EXPECT_EQ(fp::to_bf16(std::bit_cast<float>(0x3f808000u)).bits, 0x3f80);  // tie -> even
  EXPECT_EQ(fp::to_bf16(std::bit_cast<float>(0x3f818000u)).bits, 0x3f82);  // tie -> even (up)
  EXPECT_EQ(fp::to_bf16(std::bit_cast<float>(0x3f808001u)).bits, 0x3f81);
  EXPECT_EQ(fp::to_bf16(std::bit_cast<float>(0x7f7fffffu)).bits, 0x7f80);  // FLT_MAX rounds to Inf
  EXPECT_EQ(fp::to_bf16(-0.0f).bits, 0x8000);
  EXPECT_TRUE(std::isnan(fp::to_f32(fp::to_bf16(std::nanf("")))));
  for (const uint32_t nan : {0x7f800001u, 0x7fc00000u, 0xff800001u, 0x7fffffffu}) {
    const uint16_t b = fp::to_bf16(std::bit_cast<float>(nan)).bits;
    EXPECT_TRUE((b & 0x7f80) == 0x7f80 && (b & 0x40)) << std::hex << nan << " -> " << b;
    EXPECT_EQ(b & 0x8000, nan >> 16 & 0x8000) << std::hex << nan;
  }
  const auto xs = rounding_probes(bf16_value);
  int64_t wrong = 0;
  for (const float x : xs) {
    if (std::isnan(x)) continue;
    const uint16_t got = fp::to_bf16(x).bits, want = nearest_bf16(x);
    if (got != want && wrong++ < 10) ADD_FAILURE() << std::hexfloat << x << ": want 0x" << std::hex << want << " got 0x" << got;
  }
  EXPECT_EQ(wrong, 0) << "of " << xs.size();
}


// ---- RoPE ------------------------------------------------------------------------

// Every back end against the reference: each dtype, layout and direction,
// partial rotary dims, padded heads, positions up to 2^31 - 1, several
// thread counts, and in place (out = x) against out of place.
TEST(Kernels, RopeAgreesWithTheReference) {
  struct RopeShape {
    int64_t B, T, H, D, half, pad;
  };
  const RopeShape shapes[] = {{1, 1, 1, 2, 1, 0}, {2, 37, 3, 64, 32, 0}, {3, 20, 2, 80, 16, 5}, {1, 70, 4, 128, 64, 0}};
  const double freqs[] = {1.0, 0.7498942093324559, 1e-4, 3.5e-7, 2.0, 0.01};
  uint64_t seed = 900;
  for (const RopeShape& sh : shapes) {
    const int64_t rows = sh.B * sh.T * sh.H, stride = sh.D + sh.pad;
    const Table x = make_table(rows, sh.D, stride, ++seed);
    std::vector<double> inv(static_cast<size_t>(sh.half));
    for (int64_t i = 0; i < sh.half; ++i) inv[static_cast<size_t>(i)] = freqs[i % 6] / static_cast<double>(1 + i);
    std::vector<int64_t> pos(static_cast<size_t>(sh.B * sh.T));
    uint64_t z = seed;
    for (size_t k = 0; k < pos.size(); ++k) {
      z = z * 6364136223846793005ull + 1442695040888963407ull;
      pos[k] = k % 3 == 0 ? static_cast<int64_t>(k) : static_cast<int64_t>((z >> 33) % (uint64_t{1} << 31));
    }
    pos.back() = (int64_t{1} << 31) - 1;
    for (DType type : {DType::kF32, DType::kBF16, DType::kF16}) {
      for (kn::RopeLayout layout : {kn::RopeLayout::kHalf, kn::RopeLayout::kInterleaved}) {
        for (bool inverse : {false, true}) {
          const size_t esize = tokpos::dtype_size(type);
          const size_t bytes = static_cast<size_t>(rows * stride) * esize;
          const void* xdata = x.view(type).data;
          auto run = [&](const kn::KernelTable& be, int threads, bool in_place) {
            std::vector<uint8_t> out(bytes, 0xA5);
            if (in_place) std::memcpy(out.data(), xdata, bytes);
            std::vector<float> scratch(static_cast<size_t>(threads * 2 * sh.half));
            std::vector<double> turns(static_cast<size_t>(2 * sh.half));  // as the ops layer makes them
            for (int64_t i = 0; i < sh.half; ++i) {
              const auto w = tokpos::detail::rope_turns(inv[static_cast<size_t>(i)]);
              turns[static_cast<size_t>(i)] = w.t0;
              turns[static_cast<size_t>(sh.half + i)] = w.t1;
            }
            kn::RopeApply r;
            r.x = in_place ? static_cast<const void*>(out.data()) : xdata;
            r.xsh = stride;
            r.xst = sh.H * stride;
            r.xsb = sh.T * sh.H * stride;
            r.out = out.data();
            r.osh = r.xsh;
            r.ost = r.xst;
            r.osb = r.xsb;
            r.type = type;
            r.pos = {pos.data(), DType::kI64, sh.T, 1};
            r.inv_freq = inv.data();
            r.half = sh.half;
            r.B = sh.B;
            r.T = sh.T;
            r.H = sh.H;
            r.D = sh.D;
            r.layout = layout;
            r.inverse = inverse;
            r.attention_factor = sh.pad ? 1.25 : 1.0;
            r.scratch = scratch.data();
            r.turns = turns.data();
            kn::Exec ex;
            ex.threads = threads;
            be.apply_rope(r, ex);
            // The rows without their padding (which differs between the runs).
            std::vector<uint8_t> packed(static_cast<size_t>(rows * sh.D) * esize);
            for (int64_t k = 0; k < rows; ++k) {
              std::memcpy(packed.data() + static_cast<size_t>(k * sh.D) * esize,
                          out.data() + static_cast<size_t>(k * stride) * esize, static_cast<size_t>(sh.D) * esize);
            }
            return packed;
          };
          const auto want = run(kn::reference_kernels(), 1, false);
          for (const kn::KernelTable* be : kn::backends()) {
            for (int threads : {1, 3}) {
              for (bool in_place : {false, true}) {
                const auto got = run(*be, threads, in_place);
                EXPECT_TRUE(agrees(*be, want.data(), got.data(), want.size() / esize, type))
                    << be->name << " D " << sh.D << " half " << sh.half << " dtype " << tokpos::dtype_name(type)
                    << " layout " << static_cast<int>(layout) << " inverse " << inverse << " threads " << threads
                    << " in place " << in_place;
              }
            }
          }
        }
      }
    }
  }
}

// The rotation by given cos and sin tables on every back end: both layouts,
// forward and inverse, every dtype, full and partial rotary dims, the
// unrolled head sizes, padded heads, cos rows shared by every b (stride 0),
// several thread counts (with more rows than a decode step), in place.
TEST(Kernels, RopeTablesAgreeWithTheReference) {
  struct TablesShape {
    int64_t B, T, H, D, R, pad;
    bool shared;  // one cos row per t for every b
  };
  const TablesShape shapes[] = {{1, 1, 1, 2, 2, 0, false},   {2, 37, 3, 64, 64, 0, true},
                                {3, 20, 2, 80, 32, 5, false}, {1, 70, 4, 128, 128, 0, false},
                                {2, 9, 3, 12, 6, 1, true}};
  uint64_t seed = 1900;
  for (const TablesShape& sh : shapes) {
    const int64_t rows = sh.B * sh.T * sh.H, stride = sh.D + sh.pad;
    const int64_t cos_rows = (sh.shared ? 1 : sh.B) * sh.T;
    const Table x = make_table(rows, sh.D, stride, ++seed);
    const Table cs = make_table(cos_rows, sh.R, sh.R, ++seed), sn = make_table(cos_rows, sh.R, sh.R, ++seed);
    for (DType type : {DType::kF32, DType::kBF16, DType::kF16}) {
      for (kn::RopeLayout layout : {kn::RopeLayout::kHalf, kn::RopeLayout::kInterleaved}) {
        for (bool inverse : {false, true}) {
          const size_t esize = tokpos::dtype_size(type);
          const size_t bytes = static_cast<size_t>(rows * stride) * esize;
          const void* xdata = x.view(type).data;
          auto run = [&](const kn::KernelTable& be, int threads, bool in_place) {
            std::vector<uint8_t> out(bytes, 0xA5);
            if (in_place) std::memcpy(out.data(), xdata, bytes);
            kn::RopeTables r;
            r.x = in_place ? static_cast<const void*>(out.data()) : xdata;
            r.xsh = stride;
            r.xst = sh.H * stride;
            r.xsb = sh.T * sh.H * stride;
            r.out = out.data();
            r.osh = r.xsh;
            r.ost = r.xst;
            r.osb = r.xsb;
            r.cos = cs.view(type).data;
            r.sin = sn.view(type).data;
            r.cst = r.sst = sh.R;
            r.csb = r.ssb = sh.shared ? 0 : sh.T * sh.R;
            r.type = type;
            r.B = sh.B;
            r.T = sh.T;
            r.H = sh.H;
            r.D = sh.D;
            r.R = sh.R;
            r.layout = layout;
            r.inverse = inverse;
            kn::Exec ex;
            ex.threads = threads;
            be.apply_rope_tables(r, ex);
            std::vector<uint8_t> packed(static_cast<size_t>(rows * sh.D) * esize);
            for (int64_t k = 0; k < rows; ++k) {
              std::memcpy(packed.data() + static_cast<size_t>(k * sh.D) * esize,
                          out.data() + static_cast<size_t>(k * stride) * esize, static_cast<size_t>(sh.D) * esize);
            }
            return packed;
          };
          const auto want = run(kn::reference_kernels(), 1, false);
          for (const kn::KernelTable* be : kn::backends()) {
            for (int threads : {1, 3}) {
              for (bool in_place : {false, true}) {
                const auto got = run(*be, threads, in_place);
                EXPECT_TRUE(agrees(*be, want.data(), got.data(), want.size() / esize, type))
                    << be->name << " D " << sh.D << " R " << sh.R << " dtype " << tokpos::dtype_name(type)
                    << " layout " << static_cast<int>(layout) << " inverse " << inverse << " threads " << threads
                    << " in place " << in_place;
              }
            }
          }
        }
      }
    }
  }
}

}  // namespace

// ---- The reference back end allocates before it writes -------------------------

using tokpos::testing::t_count;
using tokpos::testing::t_fail_at;

namespace {

// kernels.h: a backward kernel makes every allocation before it writes. Fail
// each allocation of the reference's two-gradient scatter in turn: each
// failure leaves both gradients as they were, and once none fails the call
// adds both.
TEST(Kernels, ReferenceBackwardOutOfMemoryLeavesBothGradientsUntouched) {
  const int64_t B = 2, T = 5, D = 3, V = 4, L = T, N = B * T;
  const auto d_out = noise(N * D, 31);
  const auto ids = ids_mod(N, V, 32);
  std::vector<int64_t> pos(N);
  for (int64_t n = 0; n < N; ++n) pos[n] = n % T;
  const kn::RowGroups id_groups = kn::group_rows(ids.data(), N, V), pos_groups = kn::group_rows(pos.data(), N, L);
  const kn::Source source{d_out.data(), T * D, D, B, T, D};
  const auto tok0 = noise(V * D, 33), pos0 = noise(L * D, 34);
  bool completed = false;
  for (long fail_at = 1; fail_at < 1000 && !completed; ++fail_at) {
    std::vector<float> tok = tok0, posg = pos0;
    const kn::GradTarget a = target(tok, D, ids, id_groups, V), b = target(posg, D, pos, pos_groups, L);
    t_count = 0;
    t_fail_at = fail_at;
    try {
      kn::reference_kernels().index_add_rows(a, b, source, kn::Exec{});
      completed = true;
    } catch (const std::bad_alloc&) {
    }
    t_fail_at = 0;
    if (completed) {
      EXPECT_FALSE(bitwise_equal(tok, tok0));
      EXPECT_FALSE(bitwise_equal(posg, pos0));
    } else {
      EXPECT_TRUE(bitwise_equal(tok, tok0)) << "token gradient written before allocation " << fail_at << " failed";
      EXPECT_TRUE(bitwise_equal(posg, pos0)) << "position gradient written before allocation " << fail_at
                                             << " failed";
    }
  }
  EXPECT_TRUE(completed);
}

}  // namespace

// ---- The forward's prefetch distance and huge pages change no bits ----

#include "common/huge_pages.h"
#include "kernels/cpu/cpu_common.h"

namespace {

// For one (B, T): every prefetch distance the forward can choose (none, one
// row, the default, the most rows), forced through set_prefetch_bytes,
// against the reference,
// streamed and not, at 1 and 2 threads, positions from start or from
// position ids, for every table and output type.
void expect_forward_bits_under_every_setting(int64_t B, int64_t T) {
  namespace cpu = tokpos::kernels::cpu;
  const int64_t D = 52, V = 97, L = T + 2, N = B * T;
  const Table tok = make_table(V, D, D, 41), pos = make_table(L, D, D, 42);
  auto ids = ids_mod(N, V, 43);
  ids[5] = V + 3;  // read as unk_id
  const auto pos_ids = ids_mod(N, L, 44);
  const Ids id_view = make_ids(ids, B, T, Layout::kContiguous, DType::kI64, 0);
  const Ids pos_view = make_ids(pos_ids, B, T, Layout::kContiguous, DType::kI64, 0);
  const auto& ref = kn::reference_kernels();
  for (const int64_t prefetch : {int64_t{0}, int64_t{1}, int64_t{-1}, int64_t{1} << 40}) {
    cpu::set_prefetch_bytes(prefetch);
    for (const bool with_pos_ids : {false, true})
      for (const DType te : kFloatTypes)
        for (const DType pe : kFloatTypes)
          for (const DType oe : kFloatTypes) {
            kn::Gather g;
            g.ids = id_view.index;
            g.V = V, g.unk_id = 7;
            g.tok = tok.view(te);
            g.pos = pos.view(pe);
            if (with_pos_ids) g.pos_ids = pos_view.index;
            g.L = L;
            g.start = 1;
            g.B = B, g.T = T, g.D = D;
            const size_t bytes = static_cast<size_t>(N * D) * tokpos::dtype_size(oe);
            Bytes want(bytes, 0, 0x11);
            g.out = {want.data(), oe, T * D, D};
            ref.compose_forward(g, kn::Exec{});
            for (const kn::KernelTable* be : candidates())
              for (const int threads : {1, 2})
                for (const int64_t stream : {kNeverStream, kAlwaysStream}) {
                  Bytes got(bytes, 0, 0x22);
                  g.out.data = got.data();
                  be->compose_forward(g, {.threads = threads, .stream_min_bytes = stream});
                  EXPECT_TRUE(agrees(*be, want.data(), got.data(), static_cast<size_t>(N * D), oe))
                      << "prefetch bytes " << prefetch
                      << ", position ids " << with_pos_ids << ", token " << tokpos::dtype_name(te)
                      << " position " << tokpos::dtype_name(pe) << " out " << tokpos::dtype_name(oe)
                      << ", threads " << threads << " streamed " << (stream == kAlwaysStream)
                      << ", B " << B << " T " << T;
                }
          }
  }
  cpu::set_prefetch_bytes(-1);
}

// More than kDecodeTokens tokens (rows prefetched a distance ahead), and at
// most kDecodeTokens (a decode step: the pages of every row prefetched at
// once, on the calling thread).
TEST(Kernels, ForwardBitsDoNotDependOnPrefetch) {
  static_assert(tokpos::kernels::cpu::kDecodeTokens >= 16);
  expect_forward_bits_under_every_setting(3, 41);
  expect_forward_bits_under_every_setting(2, 5);
  expect_forward_bits_under_every_setting(1, 16);
}

// The library's workers (common/parallel.h) run every chunk once, slot 0 on
// the caller, no slot twice at one time, whatever the thread and chunk
// counts; a part that calls them again runs its chunks itself.
TEST(Kernels, WorkersRunEachChunkOnce) {
  const std::thread::id caller = std::this_thread::get_id();
  for (const int threads : {1, 2, 3, 5, 16})
    for (const int64_t chunks : {int64_t{0}, int64_t{1}, int64_t{2}, int64_t{7}, int64_t{100}})
      for (int round = 0; round < 20; ++round) {
        std::vector<std::atomic<int>> ran(static_cast<size_t>(chunks)), busy(16);
        std::atomic<int> bad_slot{0}, shared_slot{0}, slot0_elsewhere{0};
        tokpos::detail::parallel_chunks(threads, chunks, [&](int64_t c, int slot) {
          if (slot < 0 || slot >= threads) {
            bad_slot.fetch_add(1);
            return;
          }
          if (busy[static_cast<size_t>(slot)].exchange(1) != 0) shared_slot.fetch_add(1);
          if ((slot == 0) != (std::this_thread::get_id() == caller)) slot0_elsewhere.fetch_add(1);
          ran[static_cast<size_t>(c)].fetch_add(1);
          busy[static_cast<size_t>(slot)].store(0);
        });
        for (int64_t c = 0; c < chunks; ++c)
          ASSERT_EQ(ran[static_cast<size_t>(c)].load(), 1) << "threads " << threads << " chunk " << c << " of " << chunks;
        ASSERT_EQ(bad_slot.load(), 0) << threads;
        ASSERT_EQ(shared_slot.load(), 0) << threads;
        ASSERT_EQ(slot0_elsewhere.load(), 0) << threads;
      }
  std::thread::id inner_thread;
  int inner_runs = 0, inner_slot = -1;
  tokpos::detail::parallel_chunks(2, 2, [&](int64_t c, int) {
    if (c != 0) return;
    tokpos::detail::parallel_chunks(2, 3, [&](int64_t, int slot) {  // the workers are this call's: run here
      ++inner_runs;
      inner_slot = std::max(inner_slot, slot);
      inner_thread = std::this_thread::get_id();
    });
    EXPECT_EQ(inner_thread, std::this_thread::get_id());
  });
  EXPECT_EQ(inner_runs, 3);
  EXPECT_EQ(inner_slot, 0);
}

// A worker held up inside its chunk (descheduled, or here waiting) does not
// hold up the rest of the call: the caller takes every chunk not yet taken.
// The held chunk waits until the caller has run all the others (at most 20 s:
// a pool that split the chunks in fixed shares would wait for its held
// worker's share, and the test fails instead of hanging).
TEST(Kernels, CallerTakesTheChunksOfAHeldWorker) {
  const std::thread::id caller = std::this_thread::get_id();
  constexpr int64_t kChunks = 50;
  for (int round = 0; round < 5; ++round) {
    std::atomic<int64_t> by_caller{0}, held{0};
    std::atomic<bool> timed_out{false};
    tokpos::detail::parallel_chunks(2, kChunks, [&](int64_t, int) {
      if (std::this_thread::get_id() == caller) {
        by_caller.fetch_add(1);
        return;
      }
      held.fetch_add(1);
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      while (by_caller.load() + held.load() < kChunks) {
        if (std::chrono::steady_clock::now() > until) {
          timed_out = true;
          break;
        }
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
    });
    EXPECT_FALSE(timed_out.load()) << "round " << round;
    EXPECT_EQ(by_caller.load() + held.load(), kChunks);
    EXPECT_LE(held.load(), 1) << "a held worker takes no further chunk";
  }
}

// A child after fork() has none of its parent's workers: it starts its own.
TEST(Kernels, WorkersAfterFork) {
  std::atomic<int> parent_ran{0};
  tokpos::detail::parallel_chunks(2, 8, [&](int64_t, int) { parent_ran.fetch_add(1); });  // the parent's workers exist
  ASSERT_EQ(parent_ran.load(), 8);
  const pid_t child = fork();
  ASSERT_NE(child, -1);
  if (child == 0) {
    alarm(20);  // a child that waited for its parent's workers would hang: fail instead
    std::atomic<int> ran{0};
    for (int call = 0; call < 3; ++call) tokpos::detail::parallel_chunks(2, 8, [&](int64_t, int) { ran.fetch_add(1); });
    _exit(ran.load() == 24 ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "the child was killed by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST(Kernels, PrefetchDistanceInBytes) {
  namespace cpu = tokpos::kernels::cpu;
  cpu::set_prefetch_bytes(12 << 10);
  EXPECT_EQ(cpu::prefetch_rows_ahead(768 * 4), 4);   // GPT-2 rows, f32
  EXPECT_EQ(cpu::prefetch_rows_ahead(4096 * 4), 1);  // Llama rows: at least one
  EXPECT_EQ(cpu::prefetch_rows_ahead(16), cpu::kMaxPrefetchRows);
  cpu::set_prefetch_bytes(0);
  EXPECT_EQ(cpu::prefetch_rows_ahead(768 * 4), 0);  // no prefetch
  cpu::set_prefetch_bytes(-1);  // back to the default
  if (std::getenv("TOKPOS_PREFETCH_BYTES") == nullptr) {
    EXPECT_EQ(cpu::prefetch_bytes(), 12 << 10);  // the documented default, 12 KiB
  }
}

// Huge-page advice keeps the contents and skips small buffers.
TEST(Kernels, HugePageAdviceKeepsTheContents) {
  std::vector<float> small(1000, 1.5f);
  EXPECT_EQ(tokpos::detail::advise_huge_pages(small.data(), small.size() * sizeof(float)), 0u);
  std::vector<float> big(size_t{6} << 20);  // 24 MiB
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<float>(i % 4099) * 0.25f;
  const size_t advised = tokpos::detail::advise_huge_pages(big.data(), big.size() * sizeof(float));
  EXPECT_LE(advised, big.size() * sizeof(float));
  for (size_t i = 0; i < big.size(); ++i)
    if (big[i] != static_cast<float>(i % 4099) * 0.25f) {
      ADD_FAILURE() << "element " << i << " changed";
      break;
    }
}

}  // namespace
