// The ops layer on DLPack tensors, tested from its specification (tokpos.h,
// "Ops on DLPack tensors", and ops.h) against a reference written here:
// plain loops over logical (b, t, d) indices, float32 sums, and this file's
// own bf16 and f16 conversions (round to nearest even on the f32 bit
// pattern). Results are compared bit for bit, and whole buffers are compared,
// so padding between strided rows must stay as it was.
//
// Statuses, where the headers say them: dtypes DLPack can express that
// tokpos does not take in that role (float64 tables, uint8/int16/float ids,
// f16 gradients, ...) are TOKPOS_UNIMPLEMENTED ("valid but not supported
// (yet): a device, a dtype"); other devices TOKPOS_UNIMPLEMENTED; two buffers
// that disagree on a dimension TOKPOS_SHAPE_MISMATCH; sizes outside their
// range, overlaps and misalignment TOKPOS_INVALID_ARGUMENT; products that
// overflow TOKPOS_SIZE_OVERFLOW. Where the headers leave the choice open
// (lanes != 1, a non-unit inner stride, an ndim that no buffer could have,
// a negative position) the test accepts either of the two plausible statuses
// and says so at the case.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "tokpos/dtype.h"
#include "tokpos/error.h"
#include "tokpos/ops.h"
#include "tokpos/tokpos.h"
#include "half_reference.h"

namespace {

// ---- Element types ----------------------------------------------------------------

constexpr DLDataType kF32{kDLFloat, 32, 1};
constexpr DLDataType kBF16{kDLBfloat, 16, 1};
constexpr DLDataType kF16{kDLFloat, 16, 1};
constexpr DLDataType kI32{kDLInt, 32, 1};
constexpr DLDataType kI64{kDLInt, 64, 1};

bool same(DLDataType a, DLDataType b) { return a.code == b.code && a.bits == b.bits && a.lanes == b.lanes; }
size_t esize(DLDataType t) { return static_cast<size_t>(t.bits) / 8; }
const char* dname(DLDataType t) {
  if (same(t, kF32)) return "f32";
  if (same(t, kBF16)) return "bf16";
  if (same(t, kF16)) return "f16";
  if (same(t, kI32)) return "i32";
  if (same(t, kI64)) return "i64";
  return "?";
}

using tokpos::testing::bits_of;
using tokpos::testing::float_of;
using tokpos::testing::from_bf16;
using tokpos::testing::from_f16;
using tokpos::testing::to_bf16;
using tokpos::testing::to_f16;

// Element k of a float-typed array, widened; and stored, rounded once.
float load_f(const void* base, DLDataType t, int64_t k) {
  if (same(t, kF32)) return static_cast<const float*>(base)[k];
  const uint16_t h = static_cast<const uint16_t*>(base)[k];
  return same(t, kBF16) ? from_bf16(h) : from_f16(h);
}
void store_f(void* base, DLDataType t, int64_t k, float v) {
  if (same(t, kF32)) {
    static_cast<float*>(base)[k] = v;
  } else {
    static_cast<uint16_t*>(base)[k] = same(t, kBF16) ? to_bf16(v) : to_f16(v);
  }
}

using Bytes = std::vector<unsigned char>;

// Encode floats as type t (rounded), and widen them back.
Bytes encode(const std::vector<float>& v, DLDataType t) {
  Bytes b(v.size() * esize(t));
  for (size_t i = 0; i < v.size(); ++i) store_f(b.data(), t, static_cast<int64_t>(i), v[i]);
  return b;
}
std::vector<float> widen(const Bytes& b, DLDataType t) {
  std::vector<float> v(b.size() / esize(t));
  for (size_t i = 0; i < v.size(); ++i) v[i] = load_f(b.data(), t, static_cast<int64_t>(i));
  return v;
}
Bytes encode_index(const std::vector<int64_t>& v, DLDataType t) {
  Bytes b(v.size() * esize(t));
  for (size_t i = 0; i < v.size(); ++i) {
    if (same(t, kI64)) {
      std::memcpy(b.data() + 8 * i, &v[i], 8);
    } else {
      const int32_t x = static_cast<int32_t>(v[i]);
      std::memcpy(b.data() + 4 * i, &x, 4);
    }
  }
  return b;
}

// ---- Deterministic data -----------------------------------------------------------

struct Lcg {
  uint64_t s;
  explicit Lcg(uint64_t seed) : s(seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull) {}
  uint64_t next() {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return s >> 11;
  }
  int64_t below(int64_t n) { return static_cast<int64_t>(next() % static_cast<uint64_t>(n)); }
  // Uniform in [-1, 1) with 24 random bits, never -0.
  float unit() { return static_cast<float>(static_cast<double>(next() >> 29) / 8388608.0 - 1.0); }
};

std::vector<float> noise(size_t n, uint64_t seed, float scale = 1.0f) {
  Lcg r(seed);
  std::vector<float> v(n);
  for (auto& x : v) {
    x = r.unit() * scale;
    if (x == 0.0f) x = 0.0f;  // no negative zero anywhere
  }
  return v;
}
std::vector<int64_t> randint(size_t n, int64_t lo, int64_t hi, uint64_t seed) {
  Lcg r(seed);
  std::vector<int64_t> v(n);
  for (auto& x : v) x = lo + r.below(hi - lo);
  return v;
}

// ---- Buffers and layouts ------------------------------------------------------------

// 64-byte aligned bytes (a vector of 8-byte words, over-allocated).
struct Buffer {
  std::vector<uint64_t> words;
  size_t n = 0;
  explicit Buffer(size_t bytes = 0, unsigned char fill = 0xA5) : words(bytes / 8 + 16), n(bytes) {
    std::memset(data(), fill, size());
  }
  unsigned char* data() {
    auto p = reinterpret_cast<uintptr_t>(words.data());
    return reinterpret_cast<unsigned char*>((p + 63) & ~uintptr_t{63});
  }
  const unsigned char* data() const { return const_cast<Buffer*>(this)->data(); }
  size_t size() const { return n; }
  Bytes bytes() const { return Bytes(data(), data() + n); }
};

struct Layout {
  std::vector<int64_t> shape, strides;  // strides in elements, never empty here
  uint64_t offset = 0;                  // bytes
};

std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> s(shape.size());
  int64_t acc = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    s[i] = acc;
    acc *= shape[i];
  }
  return s;
}
Layout contiguous(std::vector<int64_t> shape, uint64_t offset = 0) {
  Layout l{std::move(shape), {}, offset};
  l.strides = contiguous_strides(l.shape);
  return l;
}
int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}
// Bytes from the start of the buffer to one past the last element.
size_t extent(const Layout& l, size_t es) {
  int64_t last = 0;
  for (size_t i = 0; i < l.shape.size(); ++i) {
    if (l.shape[i] == 0) return static_cast<size_t>(l.offset);
    last += (l.shape[i] - 1) * l.strides[i];
  }
  return static_cast<size_t>(l.offset) + static_cast<size_t>(last + 1) * es;
}
// Visits the elements in row-major logical order: f(logical index, element offset).
void for_each(const Layout& l, const std::function<void(int64_t, int64_t)>& f) {
  const int64_t n = numel(l.shape);
  std::vector<int64_t> idx(l.shape.size(), 0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t off = 0;
    for (size_t d = 0; d < idx.size(); ++d) off += idx[d] * l.strides[d];
    f(i, off);
    for (size_t d = idx.size(); d-- > 0;) {
      if (++idx[d] < l.shape[d]) break;
      idx[d] = 0;
    }
  }
}
// Logical elements into / out of a strided layout in buf.
void scatter(unsigned char* buf, const Layout& l, size_t es, const Bytes& logical) {
  for_each(l, [&](int64_t i, int64_t off) {
    std::memcpy(buf + l.offset + static_cast<size_t>(off) * es, logical.data() + static_cast<size_t>(i) * es, es);
  });
}
Bytes gather(const unsigned char* buf, const Layout& l, size_t es) {
  Bytes out(static_cast<size_t>(numel(l.shape)) * es);
  for_each(l, [&](int64_t i, int64_t off) {
    std::memcpy(out.data() + static_cast<size_t>(i) * es, buf + l.offset + static_cast<size_t>(off) * es, es);
  });
  return out;
}

// A DLTensor with its own shape and strides; p() points them at this copy.
struct DL {
  std::vector<int64_t> shape, strides;  // strides empty: NULL (contiguous)
  DLTensor t{};
  bool raw = false;  // p() leaves t exactly as set
  DL() = default;
  DL(const void* data, DLDataType dt, std::vector<int64_t> sh, std::vector<int64_t> st = {}, uint64_t off = 0)
      : shape(std::move(sh)), strides(std::move(st)) {
    t.data = const_cast<void*>(data);
    t.device = DLDevice{kDLCPU, 0};
    t.dtype = dt;
    t.byte_offset = off;
  }
  DL(const void* data, DLDataType dt, const Layout& l, bool null_strides = false)
      : DL(data, dt, l.shape, null_strides ? std::vector<int64_t>{} : l.strides, l.offset) {}
  DLTensor* p() {
    if (raw) return &t;
    t.ndim = static_cast<int>(shape.size());
    t.shape = shape.empty() ? nullptr : shape.data();
    t.strides = strides.empty() ? nullptr : strides.data();
    return &t;
  }
};

// ---- The reference ----------------------------------------------------------------

// out (N, D) of type out_t: round(tok[rows[n]] + pos[positions[n]]) per element, float32 sum.
Bytes ref_forward(const std::vector<int64_t>& rows, const std::vector<int64_t>& positions,
                  const std::vector<float>& tok, const std::vector<float>* pos, int64_t D, DLDataType out_t) {
  Bytes out(rows.size() * static_cast<size_t>(D) * esize(out_t));
  for (size_t n = 0; n < rows.size(); ++n)
    for (int64_t d = 0; d < D; ++d) {
      float v = tok[static_cast<size_t>(rows[n] * D + d)];
      if (pos != nullptr) v = v + (*pos)[static_cast<size_t>(positions[n] * D + d)];
      store_f(out.data(), out_t, static_cast<int64_t>(n) * D + d, v);
    }
  return out;
}

// grad (R, D) += src (N, D) grouped by rows[n] (< 0: skipped), in the order
// kernels.h defines: up to 64 sources one at a time in increasing n; more:
// blocks of 64 each summed from its first source, block sums added in order.
void ref_index_add(std::vector<float>& grad, const std::vector<float>& src, const std::vector<int64_t>& rows,
                   int64_t D) {
  std::map<int64_t, std::vector<size_t>> sources;
  for (size_t n = 0; n < rows.size(); ++n)
    if (rows[n] >= 0) sources[rows[n]].push_back(n);
  for (const auto& [r, list] : sources) {
    float* g = grad.data() + r * D;
    if (list.size() <= 64) {
      for (size_t n : list)
        for (int64_t d = 0; d < D; ++d) g[d] = g[d] + src[n * static_cast<size_t>(D) + static_cast<size_t>(d)];
      continue;
    }
    for (size_t k = 0; k < list.size(); k += 64) {
      const size_t end = std::min(list.size(), k + 64);
      for (int64_t d = 0; d < D; ++d) {
        float block = src[list[k] * static_cast<size_t>(D) + static_cast<size_t>(d)];
        for (size_t j = k + 1; j < end; ++j) block = block + src[list[j] * static_cast<size_t>(D) + static_cast<size_t>(d)];
        g[d] = g[d] + block;
      }
    }
  }
}
// The same, every source added one at a time (what the blocks must differ from).
void naive_index_add(std::vector<float>& grad, const std::vector<float>& src, const std::vector<int64_t>& rows,
                     int64_t D) {
  for (size_t n = 0; n < rows.size(); ++n)
    for (int64_t d = 0; d < D; ++d)
      grad[static_cast<size_t>(rows[n] * D + d)] += src[n * static_cast<size_t>(D) + static_cast<size_t>(d)];
}

std::vector<int64_t> default_positions(int64_t B, int64_t T, int64_t start) {
  std::vector<int64_t> p(static_cast<size_t>(B * T));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) p[static_cast<size_t>(b * T + t)] = start + t;
  return p;
}

bool equal_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}
// First differing element, for messages.
std::string first_diff(const Bytes& a, const Bytes& b, size_t es) {
  if (a.size() != b.size()) return "sizes " + std::to_string(a.size()) + " vs " + std::to_string(b.size());
  for (size_t i = 0; i < a.size(); i += es)
    if (std::memcmp(a.data() + i, b.data() + i, es) != 0) return "first difference at element " + std::to_string(i / es);
  return "equal";
}
Bytes as_bytes(const std::vector<float>& v) {
  return Bytes(reinterpret_cast<const unsigned char*>(v.data()), reinterpret_cast<const unsigned char*>(v.data()) + v.size() * 4);
}

// ---- Messages and statuses ----------------------------------------------------------

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}
::testing::AssertionResult message_has(std::initializer_list<std::string> pieces) {
  const std::string msg = tokpos_last_error();
  for (const auto& p : pieces)
    if (msg.find(p) == std::string::npos)
      return ::testing::AssertionFailure() << "tokpos_last_error() = \"" << msg << "\" lacks \"" << p << "\"";
  return ::testing::AssertionSuccess();
}
// The message names a device: by name (any case) or as "device ... <number>".
::testing::AssertionResult names_device(const std::string& msg, const std::string& name, int number) {
  if (lower(msg).find(lower(name)) != std::string::npos) return ::testing::AssertionSuccess();
  // "device", at most 20 non-digits, then the number and no further digit.
  const std::string low = lower(msg), num = std::to_string(number);
  for (size_t at = low.find("device"); at != std::string::npos; at = low.find("device", at + 1)) {
    size_t k = at + 6, skipped = 0;
    while (k < low.size() && !std::isdigit(static_cast<unsigned char>(low[k])) && skipped < 20) ++k, ++skipped;
    if (low.compare(k, num.size(), num) == 0 &&
        (k + num.size() == low.size() || !std::isdigit(static_cast<unsigned char>(low[k + num.size()]))))
      return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "\"" << msg << "\" names neither " << name << " nor device " << number;
}
::testing::AssertionResult status_in(tokpos_status st, std::initializer_list<tokpos_status> allowed) {
  for (auto a : allowed)
    if (st == a) return ::testing::AssertionSuccess();
  auto f = ::testing::AssertionFailure();
  f << "status " << tokpos_status_string(st) << " (last error \"" << tokpos_last_error() << "\"), expected one of";
  for (auto a : allowed) f << " " << tokpos_status_string(a);
  return f;
}

// Restores the process-wide thread count at the end of a test.
struct ThreadsGuard {
  ~ThreadsGuard() { tokpos_set_num_threads(0); }
};

// ---- A forward problem --------------------------------------------------------------

struct Problem {
  int64_t B = 3, T = 5, V = 11, L = 9, D = 6;
  std::vector<int64_t> ids, pids;  // (B*T)
  std::vector<float> tok, pos;     // source values (V*D), (L*D), before rounding to a table type
  Problem(int64_t b, int64_t t, int64_t v, int64_t l, int64_t d, uint64_t seed) : B(b), T(t), V(v), L(l), D(d) {
    ids = randint(static_cast<size_t>(B * T), 0, V, seed);
    pids = randint(static_cast<size_t>(B * T), 0, L, seed + 1);
    tok = noise(static_cast<size_t>(V * D), seed + 2, 3.0f);
    pos = noise(static_cast<size_t>(L * D), seed + 3, 0.75f);
  }
};

// Runs tokpos_op_compose_forward on contiguous tensors; returns out's bytes.
struct FwdRun {
  tokpos_status st;
  Bytes out;
};
FwdRun run_forward(const Problem& p, DLDataType tok_t, DLDataType pos_t, DLDataType out_t, DLDataType id_t,
                   bool with_pos, bool with_pids, int64_t start, bool null_strides = true) {
  const Bytes tok = encode(p.tok, tok_t), pos = encode(p.pos, pos_t);
  const Bytes ids = encode_index(p.ids, id_t), pids = encode_index(p.pids, id_t);
  Buffer out(static_cast<size_t>(p.B * p.T * p.D) * esize(out_t));
  DL o(out.data(), out_t, contiguous({p.B, p.T, p.D}), null_strides);
  DL i(ids.data(), id_t, contiguous({p.B, p.T}), null_strides);
  DL tt(tok.data(), tok_t, contiguous({p.V, p.D}), null_strides);
  DL pt(pos.data(), pos_t, contiguous({p.L, p.D}), null_strides);
  DL pi(pids.data(), id_t, contiguous({p.B, p.T}), null_strides);
  const tokpos_status st =
      tokpos_op_compose_forward(o.p(), i.p(), tt.p(), with_pos ? pt.p() : nullptr, with_pids ? pi.p() : nullptr, start);
  return {st, out.bytes()};
}
Bytes expected_forward(const Problem& p, DLDataType tok_t, DLDataType pos_t, DLDataType out_t, bool with_pos,
                       bool with_pids, int64_t start) {
  const auto tok = widen(encode(p.tok, tok_t), tok_t), pos = widen(encode(p.pos, pos_t), pos_t);
  const auto positions = with_pids ? p.pids : default_positions(p.B, p.T, start);
  return ref_forward(p.ids, positions, tok, with_pos ? &pos : nullptr, p.D, out_t);
}

const DLDataType kFloatTypes[] = {kF32, kBF16, kF16};

// ======================================================================================
// Forward: values
// ======================================================================================

TEST(OpsForward, EveryTableAndOutputTypeMatchesTheReference) {
  const Problem p(3, 5, 11, 12, 7, 1);
  for (DLDataType tok_t : kFloatTypes)
    for (DLDataType pos_t : kFloatTypes)
      for (DLDataType out_t : kFloatTypes)
        for (int64_t start : {0, 4}) {
          SCOPED_TRACE(std::string("tok ") + dname(tok_t) + " pos " + dname(pos_t) + " out " + dname(out_t) +
                       " start " + std::to_string(start));
          const auto r = run_forward(p, tok_t, pos_t, out_t, kI64, true, false, start);
          ASSERT_EQ(r.st, TOKPOS_OK) << tokpos_last_error();
          const auto want = expected_forward(p, tok_t, pos_t, out_t, true, false, start);
          EXPECT_EQ(r.out, want) << first_diff(r.out, want, esize(out_t));
        }
}

TEST(OpsForward, NoPositionTableGivesTokenRowsRoundedOnce) {
  const Problem p(2, 4, 9, 4, 5, 2);
  for (DLDataType tok_t : kFloatTypes)
    for (DLDataType out_t : kFloatTypes) {
      SCOPED_TRACE(std::string("tok ") + dname(tok_t) + " out " + dname(out_t));
      const auto r = run_forward(p, tok_t, kF32, out_t, kI32, false, false, 100);  // start irrelevant
      ASSERT_EQ(r.st, TOKPOS_OK) << tokpos_last_error();
      EXPECT_EQ(r.out, expected_forward(p, tok_t, kF32, out_t, false, false, 0));
    }
}

TEST(OpsForward, ExplicitPositionIdsMatchTheReference) {
  const Problem p(4, 6, 13, 8, 5, 3);
  for (DLDataType out_t : kFloatTypes) {
    const auto r = run_forward(p, kBF16, kF32, out_t, kI64, true, true, 0);
    ASSERT_EQ(r.st, TOKPOS_OK) << tokpos_last_error();
    EXPECT_EQ(r.out, expected_forward(p, kBF16, kF32, out_t, true, true, 0)) << dname(out_t);
  }
}

TEST(OpsForward, Int32AndInt64IdsGiveIdenticalBits) {
  const Problem p(3, 7, 20, 10, 9, 4);
  for (bool pids : {false, true})
    for (DLDataType out_t : kFloatTypes) {
      const auto a = run_forward(p, kF32, kF16, out_t, kI64, true, pids, 2);
      const auto b = run_forward(p, kF32, kF16, out_t, kI32, true, pids, 2);
      ASSERT_EQ(a.st, TOKPOS_OK) << tokpos_last_error();
      ASSERT_EQ(b.st, TOKPOS_OK) << tokpos_last_error();
      EXPECT_EQ(a.out, b.out) << dname(out_t) << " position ids " << pids;
    }
  // Mixed: int32 ids with int64 position ids.
  const Bytes tok = encode(p.tok, kF32), pos = encode(p.pos, kF32);
  const Bytes ids32 = encode_index(p.ids, kI32), pids64 = encode_index(p.pids, kI64);
  Buffer out(static_cast<size_t>(p.B * p.T * p.D) * 4);
  DL o(out.data(), kF32, {p.B, p.T, p.D}), i(ids32.data(), kI32, {p.B, p.T}), tt(tok.data(), kF32, {p.V, p.D}),
      pt(pos.data(), kF32, {p.L, p.D}), pi(pids64.data(), kI64, {p.B, p.T});
  ASSERT_EQ(tokpos_op_compose_forward(o.p(), i.p(), tt.p(), pt.p(), pi.p(), 0), TOKPOS_OK) << tokpos_last_error();
  EXPECT_EQ(out.bytes(), expected_forward(p, kF32, kF32, kF32, true, true, 0));
}

TEST(OpsForward, NullStridesEqualExplicitContiguousStrides) {
  const Problem p(2, 5, 7, 6, 8, 5);
  for (DLDataType out_t : kFloatTypes) {
    const auto a = run_forward(p, kF16, kBF16, out_t, kI64, true, true, 0, true);
    const auto b = run_forward(p, kF16, kBF16, out_t, kI64, true, true, 0, false);
    ASSERT_EQ(a.st, TOKPOS_OK) << tokpos_last_error();
    ASSERT_EQ(b.st, TOKPOS_OK) << tokpos_last_error();
    EXPECT_EQ(a.out, b.out);
    EXPECT_EQ(a.out, expected_forward(p, kF16, kBF16, out_t, true, true, 0));
  }
}

TEST(OpsForward, MatchesTheFloatCApi) {
  const Problem p(3, 8, 17, 8, 12, 6);
  const auto r = run_forward(p, kF32, kF32, kF32, kI64, true, false, 0);
  ASSERT_EQ(r.st, TOKPOS_OK) << tokpos_last_error();
  std::vector<float> legacy(static_cast<size_t>(p.B * p.T * p.D));
  ASSERT_EQ(tokpos_compose_forward(legacy.data(), p.ids.data(), p.B, p.T, p.tok.data(), p.V, p.pos.data(), p.L, p.D),
            TOKPOS_OK);
  EXPECT_EQ(r.out, as_bytes(legacy));
}

// Strided views of every argument: ids every other column of a wider
// buffer, rows with padding, byte offsets. Whole buffers are compared, so
// out's padding must stay as it was.
TEST(OpsForward, StridedViewsGiveTheSameBitsAsContiguous) {
  const Problem p(3, 5, 10, 9, 6, 7);
  for (DLDataType tab_t : kFloatTypes)
    for (DLDataType out_t : kFloatTypes)
      for (DLDataType id_t : {kI32, kI64}) {
        SCOPED_TRACE(std::string(dname(tab_t)) + " -> " + dname(out_t) + " ids " + dname(id_t));
        const size_t ies = esize(id_t), tes = esize(tab_t), oes = esize(out_t);
        // ids: every other column of a (B, 2T + 1) buffer, after 3 elements.
        const Layout il{{p.B, p.T}, {2 * p.T + 1, 2}, 3 * ies};
        const Layout pl{{p.B, p.T}, {3 * p.T, 3}, 5 * ies};
        const Layout tl{{p.V, p.D}, {p.D + 3, 1}, 2 * tes};
        const Layout ql{{p.L, p.D}, {2 * p.D, 1}, 4 * tes};
        const Layout ol{{p.B, p.T, p.D}, {p.T * (p.D + 2) + 1, p.D + 2, 1}, 3 * oes};
        Buffer ib(extent(il, ies), 0x7f), pb(extent(pl, ies), 0x7f), tb(extent(tl, tes), 0x7f),
            qb(extent(ql, tes), 0x7f), ob(extent(ol, oes) + 64, 0xA5);
        scatter(ib.data(), il, ies, encode_index(p.ids, id_t));
        scatter(pb.data(), pl, ies, encode_index(p.pids, id_t));
        scatter(tb.data(), tl, tes, encode(p.tok, tab_t));
        scatter(qb.data(), ql, tes, encode(p.pos, tab_t));
        for (bool with_pids : {false, true}) {
          std::memset(ob.data(), 0xA5, ob.size());
          DL o(ob.data(), out_t, ol), i(ib.data(), id_t, il), tt(tb.data(), tab_t, tl), pt(qb.data(), tab_t, ql),
              pi(pb.data(), id_t, pl);
          ASSERT_EQ(tokpos_op_compose_forward(o.p(), i.p(), tt.p(), pt.p(), with_pids ? pi.p() : nullptr, 1), TOKPOS_OK)
              << tokpos_last_error();
          const Bytes expect = expected_forward(p, tab_t, tab_t, out_t, true, with_pids, 1);
          const Bytes got = gather(ob.data(), ol, oes);
          EXPECT_EQ(got, expect) << "position ids " << with_pids << ": " << first_diff(got, expect, oes);
          Buffer want(ob.size(), 0xA5);
          scatter(want.data(), ol, oes, expect);
          EXPECT_EQ(ob.bytes(), want.bytes()) << "position ids " << with_pids << " (padding written?)";
        }
      }
}

// The data pointer itself may carry the offset (as PyTorch exports views),
// as long as it is aligned to the element size.
TEST(OpsForward, DataPointerInsideABufferWithoutByteOffset) {
  const Problem p(2, 3, 6, 5, 4, 8);
  const Bytes tok16 = encode(p.tok, kBF16), pos = encode(p.pos, kF32);
  Buffer tb(tok16.size() + 2), ib(p.ids.size() * 4 + 4);
  std::memcpy(tb.data() + 2, tok16.data(), tok16.size());  // 2-byte aligned, not 4
  const Bytes ids32 = encode_index(p.ids, kI32);
  std::memcpy(ib.data() + 4, ids32.data(), ids32.size());  // 4-byte aligned, not 8
  Buffer ob(static_cast<size_t>(p.B * p.T * p.D) * 2 + 2);
  DL o(ob.data() + 2, kF16, {p.B, p.T, p.D}), i(ib.data() + 4, kI32, {p.B, p.T}), tt(tb.data() + 2, kBF16, {p.V, p.D}),
      pt(pos.data(), kF32, {p.L, p.D});
  ASSERT_EQ(tokpos_op_compose_forward(o.p(), i.p(), tt.p(), pt.p(), nullptr, 0), TOKPOS_OK) << tokpos_last_error();
  const Bytes got(ob.data() + 2, ob.data() + ob.size());
  EXPECT_EQ(got, expected_forward(p, kBF16, kF32, kF16, true, false, 0));
}

// Stride 0 broadcasts inputs: ids and position ids over B, a position table
// whose every row is row 0, a token table with one row repeated.
TEST(OpsForward, StrideZeroBroadcastsInputs) {
  const int64_t B = 4, T = 6, V = 9, L = 8, D = 5;
  const auto ids_row = randint(static_cast<size_t>(T), 0, V, 9);
  const auto pids_row = randint(static_cast<size_t>(T), 0, L, 10);
  const auto tokf = noise(static_cast<size_t>(V * D), 11), posf = noise(static_cast<size_t>(L * D), 12);
  std::vector<int64_t> ids, pids;
  for (int64_t b = 0; b < B; ++b) {
    ids.insert(ids.end(), ids_row.begin(), ids_row.end());
    pids.insert(pids.end(), pids_row.begin(), pids_row.end());
  }
  for (DLDataType id_t : {kI32, kI64})
    for (DLDataType out_t : kFloatTypes) {
      SCOPED_TRACE(std::string(dname(id_t)) + " -> " + dname(out_t));
      const Bytes ib = encode_index(ids_row, id_t), pb = encode_index(pids_row, id_t);
      const Bytes tb = encode(tokf, kF32), qb = encode(posf, kF32);
      Buffer out(static_cast<size_t>(B * T * D) * esize(out_t));
      DL o(out.data(), out_t, {B, T, D}), i(ib.data(), id_t, {B, T}, {0, 1}), tt(tb.data(), kF32, {V, D}),
          pt(qb.data(), kF32, {L, D}), pi(pb.data(), id_t, {B, T}, {0, 1});
      // ids and position ids broadcast over B.
      ASSERT_EQ(tokpos_op_compose_forward(o.p(), i.p(), tt.p(), pt.p(), pi.p(), 0), TOKPOS_OK) << tokpos_last_error();
      EXPECT_EQ(out.bytes(), ref_forward(ids, pids, tokf, &posf, D, out_t));
      // A position table broadcast over L: every position reads row 0.
      DL pt0(qb.data(), kF32, {L, D}, {0, 1});
      ASSERT_EQ(tokpos_op_compose_forward(o.p(), i.p(), tt.p(), pt0.p(), nullptr, 0), TOKPOS_OK) << tokpos_last_error();
      EXPECT_EQ(out.bytes(), ref_forward(ids, std::vector<int64_t>(ids.size(), 0), tokf, &posf, D, out_t));
      // A token table broadcast over V: every id reads row 0.
      DL tt0(tb.data(), kF32, {V, D}, {0, 1});
      ASSERT_EQ(tokpos_op_compose_forward(o.p(), i.p(), tt0.p(), pt.p(), nullptr, 2), TOKPOS_OK)
          << tokpos_last_error();
      EXPECT_EQ(out.bytes(), ref_forward(std::vector<int64_t>(ids.size(), 0), default_positions(B, T, 2), tokf, &posf,
                                         D, out_t));
    }
}

TEST(OpsForward, OneDimensionalIdsUseStartPlusN) {
  const int64_t N = 13, V = 10, L = 20, D = 7;
  const auto ids = randint(N, 0, V, 13), pids = randint(N, 0, L, 14);
  const auto tokf = noise(static_cast<size_t>(V * D), 15), posf = noise(static_cast<size_t>(L * D), 16);
  const Bytes tok = encode(tokf, kF16), pos = encode(posf, kF16);
  const auto tokw = widen(tok, kF16), posw = widen(pos, kF16);
  for (DLDataType id_t : {kI32, kI64})
    for (DLDataType out_t : kFloatTypes) {
      const Bytes ib = encode_index(ids, id_t), pb = encode_index(pids, id_t);
      Buffer out(static_cast<size_t>(N * D) * esize(out_t));
      DL o(out.data(), out_t, {N, D}), i(ib.data(), id_t, {N}), tt(tok.data(), kF16, {V, D}), pt(pos.data(), kF16, {L, D}),
          pi(pb.data(), id_t, {N});
      ASSERT_EQ(tokpos_op_compose_forward(o.p(), i.p(), tt.p(), pt.p(), nullptr, 7), TOKPOS_OK) << tokpos_last_error();
      EXPECT_EQ(out.bytes(), ref_forward(ids, default_positions(1, N, 7), tokw, &posw, D, out_t)) << dname(out_t);
      ASSERT_EQ(tokpos_op_compose_forward(o.p(), i.p(), tt.p(), pt.p(), pi.p(), 0), TOKPOS_OK) << tokpos_last_error();
      EXPECT_EQ(out.bytes(), ref_forward(ids, pids, tokw, &posw, D, out_t)) << dname(out_t);
      // 1-D ids with a strided view: every third element.
      Buffer wide(static_cast<size_t>(3 * N) * esize(id_t));
      scatter(wide.data(), Layout{{N}, {3}, 0}, esize(id_t), ib);
      DL i3(wide.data(), id_t, {N}, {3});
      ASSERT_EQ(tokpos_op_compose_forward(o.p(), i3.p(), tt.p(), pt.p(), nullptr, 7), TOKPOS_OK) << tokpos_last_error();
      EXPECT_EQ(out.bytes(), ref_forward(ids, default_positions(1, N, 7), tokw, &posw, D, out_t));
    }
}

// Sums placed where the roundings to 16 bits matter: ties, subnormals,
// overflow to infinity, values that only round up past the largest finite.
TEST(OpsForward, SixteenBitOutputsRoundToNearestEven) {
  const float tokv[] = {65504.0f, 65504.0f, 65519.0f, 1.0f,       1.0f,        3.0e-8f,  -3.0e-8f, 6.0e-5f,
                        1.0f,     0.5f,     -2.0f,    1.0e-40f,   3.3895e38f,  1.0f,     0.25f,    -65504.0f};
  const float posv[] = {15.0f,  16.0f,        0.0f,  0.00048828125f, 0.0009765625f, 0.0f,  0.0f,          1.0e-7f,
                        0x1p-8f, 0x1.8p-9f,   0x1p-24f, 0.0f,        3.3895e38f,     0x1p-11f, 0x1.8p-12f, -16.0f};
  const int64_t D = 16, V = 1, L = 1;
  const Bytes tok = encode(std::vector<float>(std::begin(tokv), std::end(tokv)), kF32);
  const Bytes pos = encode(std::vector<float>(std::begin(posv), std::end(posv)), kF32);
  const int64_t ids[1] = {0};
  for (DLDataType out_t : {kBF16, kF16}) {
    Buffer out(D * 2);
    DL o(out.data(), out_t, {1, 1, D}), i(ids, kI64, {1, 1}), tt(tok.data(), kF32, {V, D}), pt(pos.data(), kF32, {L, D});
    ASSERT_EQ(tokpos_op_compose_forward(o.p(), i.p(), tt.p(), pt.p(), nullptr, 0), TOKPOS_OK) << tokpos_last_error();
    const std::vector<float> posw(std::begin(posv), std::end(posv));
    const Bytes want = ref_forward({0}, {0}, std::vector<float>(std::begin(tokv), std::end(tokv)), &posw, D, out_t);
    const Bytes got = out.bytes();
    for (int64_t d = 0; d < D; ++d) {
      uint16_t g, w;
      std::memcpy(&g, got.data() + 2 * d, 2);
      std::memcpy(&w, want.data() + 2 * d, 2);
      EXPECT_EQ(g, w) << dname(out_t) << " d=" << d << " sum " << (tokv[d] + posv[d]);
    }
  }
  // Spot checks of this file's conversions, so the reference is right too.
  EXPECT_EQ(to_f16(65519.0f), 0x7bff);
  EXPECT_EQ(to_f16(65520.0f), 0x7c00);
  EXPECT_EQ(to_f16(0x1p-24f), 0x0001);
  EXPECT_EQ(to_f16(0x1p-25f), 0x0000);       // tie: to even (0)
  EXPECT_EQ(to_f16(0x1.8p-24f), 0x0002);     // tie: to even (2)
  EXPECT_EQ(to_f16(1.0f + 0x1p-11f), 0x3c00);  // tie: to even
  EXPECT_EQ(to_f16(1.0f + 0x1.8p-10f), 0x3c02);
  EXPECT_EQ(to_bf16(1.0f + 0x1p-8f), 0x3f80);  // tie: to even
  EXPECT_EQ(to_bf16(1.0f + 0x1.8p-7f), 0x3f82);
  EXPECT_EQ(from_f16(0x0001), 0x1p-24f);
  EXPECT_EQ(from_f16(0x7bff), 65504.0f);
  for (uint32_t h = 0; h < 0x7c00; ++h)
    EXPECT_EQ(to_f16(from_f16(static_cast<uint16_t>(h))), static_cast<uint16_t>(h));
}

TEST(OpsForward, EmptyBatchesWithNullDataSucceed) {
  const int64_t V = 5, L = 4, D = 3;
  const auto tok = noise(V * D, 17), pos = noise(L * D, 18);
  DL tt(tok.data(), kF32, {V, D}), pt(pos.data(), kF32, {L, D});
  {
    DL o(nullptr, kF32, {0, 4, D}), i(nullptr, kI64, {0, 4}), pi(nullptr, kI64, {0, 4});
    EXPECT_EQ(tokpos_op_compose_forward(o.p(), i.p(), tt.p(), pt.p(), nullptr, 0), TOKPOS_OK) << tokpos_last_error();
    EXPECT_EQ(tokpos_op_compose_forward(o.p(), i.p(), tt.p(), pt.p(), pi.p(), 0), TOKPOS_OK) << tokpos_last_error();
  }
  {
    DL o(nullptr, kBF16, {2, 0, D}), i(nullptr, kI32, {2, 0});
    EXPECT_EQ(tokpos_op_compose_forward(o.p(), i.p(), tt.p(), pt.p(), nullptr, 0), TOKPOS_OK) << tokpos_last_error();
  }
  {
    DL o(nullptr, kF16, {0, D}), i(nullptr, kI64, {0});
    EXPECT_EQ(tokpos_op_compose_forward(o.p(), i.p(), tt.p(), nullptr, nullptr, 0), TOKPOS_OK) << tokpos_last_error();
  }
}

TEST(OpsForward, OutMayTouchButNotOverlapItsInputs) {
  const int64_t B = 2, T = 3, V = 4, L = 3, D = 4;
  Buffer arena(4096);
  auto* f = reinterpret_cast<float*>(arena.data());
  const auto tokf = noise(V * D, 19), posf = noise(L * D, 20);
  std::memcpy(f, tokf.data(), tokf.size() * 4);                 // token table [0, 16)
  std::memcpy(f + V * D + B * T * D, posf.data(), posf.size() * 4);  // pos table after out
  const std::vector<int64_t> ids = {0, 1, 2, 3, 2, 1};
  DL tt(f, kF32, {V, D}), o(f + V * D, kF32, {B, T, D}), pt(f + V * D + B * T * D, kF32, {L, D}),
      i(ids.data(), kI64, {B, T});
  ASSERT_EQ(tokpos_op_compose_forward(o.p(), i.p(), tt.p(), pt.p(), nullptr, 0), TOKPOS_OK) << tokpos_last_error();
  std::vector<float> got(static_cast<size_t>(B * T * D));
  std::memcpy(got.data(), f + V * D, got.size() * 4);
  EXPECT_EQ(as_bytes(got), ref_forward(ids, default_positions(B, T, 0), tokf, &posf, D, kF32));
}

TEST(OpsForward, OutStrideZeroOverASizeOneDimensionIsFine) {
  const int64_t T = 3, V = 4, L = 3, D = 2;
  const auto tok = noise(V * D, 21), pos = noise(L * D, 22);
  const std::vector<int64_t> ids = {3, 0, 2};
  std::vector<float> out(T * D);
  DL o(out.data(), kF32, {1, T, D}, {0, D, 1}), i(ids.data(), kI64, {1, T}), tt(tok.data(), kF32, {V, D}),
      pt(pos.data(), kF32, {L, D});
  ASSERT_EQ(tokpos_op_compose_forward(o.p(), i.p(), tt.p(), pt.p(), nullptr, 0), TOKPOS_OK) << tokpos_last_error();
  EXPECT_EQ(as_bytes(out), ref_forward(ids, default_positions(1, T, 0), tok, &pos, D, kF32));
}

// ======================================================================================
// Backward: values
// ======================================================================================

struct BwdProblem {
  int64_t B, T, V, L, D;
  std::vector<int64_t> ids, pids;
  std::vector<float> dout, gtok0, gpos0;  // d_out (B*T*D); initial gradients (accumulated onto)
};
// Ids with a hot row 0 used `hot` times, row 1 used exactly 64 times, row 2
// exactly 65 times (when there is room), the rest spread over V.
BwdProblem make_backward(int64_t B, int64_t T, int64_t V, int64_t L, int64_t D, int64_t hot, uint64_t seed) {
  BwdProblem p{B, T, V, L, D, {}, {}, {}, {}, {}};
  const size_t N = static_cast<size_t>(B * T);
  p.ids = randint(N, 3, V, seed);
  Lcg r(seed + 1);
  auto place = [&](int64_t row, int64_t count) {
    for (int64_t placed = 0; placed < count;) {
      const size_t k = static_cast<size_t>(r.below(static_cast<int64_t>(N)));
      if (p.ids[k] >= 3) {
        p.ids[k] = row;
        ++placed;
      }
    }
  };
  if (N > static_cast<size_t>(hot + 64 + 65 + 16)) {
    place(0, hot);
    place(1, 64);
    place(2, 65);
  }
  p.pids = randint(N, 0, L, seed + 2);
  p.dout = noise(N * static_cast<size_t>(D), seed + 3);
  p.gtok0 = noise(static_cast<size_t>(V * D), seed + 4, 0.5f);
  p.gpos0 = noise(static_cast<size_t>(L * D), seed + 5, 0.5f);
  return p;
}

struct BwdRun {
  tokpos_status st;
  std::vector<float> gtok, gpos;
};
BwdRun run_backward(const BwdProblem& p, DLDataType id_t, bool want_tok, bool want_pos, bool with_pids, int64_t start) {
  BwdRun r{TOKPOS_OK, p.gtok0, p.gpos0};
  const Bytes ib = encode_index(p.ids, id_t), pb = encode_index(p.pids, id_t);
  DL gt(r.gtok.data(), kF32, {p.V, p.D}), gp(r.gpos.data(), kF32, {p.L, p.D}), d(p.dout.data(), kF32, {p.B, p.T, p.D}),
      i(ib.data(), id_t, {p.B, p.T}), pi(pb.data(), id_t, {p.B, p.T});
  r.st = tokpos_op_compose_backward(want_tok ? gt.p() : nullptr, want_pos ? gp.p() : nullptr, d.p(), i.p(),
                                    with_pids ? pi.p() : nullptr, start);
  return r;
}
void expected_backward(const BwdProblem& p, bool with_pids, int64_t start, std::vector<float>& gtok,
                       std::vector<float>& gpos) {
  gtok = p.gtok0;
  gpos = p.gpos0;
  ref_index_add(gtok, p.dout, p.ids, p.D);
  ref_index_add(gpos, p.dout, with_pids ? p.pids : default_positions(p.B, p.T, start), p.D);
}

TEST(OpsBackward, ReferenceOrderWithHotRowsBothGradients) {
  // B = 70: every position has 70 sources (> 64, so blocks); token row 0 has
  // 300, row 1 exactly 64, row 2 exactly 65.
  const auto p = make_backward(70, 12, 40, 16, 9, 300, 31);
  std::vector<float> gtok, gpos;
  expected_backward(p, false, 3, gtok, gpos);
  // The test can tell the block order from one-at-a-time.
  std::vector<float> naive_tok = p.gtok0, naive_pos = p.gpos0;
  naive_index_add(naive_tok, p.dout, p.ids, p.D);
  naive_index_add(naive_pos, p.dout, default_positions(p.B, p.T, 3), p.D);
  ASSERT_FALSE(equal_bits(naive_tok, gtok));
  ASSERT_FALSE(equal_bits(naive_pos, gpos));
  for (DLDataType id_t : {kI64, kI32}) {
    const auto r = run_backward(p, id_t, true, true, false, 3);
    ASSERT_EQ(r.st, TOKPOS_OK) << tokpos_last_error();
    EXPECT_TRUE(equal_bits(r.gtok, gtok)) << dname(id_t) << " " << first_diff(as_bytes(r.gtok), as_bytes(gtok), 4);
    EXPECT_TRUE(equal_bits(r.gpos, gpos)) << dname(id_t) << " " << first_diff(as_bytes(r.gpos), as_bytes(gpos), 4);
  }
}

TEST(OpsBackward, ExplicitPositionIdsAndEitherGradientNull) {
  const auto p = make_backward(6, 40, 30, 12, 5, 90, 32);
  std::vector<float> gtok, gpos;
  expected_backward(p, true, 0, gtok, gpos);
  for (DLDataType id_t : {kI64, kI32}) {
    auto r = run_backward(p, id_t, true, true, true, 0);
    ASSERT_EQ(r.st, TOKPOS_OK) << tokpos_last_error();
    EXPECT_TRUE(equal_bits(r.gtok, gtok));
    EXPECT_TRUE(equal_bits(r.gpos, gpos));
    r = run_backward(p, id_t, false, true, true, 0);  // token gradient NULL
    ASSERT_EQ(r.st, TOKPOS_OK) << tokpos_last_error();
    EXPECT_TRUE(equal_bits(r.gtok, p.gtok0));
    EXPECT_TRUE(equal_bits(r.gpos, gpos));
    r = run_backward(p, id_t, true, false, true, 0);  // position gradient NULL
    ASSERT_EQ(r.st, TOKPOS_OK) << tokpos_last_error();
    EXPECT_TRUE(equal_bits(r.gtok, gtok));
    EXPECT_TRUE(equal_bits(r.gpos, p.gpos0));
  }
}

TEST(OpsBackward, OneDimensionalIdsWithStart) {
  const int64_t N = 600, V = 20, L = 720, D = 6;
  const auto p = make_backward(1, N, V, L, D, 100, 33);
  for (int64_t start : {0, 5, 99}) {
    std::vector<float> gtok = p.gtok0, gpos = p.gpos0;
    ref_index_add(gtok, p.dout, p.ids, D);
    ref_index_add(gpos, p.dout, default_positions(1, N, start), D);
    for (DLDataType id_t : {kI64, kI32}) {
      std::vector<float> rt = p.gtok0, rp = p.gpos0;
      const Bytes ib = encode_index(p.ids, id_t);
      DL gt(rt.data(), kF32, {V, D}), gp(rp.data(), kF32, {L, D}), d(p.dout.data(), kF32, {N, D}), i(ib.data(), id_t, {N});
      ASSERT_EQ(tokpos_op_compose_backward(gt.p(), gp.p(), d.p(), i.p(), nullptr, start), TOKPOS_OK) << tokpos_last_error();
      EXPECT_TRUE(equal_bits(rt, gtok)) << start;
      EXPECT_TRUE(equal_bits(rp, gpos)) << start;
    }
    // 1-D explicit position ids.
    std::vector<float> rt = p.gtok0, rp = p.gpos0, wp = p.gpos0;
    const auto pids = randint(N, 0, 7, 34);  // few positions: hot position rows
    ref_index_add(wp, p.dout, pids, D);
    DL gt(rt.data(), kF32, {V, D}), gp(rp.data(), kF32, {L, D}), d(p.dout.data(), kF32, {N, D}),
        i(p.ids.data(), kI64, {N}), pi(pids.data(), kI64, {N});
    ASSERT_EQ(tokpos_op_compose_backward(gt.p(), gp.p(), d.p(), i.p(), pi.p(), start), TOKPOS_OK) << tokpos_last_error();
    EXPECT_TRUE(equal_bits(rt, gtok));
    EXPECT_TRUE(equal_bits(rp, wp));
  }
}

TEST(OpsBackward, BitwiseIdenticalFor1And2And7Threads) {
  ThreadsGuard guard;
  // Large enough to be split between threads: 4*1024*64 and 96*32*80 elements.
  const BwdProblem problems[] = {make_backward(4, 1024, 300, 1024, 64, 2000, 35),
                                 make_backward(96, 32, 50, 40, 80, 700, 36)};
  for (const auto& p : problems) {
    std::vector<float> gtok, gpos;
    expected_backward(p, false, 0, gtok, gpos);
    std::vector<float> gtok_p, gpos_p;
    expected_backward(p, true, 0, gtok_p, gpos_p);
    for (int threads : {1, 2, 7}) {
      tokpos_set_num_threads(threads);
      auto r = run_backward(p, kI64, true, true, false, 0);
      ASSERT_EQ(r.st, TOKPOS_OK) << tokpos_last_error();
      EXPECT_TRUE(equal_bits(r.gtok, gtok)) << threads << " threads, B=" << p.B << ": "
                                            << first_diff(as_bytes(r.gtok), as_bytes(gtok), 4);
      EXPECT_TRUE(equal_bits(r.gpos, gpos)) << threads << " threads, B=" << p.B << ": "
                                            << first_diff(as_bytes(r.gpos), as_bytes(gpos), 4);
      r = run_backward(p, kI32, true, true, true, 0);
      ASSERT_EQ(r.st, TOKPOS_OK) << tokpos_last_error();
      EXPECT_TRUE(equal_bits(r.gtok, gtok_p)) << threads << " threads (position ids)";
      EXPECT_TRUE(equal_bits(r.gpos, gpos_p)) << threads << " threads (position ids)";
    }
  }
}

TEST(OpsForward, BitwiseIdenticalForAnyThreadCount) {
  ThreadsGuard guard;
  const Problem p(8, 512, 500, 512, 48, 37);
  for (int threads : {1, 2, 7}) {
    tokpos_set_num_threads(threads);
    for (DLDataType out_t : kFloatTypes) {
      const auto r = run_forward(p, kBF16, kF32, out_t, kI32, true, false, 0);
      ASSERT_EQ(r.st, TOKPOS_OK) << tokpos_last_error();
      EXPECT_EQ(r.out, expected_forward(p, kBF16, kF32, out_t, true, false, 0)) << threads << " " << dname(out_t);
    }
  }
}

TEST(OpsBackward, MatchesTheFloatCApi) {
  const auto p = make_backward(3, 200, 25, 200, 8, 150, 38);
  const auto r = run_backward(p, kI64, true, true, false, 0);
  ASSERT_EQ(r.st, TOKPOS_OK) << tokpos_last_error();
  std::vector<float> gtok = p.gtok0, gpos = p.gpos0;
  ASSERT_EQ(tokpos_compose_backward(gtok.data(), gpos.data(), p.dout.data(), p.ids.data(), p.B, p.T, p.V, p.L, p.D),
            TOKPOS_OK);
  EXPECT_TRUE(equal_bits(r.gtok, gtok));
  EXPECT_TRUE(equal_bits(r.gpos, gpos));
}

// Strided d_out (padded rows, byte offset), ids every other column,
// gradients with padded rows and byte offsets (padding must stay), and a
// d_out broadcast over B with stride 0.
TEST(OpsBackward, StridedAndBroadcastViews) {
  const auto p = make_backward(3, 50, 12, 60, 5, 80, 39);
  std::vector<float> gtok, gpos;
  expected_backward(p, false, 2, gtok, gpos);
  const Layout dl{{p.B, p.T, p.D}, {p.T * (p.D + 1) + 3, p.D + 1, 1}, 8};
  const Layout il{{p.B, p.T}, {2 * p.T, 2}, 16};
  const Layout gtl{{p.V, p.D}, {p.D + 4, 1}, 12};
  const Layout gpl{{p.L, p.D}, {p.D + 1, 1}, 4};
  Buffer db(extent(dl, 4), 0x11), ib(extent(il, 8), 0x22), gtb(extent(gtl, 4) + 32, 0x33), gpb(extent(gpl, 4) + 32, 0x44);
  scatter(db.data(), dl, 4, as_bytes(p.dout));
  scatter(ib.data(), il, 8, encode_index(p.ids, kI64));
  scatter(gtb.data(), gtl, 4, as_bytes(p.gtok0));
  scatter(gpb.data(), gpl, 4, as_bytes(p.gpos0));
  Buffer want_t(gtb.size(), 0x33), want_p(gpb.size(), 0x44);
  scatter(want_t.data(), gtl, 4, as_bytes(gtok));
  scatter(want_p.data(), gpl, 4, as_bytes(gpos));
  DL gt(gtb.data(), kF32, gtl), gp(gpb.data(), kF32, gpl), d(db.data(), kF32, dl), i(ib.data(), kI64, il);
  ASSERT_EQ(tokpos_op_compose_backward(gt.p(), gp.p(), d.p(), i.p(), nullptr, 2), TOKPOS_OK) << tokpos_last_error();
  EXPECT_EQ(gtb.bytes(), want_t.bytes());
  EXPECT_EQ(gpb.bytes(), want_p.bytes());

  // d_out and ids broadcast over B (stride 0).
  const int64_t B = 80, T = 4;  // each position then has 80 sources: blocks
  const auto row_ids = randint(T, 0, p.V, 40);
  const auto row_dout = noise(static_cast<size_t>(T * p.D), 41);
  std::vector<int64_t> ids;
  std::vector<float> dout;
  for (int64_t b = 0; b < B; ++b) {
    ids.insert(ids.end(), row_ids.begin(), row_ids.end());
    dout.insert(dout.end(), row_dout.begin(), row_dout.end());
  }
  std::vector<float> wt = p.gtok0, wp = p.gpos0, rt = p.gtok0, rp = p.gpos0;
  ref_index_add(wt, dout, ids, p.D);
  ref_index_add(wp, dout, default_positions(B, T, 0), p.D);
  DL gt2(rt.data(), kF32, {p.V, p.D}), gp2(rp.data(), kF32, {p.L, p.D}), d2(row_dout.data(), kF32, {B, T, p.D}, {0, p.D, 1}),
      i2(row_ids.data(), kI64, {B, T}, {0, 1});
  ASSERT_EQ(tokpos_op_compose_backward(gt2.p(), gp2.p(), d2.p(), i2.p(), nullptr, 0), TOKPOS_OK) << tokpos_last_error();
  EXPECT_TRUE(equal_bits(rt, wt));
  EXPECT_TRUE(equal_bits(rp, wp));
}

TEST(OpsBackward, EmptyBatchWithNullDataChangesNothing) {
  std::vector<float> gt(12, 1.5f), gp(8, 2.5f);
  DL t(gt.data(), kF32, {3, 4}), q(gp.data(), kF32, {2, 4}), d(nullptr, kF32, {0, 5, 4}), i(nullptr, kI64, {0, 5});
  EXPECT_EQ(tokpos_op_compose_backward(t.p(), q.p(), d.p(), i.p(), nullptr, 0), TOKPOS_OK) << tokpos_last_error();
  EXPECT_EQ(gt, std::vector<float>(12, 1.5f));
  EXPECT_EQ(gp, std::vector<float>(8, 2.5f));
}

// ======================================================================================
// Forward: refusals. Each case starts from a valid call (checked to
// succeed), changes one thing, and must get its status, a message naming
// the argument (and value), and leave every byte of out as it was.
// ======================================================================================

struct FwdCase {
  int64_t B = 2, T = 3, V = 10, L = 6, D = 4;
  std::vector<float> tokf, posf;
  std::vector<int64_t> idsv, pidsv;
  Buffer out{4096};  // generous: a wrong accept must not write past it
  DL o, i, tt, pt, pi;
  bool use_pos = true, use_pids = false;
  int64_t start = 0;
  FwdCase() {
    tokf = noise(static_cast<size_t>(V * D) * 4, 50);  // room for strided misreads
    posf = noise(static_cast<size_t>(L * D) * 4, 51);
    idsv = {1, 2, 3, 4, 5, 6, 0, 0, 0, 0, 0, 0};
    pidsv = {0, 1, 2, 3, 4, 5, 0, 0, 0, 0, 0, 0};
    o = DL(out.data(), kF32, {B, T, D});
    i = DL(idsv.data(), kI64, {B, T});
    tt = DL(tokf.data(), kF32, {V, D});
    pt = DL(posf.data(), kF32, {L, D});
    pi = DL(pidsv.data(), kI64, {B, T});
  }
  tokpos_status call() {
    std::memset(out.data(), 0xA5, out.size());
    return tokpos_op_compose_forward(o.p(), i.p(), tt.p(), use_pos ? pt.p() : nullptr, use_pids ? pi.p() : nullptr,
                                     start);
  }
  bool out_untouched() const {
    for (size_t k = 0; k < out.size(); ++k)
      if (out.data()[k] != 0xA5) return false;
    return true;
  }
};

// Runs the mutated case: status in allowed, out untouched, message has pieces.
void refuse(const char* what, const std::function<void(FwdCase&)>& mutate,
            std::initializer_list<tokpos_status> allowed, std::initializer_list<std::string> pieces) {
  SCOPED_TRACE(what);
  {
    FwdCase ok;
    ok.use_pids = true;
    ASSERT_EQ(ok.call(), TOKPOS_OK) << "the unmodified case must pass: " << tokpos_last_error();
  }
  FwdCase c;
  mutate(c);
  const tokpos_status st = c.call();
  EXPECT_TRUE(status_in(st, allowed));
  EXPECT_TRUE(c.out_untouched()) << "out was written by a refused call";
  if (st != TOKPOS_OK) {
    EXPECT_TRUE(message_has(pieces));
  }
}

constexpr tokpos_status kUnimpl = TOKPOS_UNIMPLEMENTED, kInval = TOKPOS_INVALID_ARGUMENT,
                        kShape = TOKPOS_SHAPE_MISMATCH, kNull = TOKPOS_NULL_POINTER,
                        kOverflow = TOKPOS_SIZE_OVERFLOW, kIdRange = TOKPOS_ID_OUT_OF_RANGE,
                        kPosRange = TOKPOS_POSITION_OUT_OF_RANGE;

// A dtype DLPack expresses but tokpos does not take in that role:
// TOKPOS_UNIMPLEMENTED, as tokpos.h defines it ("valid but not supported (yet): ... a dtype").
TEST(OpsForwardRefuses, UnsupportedDtypesAsUnimplemented) {
  refuse("float128 token_table",
         [](FwdCase& c) {
           c.tt.t.dtype = {kDLFloat, 128, 1};
         },
         {kUnimpl}, {"token_table", "128"});
  refuse("complex128 pos_table",
         [](FwdCase& c) {
           c.pt.t.dtype = {kDLComplex, 128, 1};
         },
         {kUnimpl}, {"pos_table"});
  refuse("int32 token_table", [](FwdCase& c) { c.tt.t.dtype = kI32; }, {kUnimpl}, {"token_table"});
  refuse("complex64 token_table", [](FwdCase& c) { c.tt.t.dtype = {kDLComplex, 64, 1}; }, {kUnimpl}, {"token_table"});
  refuse("float8 out", [](FwdCase& c) { c.o.t.dtype = {kDLFloat, 8, 1}; }, {kUnimpl}, {"out"});
  refuse("int64 out", [](FwdCase& c) { c.o.t.dtype = kI64; }, {kUnimpl}, {"out"});
  refuse("float128 out", [](FwdCase& c) { c.o.t.dtype = {kDLFloat, 128, 1}; }, {kUnimpl}, {"out"});
  refuse("uint8 ids", [](FwdCase& c) { c.i.t.dtype = {kDLUInt, 8, 1}; }, {kUnimpl}, {"ids"});
  refuse("int16 ids", [](FwdCase& c) { c.i.t.dtype = {kDLInt, 16, 1}; }, {kUnimpl}, {"ids", "16"});
  refuse("uint64 ids", [](FwdCase& c) { c.i.t.dtype = {kDLUInt, 64, 1}; }, {kUnimpl}, {"ids"});
  refuse("float32 ids", [](FwdCase& c) { c.i.t.dtype = kF32; }, {kUnimpl}, {"ids"});
  refuse("uint8 position_ids", [](FwdCase& c) { c.use_pids = true; c.pi.t.dtype = {kDLUInt, 8, 1}; }, {kUnimpl},
         {"position_ids"});
  refuse("bf16 position_ids", [](FwdCase& c) { c.use_pids = true; c.pi.t.dtype = kBF16; }, {kUnimpl}, {"position_ids"});
}

// Not a DLPack type at all (code 77, float 7 bits) or a vector type (lanes
// != 1): the headers do not pick between "unsupported" and "invalid", so
// either is accepted.
TEST(OpsForwardRefuses, NonTypesAndLanes) {
  refuse("code 77 token_table", [](FwdCase& c) { c.tt.t.dtype = {77, 32, 1}; }, {kUnimpl, kInval}, {"token_table"});
  refuse("float 7 bits out", [](FwdCase& c) { c.o.t.dtype = {kDLFloat, 7, 1}; }, {kUnimpl, kInval}, {"out"});
  refuse("lanes 2 token_table", [](FwdCase& c) { c.tt.t.dtype.lanes = 2; }, {kUnimpl, kInval}, {"token_table"});
  refuse("lanes 4 out", [](FwdCase& c) { c.o.t.dtype.lanes = 4; }, {kUnimpl, kInval}, {"out"});
  refuse("lanes 0 ids", [](FwdCase& c) { c.i.t.dtype.lanes = 0; }, {kUnimpl, kInval}, {"ids"});
  refuse("lanes 2 pos_table", [](FwdCase& c) { c.pt.t.dtype.lanes = 2; }, {kUnimpl, kInval}, {"pos_table"});
  refuse("lanes 2 position_ids", [](FwdCase& c) { c.use_pids = true; c.pi.t.dtype.lanes = 2; }, {kUnimpl, kInval},
         {"position_ids"});
}

TEST(OpsForwardRefuses, WrongNdim) {
  refuse("ids 3-D", [](FwdCase& c) { c.i.shape = {2, 3, 1}; }, {kInval}, {"ids", "3"});
  refuse("ids 0-D", [](FwdCase& c) { c.i.shape = {}; }, {kInval, kShape}, {"ids"});
  refuse("token_table 1-D", [](FwdCase& c) { c.tt.shape = {40}; }, {kInval}, {"token_table"});
  refuse("token_table 3-D", [](FwdCase& c) { c.tt.shape = {10, 4, 1}; }, {kInval}, {"token_table"});
  refuse("pos_table 1-D", [](FwdCase& c) { c.pt.shape = {24}; }, {kInval}, {"pos_table"});
  // out 4-D is never valid, and also disagrees with the ids: either status.
  refuse("out 4-D", [](FwdCase& c) { c.o.shape = {2, 3, 4, 1}; }, {kInval, kShape}, {"out"});
  refuse("out 2-D with 2-D ids", [](FwdCase& c) { c.o.shape = {6, 4}; }, {kInval, kShape}, {"out"});
  refuse("out 3-D with 1-D ids", [](FwdCase& c) { c.i.shape = {6}; }, {kInval, kShape}, {"out"});
  refuse("position_ids 1-D with 2-D ids", [](FwdCase& c) { c.use_pids = true; c.pi.shape = {6}; }, {kInval, kShape},
         {"position_ids"});
}

TEST(OpsForwardRefuses, ShapesThatDisagree) {
  refuse("token_table D 5, out D 4", [](FwdCase& c) { c.tt.shape = {8, 5}; }, {kShape}, {"5", "4"});
  refuse("pos_table D 5, token D 4", [](FwdCase& c) { c.pt.shape = {4, 5}; }, {kShape}, {"pos_table", "5", "4"});
  refuse("out D 5, tables D 4", [](FwdCase& c) { c.o.shape = {2, 3, 5}; }, {kShape}, {"5", "4"});
  refuse("out (2, 2, 4) for ids (2, 3)", [](FwdCase& c) { c.o.shape = {2, 2, 4}; }, {kShape}, {"out"});
  refuse("out (1, 3, 4) for ids (2, 3)", [](FwdCase& c) { c.o.shape = {1, 3, 4}; }, {kShape}, {"out"});
  refuse("out (5, 4) for ids (6)", [](FwdCase& c) { c.i.shape = {6}; c.o.shape = {5, 4}; }, {kShape}, {"out"});
  refuse("position_ids (2, 2) for ids (2, 3)", [](FwdCase& c) { c.use_pids = true; c.pi.shape = {2, 2}; }, {kShape},
         {"position_ids"});
}

// Innermost (D) stride other than 1: not among the accepted layouts; the
// headers name no status for it, so "invalid" or "unsupported".
TEST(OpsForwardRefuses, NonUnitInnerStride) {
  refuse("token_table inner stride 2", [](FwdCase& c) { c.tt.strides = {8, 2}; }, {kInval, kUnimpl}, {"token_table"});
  refuse("token_table inner stride 0", [](FwdCase& c) { c.tt.strides = {4, 0}; }, {kInval, kUnimpl}, {"token_table"});
  refuse("pos_table inner stride 2", [](FwdCase& c) { c.pt.strides = {8, 2}; }, {kInval, kUnimpl}, {"pos_table"});
  refuse("out inner stride 2", [](FwdCase& c) { c.o.strides = {24, 8, 2}; }, {kInval, kUnimpl}, {"out"});
  refuse("out inner stride -1",
         [](FwdCase& c) {
           c.o.strides = {12, 4, -1};
           c.o.t.byte_offset = 256;  // a wrong accept still writes inside the buffer
         },
         {kInval, kUnimpl}, {"out"});
}

TEST(OpsForwardRefuses, OtherDevicesAsUnimplementedNamingThem) {
  struct Dev {
    DLDeviceType type;
    const char* name;
  };
  for (Dev dev : {Dev{kDLCUDA, "CUDA"}, Dev{kDLCUDAHost, "CUDAHost"}, Dev{kDLMetal, "Metal"}, Dev{kDLROCM, "ROCM"}}) {
    for (int which = 0; which < 5; ++which) {
      const std::string what = std::string(dev.name) + " on argument " + std::to_string(which);
      refuse(what.c_str(),
             [&](FwdCase& c) {
               c.use_pids = true;
               DL* t[] = {&c.o, &c.i, &c.tt, &c.pt, &c.pi};
               t[which]->t.device = DLDevice{dev.type, 1};
             },
             {kUnimpl}, {});
      EXPECT_TRUE(names_device(tokpos_last_error(), dev.name, static_cast<int>(dev.type))) << what;
    }
  }
  const char* names[] = {"out", "ids", "token_table", "pos_table", "position_ids"};
  for (int which = 0; which < 5; ++which)
    refuse(names[which],
           [&](FwdCase& c) {
             c.use_pids = true;
             DL* t[] = {&c.o, &c.i, &c.tt, &c.pt, &c.pi};
             t[which]->t.device = DLDevice{kDLCUDA, 0};
           },
           {kUnimpl}, {names[which]});
  // 0 is no device at all: unsupported or invalid.
  refuse("device type 0", [](FwdCase& c) { c.tt.t.device = DLDevice{static_cast<DLDeviceType>(0), 0}; },
         {kUnimpl, kInval}, {"token_table"});
}

TEST(OpsForwardRefuses, NullPointers) {
  {
    FwdCase c;
    std::memset(c.out.data(), 0xA5, c.out.size());
    EXPECT_EQ(tokpos_op_compose_forward(nullptr, c.i.p(), c.tt.p(), c.pt.p(), nullptr, 0), kNull);
    EXPECT_TRUE(message_has({"out"}));
    EXPECT_EQ(tokpos_op_compose_forward(c.o.p(), nullptr, c.tt.p(), c.pt.p(), nullptr, 0), kNull);
    EXPECT_TRUE(message_has({"ids"}));
    EXPECT_EQ(tokpos_op_compose_forward(c.o.p(), c.i.p(), nullptr, c.pt.p(), nullptr, 0), kNull);
    EXPECT_TRUE(message_has({"token_table"}));
    EXPECT_TRUE(c.out_untouched());
  }
  refuse("out data NULL", [](FwdCase& c) { c.o.t.data = nullptr; }, {kNull}, {"out"});
  refuse("ids data NULL", [](FwdCase& c) { c.i.t.data = nullptr; }, {kNull}, {"ids"});
  refuse("token_table data NULL", [](FwdCase& c) { c.tt.t.data = nullptr; }, {kNull}, {"token_table"});
  refuse("pos_table data NULL", [](FwdCase& c) { c.pt.t.data = nullptr; }, {kNull}, {"pos_table"});
  refuse("position_ids data NULL", [](FwdCase& c) { c.use_pids = true; c.pi.t.data = nullptr; }, {kNull},
         {"position_ids"});
  refuse("shape NULL with ndim 2",
         [](FwdCase& c) {
           c.i.p();
           c.i.raw = true;
           c.i.t.shape = nullptr;
         },
         {kNull, kInval}, {"ids"});
  // An empty batch needs no ids, but a non-empty table must still have data.
  refuse("empty batch, token_table data NULL",
         [](FwdCase& c) {
           c.i.shape = {0, 3};
           c.o.shape = {0, 3, 4};
           c.tt.t.data = nullptr;
         },
         {kNull}, {"token_table"});
}

TEST(OpsForwardRefuses, OutOverlappingAnInput) {
  // One arena: token table, pos table, ids and position ids live in it, and
  // out is placed over each in turn.
  struct Arena {
    Buffer mem{8192, 0};
    float* f() { return reinterpret_cast<float*>(mem.data()); }
  };
  for (int target = 0; target < 4; ++target) {
    Arena a;
    float* tok = a.f();                                        // [0, 40) floats
    float* pos = a.f() + 64;                                   // [64, 88)
    auto* ids = reinterpret_cast<int64_t*>(a.f() + 128);       // 6 int64 = [128, 140)
    auto* pids = reinterpret_cast<int64_t*>(a.f() + 160);      // [160, 172)
    const auto tokv = noise(40, 60), posv = noise(24, 61);
    std::memcpy(tok, tokv.data(), 160);
    std::memcpy(pos, posv.data(), 96);
    for (int k = 0; k < 6; ++k) ids[k] = k + 1, pids[k] = k;
    float* where[] = {tok + 12, pos + 20, a.f() + 120, a.f() + 150};  // out (2,3,4) = 24 floats from here
    const char* names[] = {"token_table", "pos_table", "ids", "position_ids"};
    SCOPED_TRACE(std::string("out over ") + names[target]);
    DL o(where[target], kF32, {2, 3, 4}), i(ids, kI64, {2, 3}), tt(tok, kF32, {10, 4}), pt(pos, kF32, {6, 4}),
        pi(pids, kI64, {2, 3});
    const Bytes before = a.mem.bytes();
    EXPECT_EQ(tokpos_op_compose_forward(o.p(), i.p(), tt.p(), pt.p(), pi.p(), 0), kInval);
    EXPECT_TRUE(message_has({"out", names[target]}));
    EXPECT_EQ(a.mem.bytes(), before) << "a refused call wrote";
  }
  // Overlap through a byte offset and strides: out's rows interleave the table's rows.
  Arena a;
  const auto tokv = noise(80, 62);
  std::memcpy(a.f(), tokv.data(), 320);
  const std::vector<int64_t> ids = {1, 2, 3, 4, 5, 6};
  DL tt(a.f(), kF32, {10, 4}, {8, 1}), o(a.f(), kF32, {2, 3, 4}, {24, 8, 1}, 4 * 26), i(ids.data(), kI64, {2, 3});
  const Bytes before = a.mem.bytes();
  EXPECT_EQ(tokpos_op_compose_forward(o.p(), i.p(), tt.p(), nullptr, nullptr, 0), kInval);
  EXPECT_EQ(a.mem.bytes(), before);
}

TEST(OpsForwardRefuses, OutOverlappingItself) {
  refuse("out stride 0 over B = 2", [](FwdCase& c) { c.o.strides = {0, 4, 1}; }, {kInval}, {"out"});
  refuse("out stride 0 over T = 3", [](FwdCase& c) { c.o.strides = {12, 0, 1}; }, {kInval}, {"out"});
  refuse("out rows 3 apart, 4 wide", [](FwdCase& c) { c.o.strides = {12, 3, 1}; }, {kInval}, {"out"});
  refuse("out batches overlap", [](FwdCase& c) { c.o.strides = {8, 4, 1}; }, {kInval}, {"out"});
  refuse("1-D ids, out rows overlap", [](FwdCase& c) { c.i.shape = {6}; c.o.shape = {6, 4}; c.o.strides = {2, 1}; },
         {kInval}, {"out"});
}

TEST(OpsForwardRefuses, NegativeShapes) {
  refuse("ids (2, -3)", [](FwdCase& c) { c.i.shape = {2, -3}; c.o.shape = {2, -3, 4}; }, {kInval}, {"-3"});
  refuse("ids (-2, 3)", [](FwdCase& c) { c.i.shape = {-2, 3}; }, {kInval, kShape}, {"-2"});
  refuse("token_table (-1, 4)", [](FwdCase& c) { c.tt.shape = {-1, 4}; }, {kInval}, {"token_table", "-1"});
  refuse("pos_table (6, -4)", [](FwdCase& c) { c.pt.shape = {6, -4}; }, {kInval, kShape}, {"pos_table", "-4"});
  refuse("out (2, 3, -4)", [](FwdCase& c) { c.o.shape = {2, 3, -4}; }, {kInval, kShape}, {"out", "-4"});
  refuse("1-D ids (-6)", [](FwdCase& c) { c.i.shape = {-6}; c.o.shape = {-6, 4}; }, {kInval}, {"-6"});
}

TEST(OpsForwardRefuses, SizesThatOverflow) {
  const int64_t big = int64_t{1} << 40;
  refuse("ids (2^40, 2^40)", [&](FwdCase& c) { c.i.shape = {big, big}; c.o.shape = {big, big, 4}; }, {kOverflow}, {});
  refuse("token_table (2^40, 2^40)", [&](FwdCase& c) { c.tt.shape = {big, big}; c.o.shape = {2, 3, big}; c.use_pos = false; },
         {kOverflow}, {"token_table"});
  // 2^62 elements fit int64, their bytes do not.
  refuse("int32 ids (2^31, 2^31), out (2^31, 2^31, 1)",
         [&](FwdCase& c) {
           c.i.t.dtype = kI32;
           c.i.shape = {int64_t{1} << 31, int64_t{1} << 31};
           c.o.shape = {int64_t{1} << 31, int64_t{1} << 31, 1};
           c.tt.shape = {40, 1};
           c.use_pos = false;
         },
         {kOverflow}, {});
  refuse("ids stride 2^62", [](FwdCase& c) { c.i.strides = {int64_t{1} << 62, 1}; }, {kOverflow}, {"ids"});
  refuse("token_table row stride 2^61", [](FwdCase& c) { c.tt.strides = {int64_t{1} << 61, 1}; }, {kOverflow},
         {"token_table"});
  refuse("out stride 2^62", [](FwdCase& c) { c.o.strides = {int64_t{1} << 62, 4, 1}; }, {kOverflow}, {"out"});
}

TEST(OpsForwardRefuses, PositionsPastTheTable) {
  // start + t: positions 5..7 with L = 6.
  refuse("start 5, T 3, L 6", [](FwdCase& c) { c.start = 5; }, {kPosRange}, {"6"});
  refuse("start 4, T 3, L 6 (last position 6 = L)", [](FwdCase& c) { c.start = 4; }, {kPosRange}, {"6"});
  // One position id past the table, at the last (b, t).
  refuse("position id 23, L 9",
         [](FwdCase& c) {
           c.use_pids = true;
           c.pt.shape = {9, 4};
           c.pidsv[5] = 23;
         },
         {kPosRange}, {"23", "9"});
  // int32 position ids too.
  refuse("int32 position id 40, L 6",
         [](FwdCase& c) {
           c.use_pids = true;
           c.pi.t.dtype = kI32;
           auto* p32 = reinterpret_cast<int32_t*>(c.pidsv.data());
           for (int k = 0; k < 6; ++k) p32[k] = k % 5;
           p32[4] = 40;
         },
         {kPosRange}, {"40"});
  // Negative positions: out of range or invalid, the headers do not choose.
  refuse("position id -4",
         [](FwdCase& c) {
           c.use_pids = true;
           c.pidsv[3] = -4;
         },
         {kPosRange, kInval}, {"-4"});
  refuse("start -1", [](FwdCase& c) { c.start = -1; }, {kPosRange, kInval}, {"-1"});
  // start + t overflowing int64 must be caught, not computed.
  refuse("start INT64_MAX - 1", [](FwdCase& c) { c.start = std::numeric_limits<int64_t>::max() - 1; },
         {kPosRange, kInval, kOverflow}, {});
}

TEST(OpsForwardRefuses, IdsOutOfRangeNameTheirPlace) {
  refuse("id 37 at (b=1, t=2)", [](FwdCase& c) { c.idsv[5] = 37; }, {kIdRange}, {"(b=1, t=2)", "37", "10"});
  refuse("id 10 = V at (b=1, t=0)", [](FwdCase& c) { c.idsv[3] = 10; }, {kIdRange}, {"(b=1, t=0)", "10"});
  refuse("id -5 at (b=0, t=1)", [](FwdCase& c) { c.idsv[1] = -5; }, {kIdRange}, {"(b=0, t=1)", "-5"});
  refuse("int32 id 99 at (b=1, t=2)",
         [](FwdCase& c) {
           c.i.t.dtype = kI32;
           auto* p32 = reinterpret_cast<int32_t*>(c.idsv.data());
           for (int k = 0; k < 6; ++k) p32[k] = k;
           p32[5] = 99;
         },
         {kIdRange}, {"(b=1, t=2)", "99"});
  refuse("int64 id 2^40", [](FwdCase& c) { c.idsv[4] = int64_t{1} << 40; }, {kIdRange}, {"1099511627776"});
  refuse("1-D ids: id 12 at n=4", [](FwdCase& c) { c.i.shape = {6}; c.o.shape = {6, 4}; c.idsv[4] = 12; }, {kIdRange},
         {"12"});
}

TEST(OpsForwardRefuses, MisalignedData) {
  refuse("token_table data + 1 byte",
         [](FwdCase& c) { c.tt.t.data = reinterpret_cast<unsigned char*>(c.tokf.data()) + 1; }, {kInval},
         {"token_table"});
  refuse("token_table byte_offset 2 (f32)", [](FwdCase& c) { c.tt.t.byte_offset = 2; }, {kInval}, {"token_table"});
  refuse("ids (int64) data + 4 bytes", [](FwdCase& c) { c.i.t.data = reinterpret_cast<unsigned char*>(c.idsv.data()) + 4; },
         {kInval}, {"ids"});
  refuse("out data + 2 bytes", [](FwdCase& c) { c.o.t.data = c.out.data() + 2; }, {kInval}, {"out"});
  refuse("out byte_offset 1", [](FwdCase& c) { c.o.t.byte_offset = 1; }, {kInval}, {"out"});
  refuse("bf16 pos_table data + 1 byte",
         [](FwdCase& c) {
           c.pt.t.dtype = kBF16;
           c.pt.t.data = reinterpret_cast<unsigned char*>(c.posf.data()) + 1;
         },
         {kInval}, {"pos_table"});
  refuse("position_ids byte_offset 3",
         [](FwdCase& c) {
           c.use_pids = true;
           c.pi.t.byte_offset = 3;
         },
         {kInval}, {"position_ids"});
}

// ======================================================================================
// Backward: refusals (gradients must stay exactly as they were).
// ======================================================================================

struct BwdCase {
  int64_t B = 2, T = 3, V = 10, L = 6, D = 4;
  Buffer gt{4096, 0}, gp{4096, 0};
  std::vector<float> doutv;
  std::vector<int64_t> idsv, pidsv;
  DL t, q, d, i, pi;
  bool want_tok = true, want_pos = true, use_pids = false;
  int64_t start = 0;
  Bytes gt0, gp0;
  BwdCase() {
    const auto a = noise(1024, 70), b = noise(1024, 71);
    std::memcpy(gt.data(), a.data(), 4096);
    std::memcpy(gp.data(), b.data(), 4096);
    gt0 = gt.bytes();
    gp0 = gp.bytes();
    doutv = noise(static_cast<size_t>(B * T * D) * 4, 72);
    idsv = {1, 2, 3, 4, 5, 6, 0, 0, 0, 0, 0, 0};
    pidsv = {0, 1, 2, 3, 4, 5, 0, 0, 0, 0, 0, 0};
    t = DL(gt.data(), kF32, {V, D});
    q = DL(gp.data(), kF32, {L, D});
    d = DL(doutv.data(), kF32, {B, T, D});
    i = DL(idsv.data(), kI64, {B, T});
    pi = DL(pidsv.data(), kI64, {B, T});
  }
  tokpos_status call() {
    return tokpos_op_compose_backward(want_tok ? t.p() : nullptr, want_pos ? q.p() : nullptr, d.p(), i.p(),
                                      use_pids ? pi.p() : nullptr, start);
  }
  bool untouched() const { return gt.bytes() == gt0 && gp.bytes() == gp0; }
};

void refuse_bwd(const char* what, const std::function<void(BwdCase&)>& mutate,
                std::initializer_list<tokpos_status> allowed, std::initializer_list<std::string> pieces) {
  SCOPED_TRACE(what);
  {
    BwdCase ok;
    ok.use_pids = true;
    ASSERT_EQ(ok.call(), TOKPOS_OK) << "the unmodified case must pass: " << tokpos_last_error();
  }
  BwdCase c;
  mutate(c);
  const tokpos_status st = c.call();
  EXPECT_TRUE(status_in(st, allowed));
  EXPECT_TRUE(c.untouched()) << "a gradient was written by a refused call";
  if (st != TOKPOS_OK) {
    EXPECT_TRUE(message_has(pieces));
  }
}

TEST(OpsBackwardRefuses, NonFloat32GradientsAndDoutAsUnimplemented) {
  refuse_bwd("f16 d_token_table", [](BwdCase& c) { c.t.t.dtype = kF16; }, {kUnimpl}, {"d_token_table"});
  refuse_bwd("bf16 d_token_table", [](BwdCase& c) { c.t.t.dtype = kBF16; }, {kUnimpl}, {"d_token_table"});
  refuse_bwd("f16 d_pos_table", [](BwdCase& c) { c.q.t.dtype = kF16; }, {kUnimpl}, {"d_pos_table"});
  refuse_bwd("float128 d_pos_table",
             [](BwdCase& c) {
               c.q.t.dtype = {kDLFloat, 128, 1};
             },
             {kUnimpl}, {"d_pos_table"});
  refuse_bwd("bf16 d_out", [](BwdCase& c) { c.d.t.dtype = kBF16; }, {kUnimpl}, {"d_out"});
  refuse_bwd("f16 d_out", [](BwdCase& c) { c.d.t.dtype = kF16; }, {kUnimpl}, {"d_out"});
  refuse_bwd("int16 ids", [](BwdCase& c) { c.i.t.dtype = {kDLInt, 16, 1}; }, {kUnimpl}, {"ids"});
  refuse_bwd("uint8 ids", [](BwdCase& c) { c.i.t.dtype = {kDLUInt, 8, 1}; }, {kUnimpl}, {"ids"});
  refuse_bwd("lanes 2 d_out", [](BwdCase& c) { c.d.t.dtype.lanes = 2; }, {kUnimpl, kInval}, {"d_out"});
  refuse_bwd("lanes 2 d_token_table", [](BwdCase& c) { c.t.t.dtype.lanes = 2; }, {kUnimpl, kInval}, {"d_token_table"});
}

TEST(OpsBackwardRefuses, ShapesAndNdim) {
  refuse_bwd("d_token_table D 5", [](BwdCase& c) { c.t.shape = {8, 5}; }, {kShape}, {"d_token_table", "5", "4"});
  refuse_bwd("d_pos_table D 3", [](BwdCase& c) { c.q.shape = {6, 3}; }, {kShape}, {"d_pos_table", "3", "4"});
  refuse_bwd("d_out (2, 2, 4) for ids (2, 3)", [](BwdCase& c) { c.d.shape = {2, 2, 4}; }, {kShape}, {"d_out"});
  refuse_bwd("ids 3-D", [](BwdCase& c) { c.i.shape = {2, 3, 1}; }, {kInval}, {"ids"});
  refuse_bwd("d_token_table 1-D", [](BwdCase& c) { c.t.shape = {40}; }, {kInval}, {"d_token_table"});
  refuse_bwd("d_out 4-D", [](BwdCase& c) { c.d.shape = {2, 3, 4, 1}; }, {kInval, kShape}, {"d_out"});
  refuse_bwd("position_ids (2, 2)", [](BwdCase& c) { c.use_pids = true; c.pi.shape = {2, 2}; }, {kShape},
             {"position_ids"});
  refuse_bwd("negative V", [](BwdCase& c) { c.t.shape = {-10, 4}; }, {kInval}, {"-10"});
  refuse_bwd("ids (2^40, 2^40)",
             [](BwdCase& c) {
               c.i.shape = {int64_t{1} << 40, int64_t{1} << 40};
               c.d.shape = {int64_t{1} << 40, int64_t{1} << 40, 4};
             },
             {kOverflow}, {});
  refuse_bwd("d_out inner stride 2", [](BwdCase& c) { c.d.strides = {24, 8, 2}; }, {kInval, kUnimpl}, {"d_out"});
  refuse_bwd("d_token_table inner stride 2", [](BwdCase& c) { c.t.strides = {8, 2}; }, {kInval, kUnimpl},
             {"d_token_table"});
}

TEST(OpsBackwardRefuses, DevicesNullsAndAlignment) {
  refuse_bwd("d_token_table on CUDA", [](BwdCase& c) { c.t.t.device = DLDevice{kDLCUDA, 0}; }, {kUnimpl},
             {"d_token_table"});
  EXPECT_TRUE(names_device(tokpos_last_error(), "CUDA", 2));
  refuse_bwd("d_out on CUDA", [](BwdCase& c) { c.d.t.device = DLDevice{kDLCUDA, 0}; }, {kUnimpl}, {"d_out"});
  EXPECT_TRUE(names_device(tokpos_last_error(), "CUDA", 2));
  refuse_bwd("ids on Vulkan", [](BwdCase& c) { c.i.t.device = DLDevice{kDLVulkan, 0}; }, {kUnimpl}, {"ids"});
  EXPECT_TRUE(names_device(tokpos_last_error(), "Vulkan", 7));
  {
    BwdCase c;
    EXPECT_EQ(tokpos_op_compose_backward(c.t.p(), c.q.p(), nullptr, c.i.p(), nullptr, 0), kNull);
    EXPECT_TRUE(message_has({"d_out"}));
    EXPECT_EQ(tokpos_op_compose_backward(c.t.p(), c.q.p(), c.d.p(), nullptr, nullptr, 0), kNull);
    EXPECT_TRUE(message_has({"ids"}));
    EXPECT_TRUE(c.untouched());
  }
  refuse_bwd("d_token_table data NULL", [](BwdCase& c) { c.t.t.data = nullptr; }, {kNull}, {"d_token_table"});
  refuse_bwd("d_out data NULL", [](BwdCase& c) { c.d.t.data = nullptr; }, {kNull}, {"d_out"});
  refuse_bwd("d_pos_table byte_offset 2", [](BwdCase& c) { c.q.t.byte_offset = 2; }, {kInval}, {"d_pos_table"});
  refuse_bwd("d_out data + 1", [](BwdCase& c) { c.d.t.data = reinterpret_cast<unsigned char*>(c.doutv.data()) + 1; },
             {kInval}, {"d_out"});
}

TEST(OpsBackwardRefuses, IdsAndPositionsOutOfRange) {
  refuse_bwd("id 37 at (b=1, t=2)", [](BwdCase& c) { c.idsv[5] = 37; }, {kIdRange}, {"(b=1, t=2)", "37"});
  refuse_bwd("id -1 at (b=0, t=0)", [](BwdCase& c) { c.idsv[0] = -1; }, {kIdRange}, {"(b=0, t=0)", "-1"});
  refuse_bwd("start 4 with L 6", [](BwdCase& c) { c.start = 4; }, {kPosRange}, {"6"});
  refuse_bwd("position id 17", [](BwdCase& c) { c.use_pids = true; c.pidsv[5] = 17; }, {kPosRange}, {"17"});
  refuse_bwd("position id -2", [](BwdCase& c) { c.use_pids = true; c.pidsv[2] = -2; }, {kPosRange, kInval}, {"-2"});
  // Only the token gradient wanted: an id out of range still fails, and
  // still nothing is written.
  refuse_bwd("id 10, no d_pos_table", [](BwdCase& c) { c.want_pos = false; c.idsv[4] = 10; }, {kIdRange},
             {"(b=1, t=1)", "10"});
}

TEST(OpsBackwardRefuses, GradientsOverlapping) {
  refuse_bwd("d_token_table stride 0 over V", [](BwdCase& c) { c.t.strides = {0, 1}; }, {kInval}, {"d_token_table"});
  refuse_bwd("d_pos_table rows overlap", [](BwdCase& c) { c.q.strides = {2, 1}; }, {kInval}, {"d_pos_table"});
  refuse_bwd("d_pos_table inside d_token_table",
             [](BwdCase& c) { c.q.t.data = c.gt.data() + 16 * 4; }, {kInval}, {"d_pos_table", "d_token_table"});
  refuse_bwd("d_token_table over d_out",
             [](BwdCase& c) {
               std::memcpy(c.gt.data(), c.doutv.data(), c.doutv.size() * 4);
               c.gt0 = c.gt.bytes();
               c.d.t.data = c.gt.data() + 32;
             },
             {kInval}, {"d_token_table", "d_out"});
  refuse_bwd("d_pos_table over ids",
             [](BwdCase& c) {
               auto* ids = reinterpret_cast<int64_t*>(c.gp.data() + 64);
               for (int k = 0; k < 6; ++k) ids[k] = k;
               c.gp0 = c.gp.bytes();
               c.i.t.data = ids;
             },
             {kInval}, {"d_pos_table", "ids"});
  refuse_bwd("d_pos_table over position_ids",
             [](BwdCase& c) {
               c.use_pids = true;
               auto* p = reinterpret_cast<int64_t*>(c.gp.data() + 48);
               for (int k = 0; k < 6; ++k) p[k] = k;
               c.gp0 = c.gp.bytes();
               c.pi.t.data = p;
             },
             {kInval}, {"d_pos_table", "position_ids"});
}

// ======================================================================================
// The C++ ops: TensorView, RowPlan, LookupOptions, token_gradient_rows, Context.
// ======================================================================================

using tokpos::DType;
using tokpos::TensorView;
namespace ops = tokpos::ops;

tokpos::Status thrown(const std::function<void()>& f, std::string* message = nullptr) {
  try {
    f();
  } catch (const tokpos::Error& e) {
    if (message) *message = e.what();
    return e.status();
  }
  return tokpos::Status::kOk;
}

TEST(OpsCpp, ToDlpackAndTensorView) {
  EXPECT_TRUE(same(tokpos::to_dlpack(DType::kF32), kF32));
  EXPECT_TRUE(same(tokpos::to_dlpack(DType::kBF16), kBF16));
  EXPECT_TRUE(same(tokpos::to_dlpack(DType::kF16), kF16));
  EXPECT_TRUE(same(tokpos::to_dlpack(DType::kI32), kI32));
  EXPECT_TRUE(same(tokpos::to_dlpack(DType::kI64), kI64));
  EXPECT_TRUE(same(tokpos::to_dlpack(DType::kF64), DLDataType{kDLFloat, 64, 1}));
  float x[24] = {};
  const TensorView v(x, DType::kBF16, {2, 3, 4});
  const DLTensor& t = v;
  EXPECT_EQ(t.data, x);
  EXPECT_EQ(t.device.device_type, kDLCPU);
  EXPECT_EQ(t.ndim, 3);
  EXPECT_TRUE(same(t.dtype, kBF16));
  EXPECT_EQ(t.byte_offset, 0u);
  ASSERT_NE(t.shape, nullptr);
  EXPECT_EQ(t.shape[0], 2);
  EXPECT_EQ(t.shape[1], 3);
  EXPECT_EQ(t.shape[2], 4);
  if (t.strides != nullptr) {  // contiguous either way
    EXPECT_EQ(t.strides[0], 12);
    EXPECT_EQ(t.strides[1], 4);
    EXPECT_EQ(t.strides[2], 1);
  }
  const TensorView s(x, DType::kF32, {3, 4}, {8, 1});
  ASSERT_NE(s.get()->strides, nullptr);
  EXPECT_EQ(s.get()->strides[0], 8);
  EXPECT_EQ(s.get()->strides[1], 1);
  const std::vector<int64_t> shape = {5};
  const TensorView sp(x, DType::kI32, std::span<const int64_t>(shape));
  EXPECT_EQ(sp.get()->ndim, 1);
  EXPECT_EQ(sp.get()->shape[0], 5);
}

TEST(OpsCpp, ComposeForwardOnTensorViewsMatchesTheCApi) {
  const Problem p(3, 6, 14, 10, 8, 80);
  for (DLDataType out_t : kFloatTypes) {
    const auto c = run_forward(p, kF16, kBF16, out_t, kI64, true, true, 1);
    ASSERT_EQ(c.st, TOKPOS_OK) << tokpos_last_error();
    const Bytes tok = encode(p.tok, kF16), pos = encode(p.pos, kBF16);
    Buffer out(c.out.size());
    const DType od = same(out_t, kF32) ? DType::kF32 : same(out_t, kBF16) ? DType::kBF16 : DType::kF16;
    const TensorView o(out.data(), od, {p.B, p.T, p.D}), i(p.ids.data(), DType::kI64, {p.B, p.T}),
        tt(tok.data(), DType::kF16, {p.V, p.D}), pt(pos.data(), DType::kBF16, {p.L, p.D}),
        pi(p.pids.data(), DType::kI64, {p.B, p.T});
    ops::compose_forward(o, i, tt, pt.get(), pi.get(), 1);
    EXPECT_EQ(out.bytes(), c.out) << dname(out_t);
  }
  // Errors are thrown as tokpos::Error with the C API's statuses.
  std::vector<int64_t> bad = p.ids;
  bad.back() = p.V;
  const Bytes tok = encode(p.tok, kF32);
  Buffer out(static_cast<size_t>(p.B * p.T * p.D) * 4);
  const Bytes before = out.bytes();
  const TensorView o(out.data(), DType::kF32, {p.B, p.T, p.D}), i(bad.data(), DType::kI64, {p.B, p.T}),
      tt(tok.data(), DType::kF32, {p.V, p.D});
  std::string msg;
  EXPECT_EQ(thrown([&] { ops::compose_forward(o, i, tt); }, &msg), tokpos::Status::kIdOutOfRange);
  EXPECT_NE(msg.find("(b=2, t=5)"), std::string::npos) << msg;
  EXPECT_EQ(out.bytes(), before);
  DLTensor cuda = *tt.get();
  cuda.device = DLDevice{kDLCUDA, 0};
  EXPECT_EQ(thrown([&] { ops::compose_forward(o, *i.get(), cuda); }), tokpos::Status::kUnimplemented);
  EXPECT_EQ(out.bytes(), before);
}

TEST(OpsCpp, WhereNamesTheCaller) {
  const std::vector<int64_t> ids = {0, 7};
  const auto tok = noise(12, 81);
  std::vector<float> out(6);
  const TensorView o(out.data(), DType::kF32, {1, 2, 3}), i(ids.data(), DType::kI64, {1, 2}),
      tt(tok.data(), DType::kF32, {4, 3});
  ops::LookupOptions opt;
  opt.where = "MyEncoder.embed";
  std::string msg;
  EXPECT_EQ(thrown([&] { ops::compose_forward(o, i, tt, nullptr, nullptr, 0, opt); }, &msg),
            tokpos::Status::kIdOutOfRange);
  EXPECT_EQ(msg.rfind("MyEncoder.embed", 0), 0u) << msg;
  EXPECT_NE(msg.find("7"), std::string::npos) << msg;
}

TEST(OpsCpp, RowPlanAccessorsAndItsOwnCopyOfTheIds) {
  const int64_t B = 3, T = 4, V = 9, L = 12, D = 5;
  std::vector<int64_t> ids = {4, 1, 4, 8, 0, 1, 1, 4, 2, 2, 7, 4};
  const std::vector<int64_t> ids0 = ids;
  const TensorView iv(ids.data(), DType::kI64, {B, T});
  const ops::RowPlan plan(iv, V, nullptr, 3);
  EXPECT_EQ(plan.ids_ndim(), 2);
  EXPECT_EQ(plan.batch(), B);
  EXPECT_EQ(plan.time(), T);
  EXPECT_EQ(plan.size(), B * T);
  EXPECT_EQ(plan.vocab_size(), V);
  EXPECT_EQ(plan.padding_idx(), -1);
  EXPECT_EQ(std::vector<int64_t>(plan.token_rows().begin(), plan.token_rows().end()), ids0);
  EXPECT_EQ(std::vector<int64_t>(plan.positions().begin(), plan.positions().end()), default_positions(B, T, 3));
  EXPECT_EQ(plan.position_limit(), 3 + T);
  EXPECT_EQ(std::vector<int64_t>(plan.touched_rows().begin(), plan.touched_rows().end()),
            (std::vector<int64_t>{0, 1, 2, 4, 7, 8}));

  const auto tokf = noise(V * D, 82), posf = noise(L * D, 83);
  std::vector<float> direct(B * T * D), planned(B * T * D);
  const TensorView tt(tokf.data(), DType::kF32, {V, D}), pt(posf.data(), DType::kF32, {L, D});
  const TensorView od(direct.data(), DType::kF32, {B, T, D}), op(planned.data(), DType::kF32, {B, T, D});
  ops::compose_forward(od, iv, tt, pt.get(), nullptr, 3);
  std::fill(ids.begin(), ids.end(), 123456);  // the plan must not look at them again
  ops::compose_forward(op, plan, tt, pt.get());
  EXPECT_TRUE(equal_bits(direct, planned));
  EXPECT_EQ(as_bytes(planned), ref_forward(ids0, default_positions(B, T, 3), tokf, &posf, D, kF32));

  // Copies and 1-D plans.
  const ops::RowPlan copy = plan;
  EXPECT_EQ(std::vector<int64_t>(copy.token_rows().begin(), copy.token_rows().end()), ids0);
  const std::vector<int32_t> flat = {3, 3, 0};
  const std::vector<int32_t> fpos = {5, 0, 2};
  const TensorView fv(flat.data(), DType::kI32, {3}), fp(fpos.data(), DType::kI32, {3});
  const ops::RowPlan p1(fv, V, fp.get());
  EXPECT_EQ(p1.ids_ndim(), 1);
  EXPECT_EQ(p1.batch(), 1);
  EXPECT_EQ(p1.time(), 3);
  EXPECT_EQ(std::vector<int64_t>(p1.positions().begin(), p1.positions().end()), (std::vector<int64_t>{5, 0, 2}));
  EXPECT_EQ(p1.position_limit(), 6);
  const TensorView empty(nullptr, DType::kI64, {0, 4});
  const ops::RowPlan pe(empty, V);
  EXPECT_EQ(pe.size(), 0);
  EXPECT_EQ(pe.position_limit(), 0);
  EXPECT_TRUE(pe.touched_rows().empty());
}

TEST(OpsCpp, RowPlanReusedForForwardAndBackward) {
  const auto p = make_backward(5, 60, 30, 64, 7, 100, 84);
  const TensorView iv(p.ids.data(), DType::kI64, {p.B, p.T}), pv(p.pids.data(), DType::kI64, {p.B, p.T});
  const ops::RowPlan plan(iv, p.V, pv.get());
  const TensorView d(p.dout.data(), DType::kF32, {p.B, p.T, p.D});
  std::vector<float> gt = p.gtok0, gp = p.gpos0, gt2 = p.gtok0, gp2 = p.gpos0;
  const TensorView t(gt.data(), DType::kF32, {p.V, p.D}), q(gp.data(), DType::kF32, {p.L, p.D});
  const TensorView t2(gt2.data(), DType::kF32, {p.V, p.D}), q2(gp2.data(), DType::kF32, {p.L, p.D});
  ops::compose_backward(t.get(), q.get(), d, plan);
  ops::compose_backward(t2.get(), q2.get(), d, iv, pv.get());
  std::vector<float> wt, wp;
  expected_backward(p, true, 0, wt, wp);
  EXPECT_TRUE(equal_bits(gt, wt));
  EXPECT_TRUE(equal_bits(gp, wp));
  EXPECT_TRUE(equal_bits(gt2, wt));
  EXPECT_TRUE(equal_bits(gp2, wp));
  // A second backward with the same plan accumulates again, in the same order.
  ops::compose_backward(t.get(), nullptr, d, plan);
  ref_index_add(wt, p.dout, p.ids, p.D);
  EXPECT_TRUE(equal_bits(gt, wt));
  EXPECT_TRUE(equal_bits(gp, wp));
  // And the forward from the same plan.
  const auto tokf = noise(static_cast<size_t>(p.V * p.D), 85), posf = noise(static_cast<size_t>(p.L * p.D), 86);
  std::vector<float> out(p.dout.size());
  const TensorView o(out.data(), DType::kF32, {p.B, p.T, p.D}), tt(tokf.data(), DType::kF32, {p.V, p.D}),
      pt(posf.data(), DType::kF32, {p.L, p.D});
  ops::compose_forward(o, plan, tt, pt.get());
  EXPECT_EQ(as_bytes(out), ref_forward(p.ids, p.pids, tokf, &posf, p.D, kF32));
  // A plan whose positions need more rows than the table has.
  const TensorView small(posf.data(), DType::kF32, {plan.position_limit() - 1, p.D});
  std::fill(out.begin(), out.end(), 7.0f);
  EXPECT_EQ(thrown([&] { ops::compose_forward(o, plan, tt, small.get()); }), tokpos::Status::kPositionOutOfRange);
  EXPECT_EQ(out, std::vector<float>(out.size(), 7.0f));
  const std::vector<float> before = gp;
  const TensorView qs(gp.data(), DType::kF32, {plan.position_limit() - 1, p.D});
  EXPECT_EQ(thrown([&] { ops::compose_backward(t.get(), qs.get(), d, plan); }), tokpos::Status::kPositionOutOfRange);
  EXPECT_EQ(gp, before);
  // A plan for another vocabulary size does not fit this table.
  const TensorView tbig(gt.data(), DType::kF32, {p.V - 1, p.D});
  EXPECT_NE(thrown([&] { ops::compose_backward(tbig.get(), nullptr, d, plan); }), tokpos::Status::kOk);
}

TEST(OpsCpp, RowPlanRefusesBadIds) {
  std::vector<int64_t> ids = {1, 2, 3, 4, 5, 44};
  const TensorView iv(ids.data(), DType::kI64, {2, 3});
  std::string msg;
  EXPECT_EQ(thrown([&] { ops::RowPlan plan(iv, 10); }, &msg), tokpos::Status::kIdOutOfRange);
  EXPECT_NE(msg.find("(b=1, t=2)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("44"), std::string::npos) << msg;
  ids.back() = 0;
  const std::vector<int64_t> pos = {0, 1, -3, 0, 1, 2};
  const TensorView pv(pos.data(), DType::kI64, {2, 3});
  const auto st = thrown([&] { ops::RowPlan plan(iv, 10, pv.get()); }, &msg);
  EXPECT_TRUE(st == tokpos::Status::kPositionOutOfRange || st == tokpos::Status::kInvalidArgument) << msg;
  ops::LookupOptions bad_unk;
  bad_unk.unk_id = 10;  // outside [0, V)
  EXPECT_EQ(thrown([&] { ops::RowPlan plan(iv, 10, nullptr, 0, bad_unk); }), tokpos::Status::kInvalidArgument);
}

TEST(OpsCpp, UnkIdMapsOutOfRangeIds) {
  const int64_t B = 2, T = 5, V = 6, L = 5, D = 4;
  const std::vector<int64_t> ids = {0, 9, 5, -1, 3, 6, 1, 1000, 2, 4};
  std::vector<int64_t> mapped = ids;
  for (auto& id : mapped)
    if (id < 0 || id >= V) id = 1;
  ops::LookupOptions opt;
  opt.unk_id = 1;
  const TensorView iv(ids.data(), DType::kI64, {B, T});
  const ops::RowPlan plan(iv, V, nullptr, 0, opt);
  EXPECT_EQ(std::vector<int64_t>(plan.token_rows().begin(), plan.token_rows().end()), mapped);
  const auto tokf = noise(V * D, 87), posf = noise(L * D, 88);
  std::vector<float> out(B * T * D), out2(B * T * D);
  const TensorView o(out.data(), DType::kF32, {B, T, D}), o2(out2.data(), DType::kF32, {B, T, D}),
      tt(tokf.data(), DType::kF32, {V, D}), pt(posf.data(), DType::kF32, {L, D});
  ops::compose_forward(o, iv, tt, pt.get(), nullptr, 0, opt);
  ops::compose_forward(o2, plan, tt, pt.get());
  const Bytes want = ref_forward(mapped, default_positions(B, T, 0), tokf, &posf, D, kF32);
  EXPECT_EQ(as_bytes(out), want);
  EXPECT_EQ(as_bytes(out2), want);
  // The backward sends the unknown ids' gradient to the UNK row.
  const auto dout = noise(B * T * D, 89);
  std::vector<float> g(V * D, 0.25f), w(V * D, 0.25f);
  const TensorView gv(g.data(), DType::kF32, {V, D}), dv(dout.data(), DType::kF32, {B, T, D});
  ops::compose_backward(gv.get(), nullptr, dv, iv, nullptr, 0, opt);
  ref_index_add(w, dout, mapped, D);
  EXPECT_TRUE(equal_bits(g, w));
}

TEST(OpsCpp, PaddingIdxIsReadForwardAndSkippedBackward) {
  const int64_t B = 2, T = 70, V = 8, L = 70, D = 3;
  auto ids = randint(B * T, 0, V, 90);
  for (size_t k = 0; k < ids.size(); k += 3) ids[k] = 2;  // padding row 2, used > 64 times
  ops::LookupOptions opt;
  opt.padding_idx = 2;
  const TensorView iv(ids.data(), DType::kI64, {B, T});
  const ops::RowPlan plan(iv, V, nullptr, 0, opt);
  EXPECT_EQ(plan.padding_idx(), 2);
  const auto touched = std::vector<int64_t>(plan.touched_rows().begin(), plan.touched_rows().end());
  EXPECT_EQ(std::count(touched.begin(), touched.end(), 2), 0);
  EXPECT_TRUE(std::is_sorted(touched.begin(), touched.end()));
  // The forward reads the padding row as it is (the table is the caller's).
  const auto tokf = noise(V * D, 91), posf = noise(L * D, 92);
  std::vector<float> out(B * T * D);
  const TensorView o(out.data(), DType::kF32, {B, T, D}), tt(tokf.data(), DType::kF32, {V, D}),
      pt(posf.data(), DType::kF32, {L, D});
  ops::compose_forward(o, plan, tt, pt.get());
  EXPECT_EQ(as_bytes(out), ref_forward(ids, default_positions(B, T, 0), tokf, &posf, D, kF32));
  // The backward leaves row 2 alone; the position gradient still gets every source.
  const auto dout = noise(B * T * D, 93);
  std::vector<float> g(V * D, 0.5f), gp(L * D, 0.5f), w(V * D, 0.5f), wp(L * D, 0.5f);
  const TensorView gv(g.data(), DType::kF32, {V, D}), gpv(gp.data(), DType::kF32, {L, D}),
      dv(dout.data(), DType::kF32, {B, T, D});
  ops::compose_backward(gv.get(), gpv.get(), dv, iv, nullptr, 0, opt);
  std::vector<int64_t> rows = ids;
  for (auto& r : rows)
    if (r == 2) r = -1;
  ref_index_add(w, dout, rows, D);
  ref_index_add(wp, dout, default_positions(B, T, 0), D);
  EXPECT_TRUE(equal_bits(g, w));
  EXPECT_TRUE(equal_bits(gp, wp));
  for (int64_t d = 0; d < D; ++d) EXPECT_EQ(g[2 * D + d], 0.5f);
  std::vector<float> g2(V * D, 0.5f);
  const TensorView gv2(g2.data(), DType::kF32, {V, D});
  ops::compose_backward(gv2.get(), nullptr, dv, plan);
  EXPECT_TRUE(equal_bits(g2, w));
}

TEST(OpsCpp, TokenGradientRowsEqualTheDenseGradientRows) {
  const auto p = make_backward(4, 100, 50, 100, 6, 120, 94);
  ops::LookupOptions opt;
  opt.padding_idx = 7;
  const TensorView iv(p.ids.data(), DType::kI64, {p.B, p.T});
  const ops::RowPlan plan(iv, p.V, nullptr, 0, opt);
  const auto rows = plan.touched_rows();
  const int64_t U = static_cast<int64_t>(rows.size());
  ASSERT_GT(U, 3);
  std::vector<float> values(static_cast<size_t>(U * p.D), std::numeric_limits<float>::quiet_NaN());
  const TensorView vv(values.data(), DType::kF32, {U, p.D}), dv(p.dout.data(), DType::kF32, {p.B, p.T, p.D});
  ops::token_gradient_rows(vv, dv, plan);
  std::vector<float> dense(static_cast<size_t>(p.V * p.D), 0.0f);
  const TensorView gv(dense.data(), DType::kF32, {p.V, p.D});
  ops::compose_backward(gv.get(), nullptr, dv, plan);
  std::vector<float> ref(static_cast<size_t>(p.V * p.D), 0.0f);
  std::vector<int64_t> rr = p.ids;
  for (auto& r : rr)
    if (r == 7) r = -1;
  ref_index_add(ref, p.dout, rr, p.D);
  EXPECT_TRUE(equal_bits(dense, ref));
  for (int64_t u = 0; u < U; ++u) {
    const int64_t r = rows[static_cast<size_t>(u)];
    EXPECT_NE(r, 7);
    EXPECT_EQ(std::memcmp(values.data() + u * p.D, dense.data() + r * p.D, static_cast<size_t>(p.D) * 4), 0)
        << "row " << r;
  }
}

TEST(OpsCpp, ContextThreadCountsGiveTheSameBits) {
  tokpos::Context one, three;
  one.set_num_threads(1);
  three.set_num_threads(3);
  EXPECT_EQ(one.num_threads(), 1);
  EXPECT_EQ(three.num_threads(), 3);
  tokpos::Context deflt;
  EXPECT_GE(deflt.num_threads(), 1);
  const auto p = make_backward(8, 1024, 400, 1024, 32, 3000, 95);
  const TensorView iv(p.ids.data(), DType::kI64, {p.B, p.T}), dv(p.dout.data(), DType::kF32, {p.B, p.T, p.D});
  std::vector<float> a = p.gtok0, b = p.gtok0, ap = p.gpos0, bp = p.gpos0;
  const TensorView av(a.data(), DType::kF32, {p.V, p.D}), bv(b.data(), DType::kF32, {p.V, p.D}),
      apv(ap.data(), DType::kF32, {p.L, p.D}), bpv(bp.data(), DType::kF32, {p.L, p.D});
  ops::compose_backward(av.get(), apv.get(), dv, iv, nullptr, 0, {}, &one);
  ops::compose_backward(bv.get(), bpv.get(), dv, iv, nullptr, 0, {}, &three);
  std::vector<float> wt, wp;
  expected_backward(p, false, 0, wt, wp);
  EXPECT_TRUE(equal_bits(a, wt));
  EXPECT_TRUE(equal_bits(b, wt));
  EXPECT_TRUE(equal_bits(ap, wp));
  EXPECT_TRUE(equal_bits(bp, wp));
  const auto tokf = noise(static_cast<size_t>(p.V * p.D), 96);
  const Bytes tok16 = encode(tokf, kBF16);
  std::vector<uint16_t> o1(p.dout.size()), o3(p.dout.size());
  const TensorView ov1(o1.data(), DType::kF16, {p.B, p.T, p.D}), ov3(o3.data(), DType::kF16, {p.B, p.T, p.D}),
      tt(tok16.data(), DType::kBF16, {p.V, p.D});
  ops::compose_forward(ov1, iv, tt, nullptr, nullptr, 0, {}, &one);
  ops::compose_forward(ov3, iv, tt, nullptr, nullptr, 0, {}, &three);
  EXPECT_EQ(o1, o3);
  // Streaming stores (always vs never) do not change the bits either.
  one.set_stream_min_bytes(0);
  three.set_stream_min_bytes(std::numeric_limits<int64_t>::max());
  EXPECT_EQ(one.stream_min_bytes(), 0);
  std::vector<uint16_t> s1(p.dout.size()), s3(p.dout.size());
  const TensorView sv1(s1.data(), DType::kF16, {p.B, p.T, p.D}), sv3(s3.data(), DType::kF16, {p.B, p.T, p.D});
  ops::compose_forward(sv1, iv, tt, nullptr, nullptr, 0, {}, &one);
  ops::compose_forward(sv3, iv, tt, nullptr, nullptr, 0, {}, &three);
  EXPECT_EQ(s1, o1);
  EXPECT_EQ(s3, o1);
}

TEST(OpsCpp, ContextKeepsAndReleasesScratch) {
  tokpos::Context ctx;
  ctx.set_num_threads(2);
  EXPECT_EQ(ctx.scratch_bytes(), 0u);
  const auto p = make_backward(8, 4096, 1000, 4096, 64, 5000, 97);
  const TensorView iv(p.ids.data(), DType::kI64, {p.B, p.T}), dv(p.dout.data(), DType::kF32, {p.B, p.T, p.D});
  std::vector<float> g = p.gtok0, gp = p.gpos0;
  const TensorView gv(g.data(), DType::kF32, {p.V, p.D}), gpv(gp.data(), DType::kF32, {p.L, p.D});
  ops::compose_backward(gv.get(), gpv.get(), dv, iv, nullptr, 0, {}, &ctx);
  EXPECT_GT(ctx.scratch_bytes(), 0u);
  const size_t kept = ctx.scratch_bytes();
  ops::compose_backward(gv.get(), gpv.get(), dv, iv, nullptr, 0, {}, &ctx);  // reused, not grown
  EXPECT_EQ(ctx.scratch_bytes(), kept);
  ctx.release_scratch();
  EXPECT_EQ(ctx.scratch_bytes(), 0u);
  // A moved-to Context keeps working.
  tokpos::Context moved = std::move(ctx);
  ops::compose_backward(gv.get(), nullptr, dv, iv, nullptr, 0, {}, &moved);
  EXPECT_GT(moved.scratch_bytes(), 0u);
  moved.release_scratch();
  EXPECT_EQ(moved.scratch_bytes(), 0u);
}

TEST(OpsCpp, ComposeTypedForwardAddsInOrderWithoutLayerNorm) {
  const int64_t B = 2, T = 5, V = 7, L = 6, D = 4;
  const auto ids = randint(B * T, 0, V, 98), types = randint(B * T, 0, 2, 99);
  const auto tokf = noise(V * D, 100, 3.0f), typef = noise(2 * D, 101), posf = noise(L * D, 102);
  const TensorView iv(ids.data(), DType::kI64, {B, T}), tyv(types.data(), DType::kI64, {B, T});
  const ops::RowPlan plan(iv, V, nullptr, 1);
  std::vector<float> out(B * T * D);
  const TensorView o(out.data(), DType::kF32, {B, T, D}), tt(tokf.data(), DType::kF32, {V, D}),
      ty(typef.data(), DType::kF32, {2, D}), pt(posf.data(), DType::kF32, {L, D});
  ops::compose_typed_forward(o, plan, tt, tyv.get(), ty.get(), pt, nullptr, nullptr, 1e-12);
  for (int64_t n = 0; n < B * T; ++n)
    for (int64_t d = 0; d < D; ++d) {
      const float x = (tokf[ids[n] * D + d] + typef[types[n] * D + d]) + posf[(1 + n % T) * D + d];
      EXPECT_EQ(bits_of(out[n * D + d]), bits_of(x)) << n << " " << d;
    }
}

TEST(OpsCpp, ContextChoosesTheBackEndWithTheSameBits) {
  const int64_t B = 3, T = 70, V = 11, L = 80, D = 20;  // a hot row: V = 11 over 210 tokens
  const auto ids = randint(B * T, 0, V, 120);
  const auto tokf = noise(V * D, 121), posf = noise(L * D, 122), dout = noise(B * T * D, 123);
  const TensorView iv(ids.data(), DType::kI64, {B, T}), tt(tokf.data(), DType::kF32, {V, D}),
      pt(posf.data(), DType::kF32, {L, D}), dv(dout.data(), DType::kF32, {B, T, D});
  tokpos::Context cpu, ref;
  EXPECT_STREQ(cpu.backend(), "cpu");
  ref.set_backend("reference").set_num_threads(3);
  EXPECT_STREQ(ref.backend(), "reference");
  const ops::RowPlan plan(iv, V, nullptr, 2);
  std::vector<float> out_cpu(B * T * D), out_ref(B * T * D, -1.0f);
  ops::compose_forward(TensorView(out_cpu.data(), DType::kF32, {B, T, D}), plan, tt, pt.get(), &cpu);
  ops::compose_forward(TensorView(out_ref.data(), DType::kF32, {B, T, D}), plan, tt, pt.get(), &ref);
  EXPECT_TRUE(equal_bits(out_cpu, out_ref));
  auto g_cpu = noise(V * D, 124), p_cpu = noise(L * D, 125);
  auto g_ref = g_cpu, p_ref = p_cpu;
  ops::compose_backward(TensorView(g_cpu.data(), DType::kF32, {V, D}).get(),
                        TensorView(p_cpu.data(), DType::kF32, {L, D}).get(), dv, plan, &cpu);
  ops::compose_backward(TensorView(g_ref.data(), DType::kF32, {V, D}).get(),
                        TensorView(p_ref.data(), DType::kF32, {L, D}).get(), dv, plan, &ref);
  EXPECT_TRUE(equal_bits(g_cpu, g_ref));
  EXPECT_TRUE(equal_bits(p_cpu, p_ref));
  try {
    ref.set_backend("gpu");
    ADD_FAILURE() << "an unknown back end was accepted";
  } catch (const tokpos::Error& e) {
    EXPECT_EQ(e.status(), tokpos::Status::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("'gpu'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("reference"), std::string::npos) << e.what();
  }
  EXPECT_STREQ(ref.backend(), "reference");  // unchanged by the refused call
}

TEST(OpsCpp, RowPlanUsedWithAnotherTableIsRefused) {
  const int64_t B = 1, T = 4, V = 10, D = 3;
  const std::vector<int64_t> ids = {1, 2, 9, 0};
  const TensorView iv(ids.data(), DType::kI64, {B, T});
  const ops::RowPlan plan(iv, V, nullptr, 5);  // positions 5 .. 8
  EXPECT_EQ(plan.position_limit(), 9);
  const auto tok9 = noise(9 * D, 130), pos8 = noise(8 * D, 131);
  std::vector<float> out(B * T * D, 7.0f);
  const auto before = out;
  const TensorView o(out.data(), DType::kF32, {B, T, D}), t9(tok9.data(), DType::kF32, {9, D}),
      p8(pos8.data(), DType::kF32, {8, D});
  try {
    ops::compose_forward(o, plan, t9, nullptr);
    ADD_FAILURE() << "a plan for V = 10 was used with 9 rows";
  } catch (const tokpos::Error& e) {
    EXPECT_EQ(e.status(), tokpos::Status::kShapeMismatch);
    EXPECT_NE(std::string(e.what()).find("V = 10"), std::string::npos) << e.what();
  }
  const auto tok10 = noise(10 * D, 132);
  try {
    ops::compose_forward(o, plan, TensorView(tok10.data(), DType::kF32, {10, D}), p8.get());
    ADD_FAILURE() << "position 8 was read from an 8-row table";
  } catch (const tokpos::Error& e) {
    EXPECT_EQ(e.status(), tokpos::Status::kPositionOutOfRange);
    EXPECT_NE(std::string(e.what()).find("position 8 at (b=0, t=3)"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(equal_bits(out, before));
}

TEST(OpsCpp, EmptyTensorsBesideHugeDimensionsAreEmpty) {
  // A zero dimension beside dimensions whose product overflows int64: the
  // tensor is empty, touches no memory, and the call succeeds.
  const int64_t big = int64_t{1} << 40;
  const std::vector<float> tok(4 * 3);
  const TensorView ids(nullptr, DType::kI64, {0, big}), out(nullptr, DType::kF32, {0, big, 3}),
      tt(tok.data(), DType::kF32, {4, 3});
  EXPECT_NO_THROW(ops::compose_forward(out, ids, tt));
  EXPECT_NO_THROW(ops::compose_backward(nullptr, nullptr, out, ids));
}

TEST(OpsCpp, HugePositionIdsAreRefusedOrNeverRead) {
  // INT64_MAX as a position: one past it does not exist, so a plan refuses it
  // by name; a backward with no position gradient never reads positions.
  const int64_t B = 1, T = 3, V = 5, D = 2;
  const std::vector<int64_t> ids = {0, 4, 2}, huge = {0, INT64_MAX, 1};
  const TensorView iv(ids.data(), DType::kI64, {B, T}), pv(huge.data(), DType::kI64, {B, T});
  try {
    const ops::RowPlan plan(iv, V, pv.get());
    ADD_FAILURE() << "a plan accepted position INT64_MAX";
  } catch (const tokpos::Error& e) {
    EXPECT_EQ(e.status(), tokpos::Status::kPositionOutOfRange);
    EXPECT_NE(std::string(e.what()).find("at (b=0, t=1)"), std::string::npos) << e.what();
  }
  auto g = noise(V * D, 140);
  const auto dout = noise(B * T * D, 141);
  auto want = g;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t d = 0; d < D; ++d) want[ids[t] * D + d] += dout[t * D + d];
  ops::compose_backward(TensorView(g.data(), DType::kF32, {V, D}).get(), nullptr,
                        TensorView(dout.data(), DType::kF32, {B, T, D}), iv, pv.get());
  EXPECT_TRUE(equal_bits(g, want));
}

TEST(OpsCpp, MovedFromPlanIsRefusedNotACrash) {
  const std::vector<int64_t> ids = {1, 2};
  ops::RowPlan plan(TensorView(ids.data(), DType::kI64, {1, 2}), 4);
  const ops::RowPlan moved = std::move(plan);
  EXPECT_EQ(moved.size(), 2);
  try {
    (void)plan.size();  // NOLINT: the moved-from plan, on purpose
    ADD_FAILURE() << "a moved-from plan answered";
  } catch (const tokpos::Error& e) {
    EXPECT_EQ(e.status(), tokpos::Status::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("moved from"), std::string::npos) << e.what();
  }
}

TEST(OpsCpp, TypedForwardRefusesAnEmptyTypeTable) {
  const int64_t B = 1, T = 2, V = 3, L = 4, D = 2;
  const std::vector<int64_t> ids = {0, 2};
  const auto tok = noise(V * D, 150), pos = noise(L * D, 151);
  const ops::RowPlan plan(TensorView(ids.data(), DType::kI64, {B, T}), V);
  std::vector<float> out(B * T * D, 3.0f);
  const auto before = out;
  const TensorView empty_types(nullptr, DType::kF32, {0, D});
  try {
    ops::compose_typed_forward(TensorView(out.data(), DType::kF32, {B, T, D}), plan,
                               TensorView(tok.data(), DType::kF32, {V, D}), nullptr, empty_types.get(),
                               TensorView(pos.data(), DType::kF32, {L, D}), nullptr, nullptr, 1e-12);
    ADD_FAILURE() << "an empty type table was accepted";
  } catch (const tokpos::Error& e) {
    EXPECT_EQ(e.status(), tokpos::Status::kShapeMismatch);
    EXPECT_NE(std::string(e.what()).find("type_table has no rows"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(equal_bits(out, before));
}

TEST(OpsCApi, EmptyBatchesSucceedWithNullBuffersInTheRawPointerFunctions) {
  // tokpos.h: B = 0 or T = 0 writes nothing and succeeds.
  EXPECT_EQ(tokpos_compose_forward(nullptr, nullptr, 0, 3, nullptr, 5, nullptr, 4, 2), TOKPOS_OK)
      << tokpos_last_error();
  EXPECT_EQ(tokpos_compose_forward(nullptr, nullptr, 2, 0, nullptr, 5, nullptr, 4, 2), TOKPOS_OK)
      << tokpos_last_error();
  EXPECT_EQ(tokpos_compose_backward(nullptr, nullptr, nullptr, nullptr, 0, 3, 5, 4, 2), TOKPOS_OK)
      << tokpos_last_error();
  // Sizes are still checked.
  EXPECT_EQ(tokpos_compose_forward(nullptr, nullptr, 0, 3, nullptr, 0, nullptr, 4, 2), TOKPOS_INVALID_ARGUMENT);
}

// ---- float64 ------------------------------------------------------------------------

constexpr DLDataType kF64{kDLFloat, 64, 1};

// Doubles with full 53-bit significands (float holds none of them), so a sum
// taken in float, or a value rounded through it, shows.
std::vector<double> noise64(size_t n, uint64_t seed) {
  const auto a = noise(n, seed), b = noise(n, seed + 1);
  std::vector<double> v(n);
  for (size_t i = 0; i < n; ++i)
    v[i] = static_cast<double>(a[i]) * (1.0 + 0x1p-29 * static_cast<double>(b[i]));
  return v;
}

// out = token_table[ids] + pos_table[start + t] in double, bit for bit, with
// and without a position table, through the C API on DLPack tensors.
TEST(OpsFloat64, ForwardIsTheExactDoubleSum) {
  const int64_t B = 2, T = 5, V = 7, L = 9, D = 6, start = 3;
  const auto tok = noise64(static_cast<size_t>(V * D), 90), pos = noise64(static_cast<size_t>(L * D), 91);
  const std::vector<int64_t> ids = {6, 0, 3, 3, 1, 2, 5, 4, 0, 6};
  for (const bool with_pos : {false, true}) {
    std::vector<double> out(static_cast<size_t>(B * T * D), -1.0), want(out.size());
    for (int64_t n = 0; n < B * T; ++n)
      for (int64_t d = 0; d < D; ++d)
        want[n * D + d] = tok[ids[n] * D + d] + (with_pos ? pos[(start + n % T) * D + d] : 0.0);
    DL o(out.data(), kF64, {B, T, D}), i(ids.data(), kI64, {B, T}), tt(tok.data(), kF64, {V, D}),
        pt(pos.data(), kF64, {L, D});
    ASSERT_EQ(tokpos_op_compose_forward(o.p(), i.p(), tt.p(), with_pos ? pt.p() : nullptr, nullptr, start),
              TOKPOS_OK)
        << tokpos_last_error();
    EXPECT_EQ(std::memcmp(out.data(), want.data(), out.size() * sizeof(double)), 0)
        << "with_pos " << with_pos;
  }
}

// d_token_table and d_pos_table += d_out rows in (b, t) order, in double;
// padding_idx's row untouched.
TEST(OpsFloat64, BackwardAddsInOrderInDouble) {
  const int64_t B = 3, T = 4, V = 5, L = 6, D = 3, start = 1, pad = 2;
  const std::vector<int64_t> ids = {1, 2, 1, 4, 0, 1, 2, 1, 4, 4, 1, 3};
  const auto d_out = noise64(static_cast<size_t>(B * T * D), 92);
  const auto tok0 = noise64(static_cast<size_t>(V * D), 93), pos0 = noise64(static_cast<size_t>(L * D), 94);
  std::vector<double> want_tok = tok0, want_pos = pos0;
  for (int64_t n = 0; n < B * T; ++n)
    for (int64_t d = 0; d < D; ++d) {
      if (ids[n] != pad) want_tok[ids[n] * D + d] += d_out[n * D + d];
      want_pos[(start + n % T) * D + d] += d_out[n * D + d];
    }
  std::vector<double> gt = tok0, gp = pos0;
  const TensorView t(gt.data(), DType::kF64, {V, D}), q(gp.data(), DType::kF64, {L, D}),
      d(d_out.data(), DType::kF64, {B, T, D}), i(ids.data(), DType::kI64, {B, T});
  ops::LookupOptions o;
  o.padding_idx = pad;
  ops::compose_backward(t.get(), q.get(), d, i, nullptr, start, o);
  EXPECT_EQ(std::memcmp(gt.data(), want_tok.data(), gt.size() * sizeof(double)), 0);
  EXPECT_EQ(std::memcmp(gp.data(), want_pos.data(), gp.size() * sizeof(double)), 0);
}

// scale_grad_by_freq: each row's sources scaled by 1 / count (double,
// rounded to the gradient's type) and added one at a time as fused
// multiply-adds; padding_idx's row untouched and not counted.
TEST(OpsFloat64, ScaleGradByFreqAddsFusedScaledRows) {
  const int64_t B = 2, T = 5, V = 4, D = 3, pad = 0;
  const std::vector<int64_t> ids = {1, 2, 1, 0, 1, 3, 1, 2, 0, 1};
  const auto d64 = noise64(static_cast<size_t>(B * T * D), 96);
  std::vector<int64_t> counts(V, 0);
  for (const int64_t id : ids)
    if (id != pad) ++counts[id];
  const std::vector<float> d32(d64.begin(), d64.end());
  std::vector<double> want64(static_cast<size_t>(V * D), 0.5), got64 = want64;
  std::vector<float> want32(static_cast<size_t>(V * D), 0.5f), got32 = want32;
  for (int64_t n = 0; n < B * T; ++n)
    for (int64_t d = 0; d < D; ++d) {
      if (ids[n] == pad) continue;
      const double c = 1.0 / static_cast<double>(counts[ids[n]]);
      want64[ids[n] * D + d] = std::fma(c, d64[n * D + d], want64[ids[n] * D + d]);
      want32[ids[n] * D + d] = std::fma(static_cast<float>(c), d32[n * D + d], want32[ids[n] * D + d]);
    }
  ops::LookupOptions o;
  o.padding_idx = pad;
  o.scale_grad_by_freq = true;
  const TensorView i(ids.data(), DType::kI64, {B, T});
  ops::compose_backward(TensorView(got64.data(), DType::kF64, {V, D}).get(), nullptr,
                        TensorView(d64.data(), DType::kF64, {B, T, D}), i, nullptr, 0, o);
  ops::compose_backward(TensorView(got32.data(), DType::kF32, {V, D}).get(), nullptr,
                        TensorView(d32.data(), DType::kF32, {B, T, D}), i, nullptr, 0, o);
  EXPECT_EQ(std::memcmp(got64.data(), want64.data(), got64.size() * sizeof(double)), 0);
  EXPECT_EQ(std::memcmp(got32.data(), want32.data(), got32.size() * sizeof(float)), 0);
}

// float64 beside a narrower type is refused, naming both tensors; nothing is
// written. The ops outside the lookup (the typed forward, the sparse
// gradient rows) still take float32 only.
TEST(OpsFloat64, MixedWithNarrowerTypesIsRefused) {
  refuse("f64 token_table, f32 pos_table and out", [](FwdCase& c) { c.tt.t.dtype = kF64; }, {kUnimpl},
         {"token_table is f64", "pos_table is f32"});
  refuse("f64 token_table, f32 out", [](FwdCase& c) { c.tt.t.dtype = kF64, c.use_pos = false; }, {kUnimpl},
         {"token_table is f64", "out is f32"});
  refuse("f64 out, f32 tables", [](FwdCase& c) { c.o.t.dtype = kF64; }, {kUnimpl},
         {"out is f64", "token_table is f32"});
  refuse("f64 pos_table, f32 token_table", [](FwdCase& c) { c.pt.t.dtype = kF64; }, {kUnimpl},
         {"pos_table is f64", "token_table is f32"});
  refuse_bwd("f64 d_out, f32 gradients", [](BwdCase& c) { c.d.t.dtype = kF64; }, {kUnimpl},
             {"d_out is f64", "d_token_table is f32"});
  refuse_bwd("f64 d_pos_table, f32 d_out", [](BwdCase& c) { c.q.t.dtype = kF64; }, {kUnimpl},
             {"d_pos_table is f64", "d_out is f32"});
  const std::vector<int64_t> ids = {0, 1};
  const auto d_out = noise64(6, 95);
  std::vector<double> values(6, 0.5);
  const TensorView v(values.data(), DType::kF64, {2, 3}), d(d_out.data(), DType::kF64, {1, 2, 3}),
      i(ids.data(), DType::kI64, {1, 2});
  const ops::RowPlan plan(i, 4);
  std::string msg;
  EXPECT_EQ(thrown([&] { ops::token_gradient_rows(v, d, plan); }, &msg), tokpos::Status::kUnimplemented);
  EXPECT_NE(msg.find("float64"), std::string::npos) << msg;
  EXPECT_EQ(values, std::vector<double>(6, 0.5));
}

}  // namespace
