// Position ids and ALiBi (tokpos/positions.h). Each function checks its
// tensors (ops/tensor.h), reads and checks every value, computes the whole
// result in int64 (or the biases' positions) and only then writes, so an
// error leaves the output untouched. Each reads every input value exactly
// once: either in the one pass that also computes (the mask, the ids, the
// position ids), whose writes are placed by loop counters alone, or into a
// copy (read_once) that is then checked and used. Another thread changing an
// input during the call can make the result garbage, never an access outside
// the buffers.
#include "tokpos/positions.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "common/check.h"
#include "common/convert.h"
#include "ops/index.h"
#include "ops/tensor.h"
#include "tokpos/error.h"

namespace tokpos {
namespace {

using detail::fail;
using ops::detail::check_no_overlap;
using ops::detail::check_tensor;
using ops::detail::Role;
using ops::detail::View;

// Element (i) of a 1-D index view, or (r, c) of a 2-D one.
int64_t at1(const View& v, int64_t i) { return ops::detail::index_of(v).at(0, i); }
int64_t at2(const View& v, int64_t r, int64_t c) { return ops::detail::index_of(v).at(r, c); }

// The elements of a 1-D index view, each read once: the copy is what the
// caller checks and uses, never the view again.
std::vector<int64_t> read_once(const View& v) {
  std::vector<int64_t> r(static_cast<size_t>(v.shape[0]));
  for (int64_t i = 0; i < v.shape[0]; ++i) r[static_cast<size_t>(i)] = at1(v, i);
  return r;
}

// Writes values (row-major over out's shape) into the index view out, after
// checking that each fits out's dtype.
void write_index(const char* where, const View& out, const std::vector<int64_t>& values) {
  const int64_t cols = out.ndim == 2 ? out.shape[1] : out.shape[0];
  if (out.dtype == DType::kI32) {
    for (size_t n = 0; n < values.size(); ++n) {
      const int64_t x = values[n];
      if (x < std::numeric_limits<int32_t>::min() || x > std::numeric_limits<int32_t>::max()) {
        fail(Status::kInvalidArgument, where, out.name, " is int32 and value ", x, " at index ", n,
             " does not fit it; use int64");
      }
    }
  }
  const auto esize = static_cast<int64_t>(out.dtype == DType::kI32 ? 4 : 8);
  for (size_t n = 0; n < values.size(); ++n) {
    const int64_t i = static_cast<int64_t>(n);
    const int64_t off = out.ndim == 2 ? (i / cols) * out.strides[0] + (i % cols) * out.strides[1]
                                      : i * out.strides[0];
    char* p = out.data + off * esize;
    if (out.dtype == DType::kI32) {
      const auto x = static_cast<int32_t>(values[n]);
      std::memcpy(p, &x, sizeof x);
    } else {
      std::memcpy(p, &values[n], sizeof values[n]);
    }
  }
}

// An index output's elements must not share memory (a stride of 0, or rows
// that overlap), or the result would depend on the order of the writes.
void check_distinct(const char* where, const View& out) {
  if (out.numel == 0) return;
  int order[2] = {0, 1};
  if (out.ndim == 2 && out.strides[1] > out.strides[0]) std::swap(order[0], order[1]);
  int64_t covered = 1;
  for (int k = out.ndim - 1; k >= 0; --k) {
    const int i = out.ndim == 2 ? order[k] : 0;
    if (out.shape[i] <= 1) continue;
    if (out.strides[i] < covered) {
      fail(Status::kInvalidArgument, where, out.name, " strides make its elements overlap (dimension ", i,
           ": size ", out.shape[i], ", stride ", out.strides[i], "); an output must not overlap itself");
    }
    covered = out.strides[i] * out.shape[i];
  }
}

int64_t add(const char* where, const char* what, int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) fail(Status::kSizeOverflow, where, what, " = ", a, " + ", b, " overflows int64");
  return r;
}

// Row b of the (B, S) mask, columns [0, S), as cumsum - 1 with pads at pad_value; the
// last T columns go to row b of out.
void mask_rule(const char* where, int64_t B, int64_t S, int64_t T, const auto& mask_at, int64_t* out,
               int64_t pad_value) {
  for (int64_t b = 0; b < B; ++b) {
    int64_t sum = 0;
    for (int64_t s = 0; s < S; ++s) {
      const int64_t m = mask_at(b, s);
      if (m != 0 && m != 1) {
        fail(Status::kInvalidArgument, where, "attention_mask value ", m, " at (b=", b, ", s=", s,
             ") is not 0 or 1");
      }
      sum += m;
      if (s >= S - T) out[b * T + (s - (S - T))] = m == 0 ? pad_value : sum - 1;
    }
  }
}

// double -> float rounded toward zero, with the last bit set when inexact
// (round to odd): rounding that float to bf16 or f16 (8 and 11 bits, well
// under float's 24 - 2) then gives double -> bf16/f16 correctly rounded.
float to_odd_float(double x) {
  float f = static_cast<float>(x);
  if (std::isnan(x) || std::isinf(x)) return f;
  if (std::fabs(static_cast<double>(f)) > std::fabs(x)) f = std::nextafter(f, 0.0f);
  if (static_cast<double>(f) != x) f = std::bit_cast<float>(std::bit_cast<uint32_t>(f) | 1u);
  return f;
}

template <typename T>
void store(char* p, double x) {
  if constexpr (std::is_same_v<T, float>) {
    const auto f = static_cast<float>(x);
    std::memcpy(p, &f, sizeof f);
  } else {
    const T h = std::is_same_v<T, fp::bf16_t> ? T{fp::to_bf16(to_odd_float(x)).bits}
                                                : T{fp::to_f16(to_odd_float(x)).bits};
    std::memcpy(p, &h.bits, sizeof h.bits);
  }
}

template <typename T>
void fill_bias(std::span<const double> slopes, const std::vector<int64_t>& q, const std::vector<int64_t>& k,
               AlibiMode mode, const View& out) {
  const int64_t H = static_cast<int64_t>(slopes.size());
  const auto Tq = static_cast<int64_t>(q.size()), Tk = static_cast<int64_t>(k.size());
  constexpr int64_t esize = sizeof(T) == 4 ? 4 : 2;
  const double neg_inf = -std::numeric_limits<double>::infinity();
  for (int64_t h = 0; h < H; ++h) {
    const double m = slopes[static_cast<size_t>(h)];
    for (int64_t i = 0; i < Tq; ++i) {
      char* row = out.data + (h * out.strides[0] + i * out.strides[1]) * esize;
      for (int64_t j = 0; j < Tk; ++j) {
        // Positions are below 2^63, and their difference is exact in double
        // up to 2^53 (far past any context length).
        const double d = static_cast<double>(k[static_cast<size_t>(j)]) - static_cast<double>(q[static_cast<size_t>(i)]);
        double v = 0;
        if (mode == AlibiMode::kCausal) {
          v = k[static_cast<size_t>(j)] <= q[static_cast<size_t>(i)] ? m * d : neg_inf;
        } else {
          v = -m * std::fabs(d);
        }
        store<T>(row + j * out.strides[2] * esize, v);
      }
    }
  }
}

// The paper's get_slopes_power_of_2(n)[i] with 8 generalised to max_bias.
double power_of_2_slope(int64_t n, int64_t i, double max_bias) {
  const double start = std::pow(2.0, -max_bias / static_cast<double>(n));
  return start * std::pow(start, static_cast<double>(i));
}

}  // namespace

void position_ids_from_mask(const DLTensor* mask, const DLTensor* out) {
  position_ids_from_mask(mask, out, 1);
}

void position_ids_from_mask(const DLTensor* mask, const DLTensor* out, int64_t pad_value) {
  constexpr const char* kWhere = "position_ids_from_mask";
  const View m = check_tensor(kWhere, "attention_mask", mask, Role::kIndex, {2});
  const View o = check_tensor(kWhere, "out", out, Role::kIndex, {2});
  check_distinct(kWhere, o);
  if (o.shape[0] != m.shape[0]) {
    fail(Status::kShapeMismatch, kWhere, "out has ", o.shape[0], " rows, attention_mask has ", m.shape[0]);
  }
  if (o.shape[1] > m.shape[1]) {
    fail(Status::kInvalidArgument, kWhere, "out has ", o.shape[1], " columns (new tokens), more than the ",
         m.shape[1], " of attention_mask");
  }
  check_no_overlap(kWhere, o, m);
  std::vector<int64_t> values(static_cast<size_t>(o.numel));
  mask_rule(kWhere, m.shape[0], m.shape[1], o.shape[1], [&](int64_t b, int64_t s) { return at2(m, b, s); },
            values.data(), pad_value);
  write_index(kWhere, o, values);
}

std::vector<int64_t> position_ids_from_mask(std::span<const int64_t> mask, int64_t B, int64_t S, int64_t T) {
  constexpr const char* kWhere = "position_ids_from_mask";
  detail::check_at_least(kWhere, "B", B, 0);
  detail::check_at_least(kWhere, "S", S, 0);
  detail::check_at_least(kWhere, "T", T, 0);
  if (T > S) fail(Status::kInvalidArgument, kWhere, "T = ", T, " new tokens must be <= S = ", S, " (mask columns)");
  detail::check_size(kWhere, "attention_mask", mask.size(), detail::checked_mul(kWhere, "B*S", B, S));
  std::vector<int64_t> out(static_cast<size_t>(B * T));
  mask_rule(kWhere, B, S, T, [&](int64_t b, int64_t s) { return mask[static_cast<size_t>(b * S + s)]; },
            out.data(), 1);
  return out;
}

void roberta_position_ids(const DLTensor* ids, int64_t padding_idx, int64_t past_length, const DLTensor* out) {
  constexpr const char* kWhere = "roberta_position_ids";
  detail::check_at_least(kWhere, "padding_idx", padding_idx, 0);
  detail::check_at_least(kWhere, "past_length", past_length, 0);
  const View x = check_tensor(kWhere, "input_ids", ids, Role::kIndex, {1, 2});
  const View o = check_tensor(kWhere, "out", out, Role::kIndex, {1, 2});
  check_distinct(kWhere, o);
  if (o.ndim != x.ndim || o.shape[0] != x.shape[0] || (x.ndim == 2 && o.shape[1] != x.shape[1])) {
    fail(Status::kShapeMismatch, kWhere, "out must have the shape of input_ids");
  }
  check_no_overlap(kWhere, o, x);
  const int64_t rows = x.ndim == 2 ? x.shape[0] : 1;
  const int64_t cols = x.ndim == 2 ? x.shape[1] : x.shape[0];
  std::vector<int64_t> values(static_cast<size_t>(x.numel));
  for (int64_t r = 0; r < rows; ++r) {
    int64_t count = 0;
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t id = x.ndim == 2 ? at2(x, r, c) : at1(x, c);
      const bool real = id != padding_idx;
      count += real ? 1 : 0;
      values[static_cast<size_t>(r * cols + c)] =
          real ? add(kWhere, "position", add(kWhere, "position", count, past_length), padding_idx) : padding_idx;
    }
  }
  write_index(kWhere, o, values);
}

void packed_position_ids(const DLTensor* cu_seqlens, int64_t start, const DLTensor* out) {
  constexpr const char* kWhere = "packed_position_ids";
  detail::check_at_least(kWhere, "start", start, 0);
  const View cu = check_tensor(kWhere, "cu_seqlens", cu_seqlens, Role::kIndex, {1});
  const View o = check_tensor(kWhere, "out", out, Role::kIndex, {1});
  check_distinct(kWhere, o);
  if (cu.shape[0] < 1) fail(Status::kInvalidArgument, kWhere, "cu_seqlens is empty; it needs at least [0]");
  check_no_overlap(kWhere, o, cu);
  const std::vector<int64_t> c = read_once(cu);  // checked and used: the boundaries index values
  if (c[0] != 0) fail(Status::kInvalidArgument, kWhere, "cu_seqlens[0] = ", c[0], " must be 0");
  for (size_t d = 1; d < c.size(); ++d) {
    if (c[d] < c[d - 1]) {
      fail(Status::kInvalidArgument, kWhere, "cu_seqlens decreases at index ", d, ": cu_seqlens[", d - 1,
           "] = ", c[d - 1], " > cu_seqlens[", d, "] = ", c[d]);
    }
  }
  const int64_t N = c.back();
  if (o.shape[0] != N) {
    fail(Status::kShapeMismatch, kWhere, "out has ", o.shape[0], " elements; cu_seqlens ends at N = ", N);
  }
  std::vector<int64_t> values(static_cast<size_t>(N));
  for (size_t d = 0; d + 1 < c.size(); ++d) {
    for (int64_t n = c[d]; n < c[d + 1]; ++n)
      values[static_cast<size_t>(n)] = add(kWhere, "position", start, n - c[d]);
  }
  write_index(kWhere, o, values);
}

namespace {

// The document starts of position_ids, read row-major.
std::vector<int64_t> document_starts(const char* where, const DLTensor* position_ids, View* pv) {
  const View p = check_tensor(where, "position_ids", position_ids, Role::kIndex, {1, 2});
  const int64_t cols = p.ndim == 2 ? p.shape[1] : p.shape[0];
  std::vector<int64_t> starts;
  int64_t prev = 0;
  for (int64_t n = 0; n < p.numel; ++n) {
    const int64_t x = p.ndim == 2 ? at2(p, n / cols, n % cols) : at1(p, n);
    if (n == 0 || prev == std::numeric_limits<int64_t>::max() || x != prev + 1) starts.push_back(n);
    prev = x;
  }
  if (pv) *pv = p;
  return starts;
}

}  // namespace

int64_t packed_document_count(const DLTensor* position_ids) {
  return static_cast<int64_t>(document_starts("packed_document_count", position_ids, nullptr).size());
}

void cu_seqlens_from_position_ids(const DLTensor* position_ids, const DLTensor* out) {
  constexpr const char* kWhere = "cu_seqlens_from_position_ids";
  View p;
  std::vector<int64_t> values = document_starts(kWhere, position_ids, &p);
  const View o = check_tensor(kWhere, "out", out, Role::kIndex, {1});
  check_distinct(kWhere, o);
  const auto want = static_cast<int64_t>(values.size()) + 1;
  if (o.shape[0] != want) {
    fail(Status::kShapeMismatch, kWhere, "out has ", o.shape[0], " elements; position_ids holds ",
         values.size(), " documents, so it needs ", want);
  }
  check_no_overlap(kWhere, o, p);
  values.push_back(p.numel);
  write_index(kWhere, o, values);
}

namespace {

// num_heads in [1, kAlibiMaxHeads], checked before anything is sized from it.
void check_heads(const char* where, int64_t num_heads) {
  detail::check_at_least(where, "num_heads", num_heads, 1);
  if (num_heads > kAlibiMaxHeads) {
    fail(Status::kInvalidArgument, where, "num_heads = ", num_heads, " must be <= 2^20 = ", kAlibiMaxHeads);
  }
}

}  // namespace

void alibi_slopes(std::span<double> out, double max_bias) {
  constexpr const char* kWhere = "alibi_slopes";
  const auto n = static_cast<int64_t>(out.size());
  check_heads(kWhere, n);
  detail::check_positive_finite(kWhere, "max_bias", max_bias);
  int64_t c = 1;
  while (c * 2 <= n) c *= 2;  // the largest power of two <= n
  for (int64_t h = 0; h < n; ++h) {
    out[static_cast<size_t>(h)] = h < c ? power_of_2_slope(c, h, max_bias) : power_of_2_slope(2 * c, 2 * (h - c), max_bias);
  }
}

std::vector<double> alibi_slopes(int64_t num_heads, double max_bias) {
  constexpr const char* kWhere = "alibi_slopes";
  check_heads(kWhere, num_heads);
  detail::check_positive_finite(kWhere, "max_bias", max_bias);
  std::vector<double> out(static_cast<size_t>(num_heads));
  alibi_slopes(out, max_bias);
  return out;
}

void alibi_bias(std::span<const double> slopes, const DLTensor* q_positions, const DLTensor* k_positions,
                AlibiMode mode, const DLTensor* out) {
  constexpr const char* kWhere = "alibi_bias";
  if (mode != AlibiMode::kCausal && mode != AlibiMode::kSymmetric) {
    fail(Status::kInvalidArgument, kWhere, "mode ", static_cast<int>(mode), " is not causal (0) or symmetric (1)");
  }
  const View q = check_tensor(kWhere, "q_positions", q_positions, Role::kIndex, {1});
  const View k = check_tensor(kWhere, "k_positions", k_positions, Role::kIndex, {1});
  const View o = check_tensor(kWhere, "out", out, Role::kOutput, {3});
  const auto H = static_cast<int64_t>(slopes.size());
  if (o.shape[0] != H || o.shape[1] != q.shape[0] || o.shape[2] != k.shape[0]) {
    fail(Status::kShapeMismatch, kWhere, "out is (", o.shape[0], ", ", o.shape[1], ", ", o.shape[2],
         "); expected (H, Tq, Tk) = (", H, ", ", q.shape[0], ", ", k.shape[0], ")");
  }
  check_no_overlap(kWhere, o, q);
  check_no_overlap(kWhere, o, k);
  check_no_overlap(kWhere, o, "slopes", slopes.data(), slopes.size_bytes());
  for (int64_t h = 0; h < H; ++h) {
    const double m = slopes[static_cast<size_t>(h)];
    if (!std::isfinite(m)) fail(Status::kInvalidArgument, kWhere, "slopes[", h, "] = ", m, " is not finite");
  }
  auto read = [&](const View& v, const char* name) {
    std::vector<int64_t> r = read_once(v);
    for (size_t i = 0; i < r.size(); ++i) {
      if (r[i] < 0)
        fail(Status::kInvalidArgument, kWhere, name, "[", i, "] = ", r[i],
             " is negative; positions must be >= 0");
    }
    return r;
  };
  const std::vector<int64_t> qs = read(q, "q_positions");
  const std::vector<int64_t> ks = read(k, "k_positions");
  switch (o.dtype) {
    case DType::kF32: fill_bias<float>(slopes, qs, ks, mode, o); break;
    case DType::kBF16: fill_bias<fp::bf16_t>(slopes, qs, ks, mode, o); break;
    case DType::kF16: fill_bias<fp::f16_t>(slopes, qs, ks, mode, o); break;
    default: fail(Status::kInternal, kWhere, "out's dtype passed the check but has no writer");
  }
}

}  // namespace tokpos
