#include "tokpos/random.h"

#include <cmath>

#include "common/check.h"
#include "common/detmath.h"
#include "common/parallel.h"

namespace tokpos {
namespace {

constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;    // Philox multipliers
constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;  // key schedule (golden ratio, sqrt 3)

inline void mulhilo(uint32_t a, uint32_t b, uint32_t* hi, uint32_t* lo) {
  const uint64_t p = static_cast<uint64_t>(a) * b;
  *hi = static_cast<uint32_t>(p >> 32);
  *lo = static_cast<uint32_t>(p);
}

std::array<uint32_t, 4> block_for(uint64_t seed, uint64_t stream, uint64_t j) {
  return philox4x32_10({static_cast<uint32_t>(j), static_cast<uint32_t>(j >> 32),
                        static_cast<uint32_t>(stream), static_cast<uint32_t>(stream >> 32)},
                       {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
}

// Box-Muller on one pair of words: z[0] = r cos(2 pi u2), z[1] = r sin(2 pi u2).
void box_muller(uint32_t a, uint32_t b, double z[2]) {
  constexpr double k2m32 = 1.0 / 4294967296.0;
  const double u1 = (static_cast<double>(a) + 1.0) * k2m32;  // (0, 1]
  const double u2 = static_cast<double>(b) * k2m32;          // [0, 1)
  const double r = std::sqrt(-2.0 * detail::det_log(u1));
  double s = 0, c = 0;
  detail::det_sincos_2pi(u2, &s, &c);
  z[0] = r * c;
  z[1] = r * s;
}

}  // namespace

std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> ctr, std::array<uint32_t, 2> key) noexcept {
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key[0] += kWeyl0;
      key[1] += kWeyl1;
    }
    uint32_t hi0, lo0, hi1, lo1;
    mulhilo(kMul0, ctr[0], &hi0, &lo0);
    mulhilo(kMul1, ctr[2], &hi1, &lo1);
    ctr = {hi1 ^ ctr[1] ^ key[0], lo1, hi0 ^ ctr[3] ^ key[1], lo0};
  }
  return ctr;
}

double philox_normal(uint64_t seed, uint64_t stream, uint64_t index) noexcept {
  const auto x = block_for(seed, stream, index / 4);
  const unsigned lane = static_cast<unsigned>(index % 4);
  double z[2];
  box_muller(x[lane & 2u], x[(lane & 2u) + 1], z);
  return z[lane & 1u];
}

void fill_normal(std::span<float> out, uint64_t seed, uint64_t stream, double mean, double std) {
  fill_normal(out, seed, stream, mean, std, 0);
}

void fill_normal(std::span<float> out, uint64_t seed, uint64_t stream, double mean, double std, uint64_t first) {
  const auto n = static_cast<uint64_t>(out.size());
  if (first > UINT64_MAX - n)
    detail::fail(Status::kSizeOverflow, "tokpos::fill_normal", "first + size = ", first, " + ", n,
                 " overflows 2^64");
  if (n == 0) return;
  // Blocks j0 .. j1 cover numbers [first, first + n); each block of 4 values
  // depends only on its index, so any split is deterministic.
  const uint64_t j0 = first / 4, j1 = (first + n - 1) / 4;
  const auto blocks = static_cast<int64_t>(j1 - j0 + 1);
  float* dst = out.data();
  detail::parallel_ranges(detail::threads_for(static_cast<int64_t>(n) * 8), blocks, [&](int64_t k0, int64_t k1, int) {
    for (int64_t k = k0; k < k1; ++k) {
      const uint64_t j = j0 + static_cast<uint64_t>(k);
      const auto x = block_for(seed, stream, j);
      double z[4];
      box_muller(x[0], x[1], z);
      box_muller(x[2], x[3], z + 2);
      for (uint64_t l = 0; l < 4; ++l) {
        const uint64_t index = j * 4 + l;
        if (index >= first && index - first < n) dst[index - first] = static_cast<float>(mean + std * z[l]);
      }
    }
  });
}

}  // namespace tokpos
