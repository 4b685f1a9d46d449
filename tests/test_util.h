// Helpers shared by the tests: deterministic data and independent references.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

// TOKPOS_TEST_SANITIZED: built with AddressSanitizer, ThreadSanitizer or (clang)
// MemorySanitizer, whose shadow memory no address-space cap admits and whose
// operator new aborts instead of throwing. GCC defines __SANITIZE_*__; clang
// answers __has_feature.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define TOKPOS_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
#define TOKPOS_TEST_SANITIZED 1
#endif
#endif

namespace tokpos::testing {

// A table whose entries are distinct and exactly representable: value(r, d) = r + d/1024.
inline std::vector<float> ramp_table(int64_t rows, int64_t D, float scale = 1.0f) {
  std::vector<float> t(static_cast<size_t>(rows * D));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t d = 0; d < D; ++d)
      t[r * D + d] = scale * (static_cast<float>(r) + static_cast<float>(d) / 1024.0f);
  return t;
}

// Pseudo-random floats in [-1, 1) from a simple LCG (independent of tokpos's generator).
inline std::vector<float> noise(size_t n, uint64_t seed) {
  std::vector<float> v(n);
  uint64_t s = seed * 6364136223846793005ull + 1442695040888963407ull;
  for (auto& x : v) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x = static_cast<float>(static_cast<double>(s >> 40) / 8388608.0 - 1.0);
  }
  return v;
}

inline std::vector<int64_t> ids_mod(size_t n, int64_t V, uint64_t seed) {
  std::vector<int64_t> ids(n);
  uint64_t s = seed + 12345;
  for (auto& id : ids) {
    s = s * 2862933555777941757ull + 3037000493ull;
    id = static_cast<int64_t>((s >> 33) % static_cast<uint64_t>(V));
  }
  return ids;
}

inline bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// A sentinel pattern to detect writes: NaN payload bits that no computation produces.
inline std::vector<float> sentinel(size_t n) {
  std::vector<float> v(n);
  const uint32_t bits = 0x7fc0beefu;
  for (auto& x : v) std::memcpy(&x, &bits, sizeof x);
  return v;
}

}  // namespace tokpos::testing
