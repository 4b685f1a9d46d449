// Private: a byte count that starts from the environment and can be changed
// at run time (the streaming threshold, the prefetch distance, the position
// block size).
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdlib>

namespace tokpos::detail {

// Read from the environment variable `env` at its first use (a non-negative
// decimal; anything else, or no variable: fallback(), computed then), so
// loading the library reads nothing. set(bytes >= 0) changes it; set(bytes
// < 0) goes back to that start-up value (the environment's, else the
// fallback). Threads racing on the first use all compute the same value.
struct BytesSetting {
  const char* env;
  int64_t (*fallback)();
  std::atomic<int64_t> value{-1};  // -1: not read yet

  int64_t get() {
    const int64_t bytes = value.load(std::memory_order_relaxed);
    if (bytes >= 0) return bytes;
    int64_t unset = -1;
    value.compare_exchange_strong(unset, initial(), std::memory_order_relaxed);
    return value.load(std::memory_order_relaxed);
  }
  void set(int64_t bytes) { value.store(bytes < 0 ? -1 : bytes, std::memory_order_relaxed); }

 private:
  int64_t initial() const {
    if (const char* text = std::getenv(env)) {
      char* end = nullptr;
      const long long n = std::strtoll(text, &end, 10);
      if (end != text && *end == '\0' && n >= 0) return n;
    }
    return fallback();
  }
};

}  // namespace tokpos::detail
