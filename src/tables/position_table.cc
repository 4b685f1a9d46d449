// Exact position tables. For each frequency pair k the exact angle step
// w_k is known in quad; values at block starts p0 and at offsets j < kBlock
// come from ExactPair (accurate to ~3e-15), and every other entry from one
// angle addition, sin((p0+j)w) = sin(p0 w) cos(j w) + cos(p0 w) sin(j w).
// Each result is then rounded with a guard: if it is too close to a rounding
// midpoint to be sure, that entry is recomputed in quad. So every entry is the
// exact value correctly rounded, whatever the block split or thread count.
#include "tokpos/position_table.h"

#include <quadmath.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "common/check.h"
#include "common/parallel.h"
#include "tables/exact_angle.h"

namespace tokpos {
namespace {

using detail::ExactPair;
using detail::Format;
using detail::quad;

constexpr int64_t kBlock = 64;  // rows per block; the offset table is kBlock x pairs

// Where pair k's sin and cos go, and the pair's exact frequency.
struct LayoutPlan {
  std::vector<ExactPair> pairs;
  std::vector<int64_t> sin_col, cos_col;  // -1: that half of the pair is absent
  std::vector<int64_t> zero_cols;
  // The same map as two strided runs: sin of pair k at sin_first + k*stride,
  // cos of pair k (k < n_cos) at cos_first + k*stride.
  int64_t sin_first = 0, cos_first = 0, stride = 1, n_cos = 0;
};

void check_options(const char* where, int64_t D, const TableOptions& o) {
  detail::check_at_least(where, "D", D, 1);
  detail::check_positive_finite(where, "base", o.base);
  if (o.layout == Layout::kT2T) detail::check_positive_finite(where, "min_timescale", o.min_timescale);
  if (o.padding_idx && o.layout != Layout::kFairseq) {
    detail::fail(Status::kInvalidArgument, where, "padding_idx is only part of the fairseq layout, not ",
                 layout_name(o.layout));
  }
  if (o.padding_idx && *o.padding_idx < 0) {
    detail::fail(Status::kInvalidArgument, where, "padding_idx = ", *o.padding_idx, " must be >= 0");
  }
  if (static_cast<int>(o.layout) < 0 || static_cast<int>(o.layout) > static_cast<int>(Layout::kGgml)) {
    detail::fail(Status::kInvalidArgument, where, "layout ", static_cast<int>(o.layout), " is unknown");
  }
}

// The exact frequency of pair k, in quad: scale * ratio^(-num/den).
quad exact_frequency(int64_t k, int64_t D, const TableOptions& o) {
  const quad base = o.base;
  switch (o.layout) {
    case Layout::kInterleaved:
    case Layout::kHalves: return powq(base, -static_cast<quad>(2 * k) / static_cast<quad>(D));
    case Layout::kFairseq: {
      // fairseq divides by half_dim - 1, which is 0 at D = 2, 3 (there it
      // produces NaN); k = 0 is the only pair then, and base^0 = 1.
      const int64_t den = D / 2 - 1;
      return k == 0 ? quad(1) : powq(base, -static_cast<quad>(k) / static_cast<quad>(den));
    }
    case Layout::kT2T: {
      const int64_t den = std::max<int64_t>(D / 2 - 1, 1);
      const quad min_ts = o.min_timescale;
      return min_ts * powq(base / min_ts, -static_cast<quad>(k) / static_cast<quad>(den));
    }
    case Layout::kGgml: return powq(base, -static_cast<quad>(k) / static_cast<quad>(D / 2));
  }
  return 0;
}

// How far the contract reaches: the exact frequency is known to about
// (4 + |ln(w / scale)|) * 2^-113 relative (the rounding of the base, the
// exponent and powq, amplified by the exponent's log), so the angle p * w of
// every entry is known to p * w * (4 + |ln(w / scale)|) * 2^-113 radians.
// That must stay below 2^-55 rad (under 1% of kSinCosError) for the rounding
// guard to be sound: p * w * (4 + |ln(w / scale)|) <= 2^58. Every accepted
// base (> 1) keeps w <= 1 and passes up to p = 2^52; a base below 1, or a
// t2t min_timescale far from max_timescale, can give frequencies whose angles
// no quad (or double: past 1e308 they overflow to NaN) computation knows.
// Those are refused, naming the arguments, rather than written as NaN or noise.
constexpr double kMaxAngleTimesLog = 0x1p58;

std::string quad_text(quad v) {
  char buf[64];
  quadmath_snprintf(buf, sizeof buf, "%.4Qg", v);
  return buf;
}

// pair k's frequency w (exact_frequency) and the largest position it is
// computed at (at least 1: frequency() and position 0 must fit too).
void check_angle(const char* where, int64_t k, int64_t D, const TableOptions& o, quad w, int64_t max_pos) {
  const bool t2t = o.layout == Layout::kT2T;
  const quad scale = t2t ? quad(o.min_timescale) : quad(1);
  const quad p = static_cast<quad>(std::max<int64_t>(max_pos, 1));
  const quad measure = p * w * (4 + fabsq(logq(w / scale)));
  if (!(measure <= quad(kMaxAngleTimesLog))) {
    detail::fail(Status::kInvalidArgument, where, "base = ", quad_text(quad(o.base)),
                 t2t ? std::string(" with min_timescale = ") + quad_text(quad(o.min_timescale)) : std::string(),
                 " gives pair ", k, " of ", layout_name(o.layout), " at D = ", D, " the frequency ", quad_text(w),
                 " rad per position, too fast to compute its angle at position ", static_cast<int64_t>(p),
                 " exactly: p * w * (4 + |ln(w", t2t ? " / min_timescale" : "", ")|) = ", quad_text(measure),
                 " exceeds the limit 2^58 = ", quad_text(quad(kMaxAngleTimesLog)),
                 t2t ? " (bring base and min_timescale closer together)" : " (use a base closer to 1 or above it)");
  }
}

// What column i of a D-wide table holds: sin or cos of pair k, or zero.
// O(1), the single definition of every layout's column order.
struct ColumnRole {
  int64_t pair = -1;  // -1: a zero column
  bool is_sin = false;
};
ColumnRole column_role(Layout layout, int64_t D, int64_t i) {
  const int64_t half = D / 2, sins = half + D % 2;
  switch (layout) {
    case Layout::kInterleaved: return {i / 2, i % 2 == 0};
    case Layout::kHalves: return i < sins ? ColumnRole{i, true} : ColumnRole{i - sins, false};
    case Layout::kFairseq:
    case Layout::kT2T:
      if (i >= 2 * half) return {};
      return i < half ? ColumnRole{i, true} : ColumnRole{i - half, false};
    case Layout::kGgml:
      if (i >= 2 * half) return {};
      return i < half ? ColumnRole{i, false} : ColumnRole{i - half, true};
  }
  return {};
}

// The column map alone; make_plan adds the pairs' exact frequencies.
LayoutPlan make_columns(int64_t D, const TableOptions& o) {
  LayoutPlan plan;
  const int64_t n = num_frequency_pairs(o.layout, D);
  plan.sin_col.assign(static_cast<size_t>(n), -1);
  plan.cos_col.assign(static_cast<size_t>(n), -1);
  for (int64_t i = 0; i < D; ++i) {
    const ColumnRole r = column_role(o.layout, D, i);
    if (r.pair < 0) {
      plan.zero_cols.push_back(i);
    } else {
      (r.is_sin ? plan.sin_col : plan.cos_col)[r.pair] = i;
    }
  }
  plan.n_cos = n;
  while (plan.n_cos > 0 && plan.cos_col[plan.n_cos - 1] < 0) --plan.n_cos;
  if (n > 0) {
    plan.sin_first = plan.sin_col[0];
    plan.cos_first = plan.n_cos > 0 ? plan.cos_col[0] : 0;
    plan.stride = o.layout == Layout::kInterleaved ? 2 : 1;
  }
  return plan;
}

// max_pos: the last position the table holds (check_angle).
LayoutPlan make_plan(const char* where, int64_t D, const TableOptions& o, int64_t max_pos) {
  LayoutPlan plan = make_columns(D, o);
  plan.pairs.resize(plan.sin_col.size());
  for (size_t k = 0; k < plan.pairs.size(); ++k) {
    const quad w = exact_frequency(static_cast<int64_t>(k), D, o);
    check_angle(where, static_cast<int64_t>(k), D, o, w, max_pos);
    plan.pairs[k] = ExactPair(w);
  }
  return plan;
}

// Stores one value: float bits or the top half of bf16/f16.
template <DType T>
struct Store;
template <>
struct Store<DType::kF32> {
  static constexpr Format kFormat = detail::kF32;
  using Elem = float;
  static float encode(double rounded) { return static_cast<float>(rounded); }  // exact
};
template <>
struct Store<DType::kBF16> {
  static constexpr Format kFormat = detail::kBF16;
  using Elem = uint16_t;
  static uint16_t encode(double rounded) {
    const float f = static_cast<float>(rounded);  // exact: 8 significant bits
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    return static_cast<uint16_t>(u >> 16);
  }
};
template <>
struct Store<DType::kF16> {
  static constexpr Format kFormat = detail::kF16;
  using Elem = uint16_t;
  static uint16_t encode(double rounded) {
    // rounded is exactly representable in binary16 (|x| <= 1 here).
    const uint16_t sign = std::signbit(rounded) ? 0x8000 : 0;
    const double a = std::abs(rounded);
    if (a == 0.0) return sign;
    int e = 0;
    const double m = std::frexp(a, &e);  // a = m 2^e, m in [0.5, 1)
    if (e - 1 < -14) {                   // subnormal: a = frac * 2^-24
      return static_cast<uint16_t>(sign | static_cast<uint16_t>(std::ldexp(a, 24)));
    }
    const auto exp_bits = static_cast<uint16_t>((e - 1 + 15) << 10);
    const auto mant = static_cast<uint16_t>(std::ldexp(m, 11) - 1024.0);
    return static_cast<uint16_t>(sign | exp_bits | mant);
  }
};

// Run-time dispatch (GCC ifunc): baseline x86-64 cannot vectorise these
// loops (no 64-bit compares before SSE4.2). Every clone does the same IEEE
// operations in the same order, so the results are identical on all of them.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(TOKPOS_NO_TARGET_CLONES)
#define TOKPOS_CLONES __attribute__((target_clones("avx2", "sse4.2", "default")))
#else
#define TOKPOS_CLONES
#endif

// float32 rows: the same with the hardware rounding, into floats.
TOKPOS_CLONES
int64_t add_and_round_f32(float* __restrict rs, float* __restrict rc, int64_t* __restrict bad_s,
                          int64_t* __restrict bad_c, const double* __restrict s0, const double* __restrict c0,
                          const double* __restrict sj, const double* __restrict cj, int64_t n) {
  int64_t any_bad = 0;
  for (int64_t k = 0; k < n; ++k) {
    const double ys = s0[k] * cj[k] + c0[k] * sj[k];
    const double yc = c0[k] * cj[k] - s0[k] * sj[k];
    int64_t bs = 0, bc = 0;
    rs[k] = detail::round_f32_guarded_bf(ys, detail::kAngleAdditionError, &bs);
    rc[k] = detail::round_f32_guarded_bf(yc, detail::kAngleAdditionError, &bc);
    bad_s[k] = bs;
    bad_c[k] = bc;
    any_bad |= bs | bc;
  }
  return any_bad;
}

// For every pair k: the angle addition (p0 + j) w = p0 w + j w, then guarded
// rounding. Kept apart from the threaded loop, on restrict pointers, so the
// compiler vectorises it. Returns nonzero if any value is undecided.
TOKPOS_CLONES
int64_t add_and_round(double* __restrict rs, double* __restrict rc, int64_t* __restrict bad_s,
                      int64_t* __restrict bad_c, const double* __restrict s0, const double* __restrict c0,
                      const double* __restrict sj, const double* __restrict cj, int64_t n, Format fmt) {
  int64_t any_bad = 0;
  for (int64_t k = 0; k < n; ++k) {
    const double ys = s0[k] * cj[k] + c0[k] * sj[k];
    const double yc = c0[k] * cj[k] - s0[k] * sj[k];
    int64_t bs = 0, bc = 0;
    rs[k] = detail::round_guarded_bf(ys, detail::kAngleAdditionError, fmt, &bs);
    rc[k] = detail::round_guarded_bf(yc, detail::kAngleAdditionError, fmt, &bc);
    bad_s[k] = bs;
    bad_c[k] = bc;
    any_bad |= bs | bc;
  }
  return any_bad;
}

template <DType T>
typename Store<T>::Elem round_in_quad(const ExactPair& pair, int64_t p, bool is_sin) {
  quad s, c;
  pair.sincos_quad(p, &s, &c);
  return Store<T>::encode(detail::round_quad(is_sin ? s : c, Store<T>::kFormat));
}

template <DType T>
void generate(void* out_v, int64_t L, int64_t D, int64_t start, const TableOptions& o) {
  using Elem = typename Store<T>::Elem;
  constexpr Format kFmt = Store<T>::kFormat;
  Elem* out = static_cast<Elem*>(out_v);
  const LayoutPlan plan = make_plan("position_table", D, o, start + L - 1);
  const auto n = static_cast<int64_t>(plan.pairs.size());

  // (sin, cos)(j w_k) for the offsets j inside a block.
  const int64_t block = std::min(kBlock, L);
  auto off_s = detail::make_buffer<double>("position_table", "offset table", block * n);
  auto off_c = detail::make_buffer<double>("position_table", "offset table", block * n);
  for (int64_t j = 0; j < block; ++j)
    for (int64_t k = 0; k < n; ++k) plan.pairs[k].sincos(j, &off_s[j * n + k], &off_c[j * n + k]);

  const int64_t blocks = (L + kBlock - 1) / kBlock;
  const int nt = std::min<int>(detail::threads_for(L * D * 8), static_cast<int>(blocks));
  // Per thread: block-start values and one row of rounded results.
  auto scratch = detail::make_buffer<double>("position_table", "scratch", nt * n * 4);
  auto flags = detail::make_buffer<int64_t>("position_table", "scratch", nt * n * 2);

  detail::parallel_ranges(nt, blocks, [&](int64_t b0, int64_t b1, int slot) {
    double* s0 = scratch.data() + slot * n * 4;
    double* c0 = s0 + n;
    double* rs = c0 + n;
    double* rc = rs + n;
    int64_t* bad_s = flags.data() + slot * n * 2;
    int64_t* bad_c = bad_s + n;
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t p0 = start + b * kBlock;
      const bool fast = p0 + kBlock < detail::kMaxFastPosition;
      for (int64_t k = 0; k < n; ++k) {
        if (fast) {
          plan.pairs[k].sincos(p0, &s0[k], &c0[k]);
        } else {  // far positions: block starts in quad, rounded to double
          quad s, c;
          plan.pairs[k].sincos_quad(p0, &s, &c);
          s0[k] = static_cast<double>(s);
          c0[k] = static_cast<double>(c);
        }
      }
      const int64_t rows = std::min(kBlock, L - b * kBlock);
      for (int64_t j = 0; j < rows; ++j) {
        const int64_t p = p0 + j;
        Elem* row = out + (b * kBlock + j) * D;
        const double* sj = off_s.data() + j * n;
        const double* cj = off_c.data() + j * n;
        int64_t any_bad;
        if constexpr (T == DType::kF32) {
          float* fs = reinterpret_cast<float*>(rs);
          float* fc = reinterpret_cast<float*>(rc);
          any_bad = add_and_round_f32(fs, fc, bad_s, bad_c, s0, c0, sj, cj, n);
          const int64_t st = plan.stride;
          for (int64_t k = 0; k < n; ++k) row[plan.sin_first + k * st] = fs[k];
          for (int64_t k = 0; k < plan.n_cos; ++k) row[plan.cos_first + k * st] = fc[k];
        } else {
          any_bad = add_and_round(rs, rc, bad_s, bad_c, s0, c0, sj, cj, n, kFmt);
          const int64_t st = plan.stride;
          for (int64_t k = 0; k < n; ++k) row[plan.sin_first + k * st] = Store<T>::encode(rs[k]);
          for (int64_t k = 0; k < plan.n_cos; ++k) row[plan.cos_first + k * st] = Store<T>::encode(rc[k]);
        }
        if (any_bad) {  // rare: a value too close to a rounding midpoint, or near zero
          for (int64_t k = 0; k < n; ++k) {
            if (bad_s[k]) row[plan.sin_col[k]] = round_in_quad<T>(plan.pairs[k], p, true);
            if (bad_c[k] && k < plan.n_cos) row[plan.cos_col[k]] = round_in_quad<T>(plan.pairs[k], p, false);
          }
        }
        for (int64_t col : plan.zero_cols) row[col] = Elem{};
        if (o.padding_idx && p == *o.padding_idx) std::fill(row, row + D, Elem{});
      }
    }
  });
}

}  // namespace

const char* layout_name(Layout layout) {
  switch (layout) {
    case Layout::kInterleaved: return "interleaved";
    case Layout::kHalves: return "halves";
    case Layout::kFairseq: return "fairseq";
    case Layout::kT2T: return "t2t";
    case Layout::kGgml: return "ggml";
  }
  return "unknown";
}

std::span<const Layout> all_layouts() {
  static constexpr Layout kAll[] = {Layout::kInterleaved, Layout::kHalves, Layout::kFairseq, Layout::kT2T,
                                    Layout::kGgml};
  return kAll;
}

std::optional<Layout> parse_layout(std::string_view name) {
  for (Layout l : all_layouts()) {
    if (name == layout_name(l)) return l;
  }
  return std::nullopt;
}

int64_t num_frequency_pairs(Layout layout, int64_t D) {
  return (layout == Layout::kInterleaved || layout == Layout::kHalves) ? D / 2 + D % 2 : D / 2;
}

std::vector<PairColumns> pair_columns(Layout layout, int64_t D) {
  detail::check_at_least("pair_columns", "D", D, 1);
  const LayoutPlan plan = make_columns(D, {.layout = layout});
  std::vector<PairColumns> out;
  for (size_t k = 0; k < plan.sin_col.size(); ++k) {
    if (plan.sin_col[k] >= 0 && plan.cos_col[k] >= 0) out.push_back({plan.sin_col[k], plan.cos_col[k]});
  }
  return out;
}

double frequency(int64_t k, int64_t D, const TableOptions& o) {
  constexpr const char* kWhere = "frequency";
  check_options(kWhere, D, o);
  const int64_t n = num_frequency_pairs(o.layout, D);
  if (k < 0 || k >= n) {
    detail::fail(Status::kInvalidArgument, kWhere, "pair ", k, " is outside [0, ", n, ") for ",
                 layout_name(o.layout), " at D = ", D);
  }
  const quad w = exact_frequency(k, D, o);
  check_angle(kWhere, k, D, o, w, 1);
  return static_cast<double>(w);
}

void position_table(void* out, DType dtype, int64_t L, int64_t D, int64_t start, const TableOptions& o) {
  constexpr const char* kWhere = "position_table";
  check_options(kWhere, D, o);
  detail::check_at_least(kWhere, "L", L, 1);
  detail::check_at_least(kWhere, "start", start, 0);
  detail::checked_mul(kWhere, "L*D", L, D);
  if (start > INT64_MAX - L)
    detail::fail(Status::kSizeOverflow, kWhere, "start + L = ", start, " + ", L, " overflows");
  detail::check_not_null(kWhere, "out", out);
  switch (dtype) {
    case DType::kF32: return generate<DType::kF32>(out, L, D, start, o);
    case DType::kBF16: return generate<DType::kBF16>(out, L, D, start, o);
    case DType::kF16: return generate<DType::kF16>(out, L, D, start, o);
    case DType::kI32:
    case DType::kI64:
    case DType::kF64: break;
  }
  detail::fail(Status::kInvalidArgument, kWhere, "dtype ", static_cast<int>(dtype),
               " is not a table type: expected f32 (0), bf16 (1) or f16 (2)");
}

std::vector<float> position_table(int64_t L, int64_t D, int64_t start, const TableOptions& o) {
  constexpr const char* kWhere = "position_table";
  detail::check_at_least(kWhere, "L", L, 1);
  detail::check_at_least(kWhere, "D", D, 1);
  auto out = detail::make_buffer<float>(kWhere, "table", detail::checked_mul(kWhere, "L*D", L, D));
  position_table(out.data(), DType::kF32, L, D, start, o);
  return out;
}

float position_value(int64_t pos, int64_t i, int64_t D, const TableOptions& o) {
  constexpr const char* kWhere = "position_value";
  check_options(kWhere, D, o);
  detail::check_at_least(kWhere, "pos", pos, 0);
  if (i < 0 || i >= D)
    detail::fail(Status::kInvalidArgument, kWhere, "feature ", i, " is outside [0, ", D, ")");
  if (o.padding_idx && pos == *o.padding_idx) return 0.0f;
  // Only the pair that owns column i needs its frequency: O(1) in D.
  const ColumnRole role = column_role(o.layout, D, i);
  if (role.pair < 0) return 0.0f;  // a zero column
  const quad w = exact_frequency(role.pair, D, o);
  check_angle(kWhere, role.pair, D, o, w, pos);
  const ExactPair pair(w);
  double s = 0, c = 0;
  if (pos < detail::kMaxFastPosition) pair.sincos(pos, &s, &c);
  double r;
  if (pos >= detail::kMaxFastPosition ||
      !detail::round_guarded(role.is_sin ? s : c, detail::kSinCosError, detail::kF32, &r)) {
    quad qs, qc;
    pair.sincos_quad(pos, &qs, &qc);
    r = detail::round_quad(role.is_sin ? qs : qc, detail::kF32);
  }
  return static_cast<float>(r);
}

double sinusoidal_frequency(int64_t i, int64_t D, double base) {
  constexpr const char* kWhere = "sinusoidal_frequency";
  detail::check_at_least(kWhere, "D", D, 1);
  // A feature, not a pair: -1 / 2 and the lone sin of odd D would name pair 0 and the last pair.
  if (i < 0 || i >= D)
    detail::fail(Status::kInvalidArgument, kWhere, "feature ", i, " is outside [0, ", D, ")");
  return frequency(i / 2, D, {.layout = Layout::kInterleaved, .base = base});
}

void sinusoidal_table(std::span<float> out, int64_t L, int64_t D, double base, int64_t start) {
  constexpr const char* kWhere = "sinusoidal_table";
  detail::check_at_least(kWhere, "L", L, 1);  // so that L*D names a size, not an overflow
  detail::check_at_least(kWhere, "D", D, 1);
  detail::check_size(kWhere, "out", out.size(), detail::checked_mul(kWhere, "L*D", L, D));
  position_table(out.data(), DType::kF32, L, D, start, {.layout = Layout::kInterleaved, .base = base});
}

void convert_layout(std::span<float> out, std::span<const float> in, int64_t L, int64_t D, Layout from,
                    Layout to) {
  constexpr const char* kWhere = "convert_layout";
  detail::check_at_least(kWhere, "L", L, 1);
  detail::check_at_least(kWhere, "D", D, 1);
  const int64_t n = detail::checked_mul(kWhere, "L*D", L, D);
  detail::check_size(kWhere, "in", in.size(), n);
  detail::check_size(kWhere, "out", out.size(), n);
  auto convertible = [](Layout l) { return l == Layout::kInterleaved || l == Layout::kHalves; };
  if (!convertible(from) || !convertible(to)) {
    detail::fail(Status::kInvalidArgument, kWhere, "can convert only between interleaved and halves, not ",
                 layout_name(from), " -> ", layout_name(to));
  }
  if (in.data() < out.data() + out.size() && out.data() < in.data() + in.size()) {
    detail::fail(Status::kInvalidArgument, kWhere, "out and in overlap");
  }
  const int64_t ceil_half = (D + 1) / 2;
  // halves column of interleaved column i
  auto halves_col = [&](int64_t i) { return i % 2 == 0 ? i / 2 : ceil_half + i / 2; };
  for (int64_t r = 0; r < L; ++r) {
    const float* src = in.data() + r * D;
    float* dst = out.data() + r * D;
    for (int64_t i = 0; i < D; ++i) {
      if (from == to) {
        dst[i] = src[i];
      } else if (from == Layout::kInterleaved) {
        dst[halves_col(i)] = src[i];
      } else {
        dst[i] = src[halves_col(i)];
      }
    }
  }
}

}  // namespace tokpos
