// tokpos/random.h: the initialiser's random numbers, identical on every platform.
//
// std::normal_distribution is implementation-defined, so libstdc++, libc++ and
// MSVC give different tables from the same seed. tokpos instead uses
//   * Philox4x32-10 (Salmon et al., SC'11, the Random123 generator), a
//     counter-based generator: element i of a table depends only on
//     (seed, stream, i), so tables can be filled in parallel, in any order;
//   * Box-Muller, evaluated with our own log/sin/cos built from + - * / and
//     sqrt only (all correctly rounded under IEEE 754) in double precision,
//     compiled without FMA contraction, then rounded once to float.
// The result is bitwise identical on every IEEE-754 platform and thread count.
//
// Mapping (documented so other implementations can reproduce it):
//   block j = i / 4, lane = i % 4
//   (x0, x1, x2, x3) = philox4x32_10(counter = {lo(j), hi(j), lo(stream), hi(stream)},
//                                    key     = {lo(seed), hi(seed)})
//   pair (x0, x1) gives lanes 0 and 1, pair (x2, x3) gives lanes 2 and 3:
//     u1 = (xa + 1) * 2^-32   in (0, 1]      u2 = xb * 2^-32   in [0, 1)
//     r  = sqrt(-2 ln u1)
//     z_even = r cos(2 pi u2),  z_odd = r sin(2 pi u2)
//   value = float(mean + std * z)        (computed in double, rounded once)
#pragma once

#include <array>
#include <cstdint>
#include <span>

#include "tokpos/export.h"

namespace tokpos {

// The Philox4x32 block function with 10 rounds.
TOKPOS_API std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> counter,
                                                 std::array<uint32_t, 2> key) noexcept;

// Standard normal number `index` of the stream (seed, stream), in double.
TOKPOS_API double philox_normal(uint64_t seed, uint64_t stream, uint64_t index) noexcept;

// Streams used by the modules, so two tables built from one seed differ.
inline constexpr uint64_t kTokenTableStream = 0;
inline constexpr uint64_t kPositionTableStream = 1;

// out[i] = float(mean + std * philox_normal(seed, stream, i)) for every i.
// Overwrites out. Parallel; the result does not depend on the thread count.
TOKPOS_API void fill_normal(std::span<float> out, uint64_t seed, uint64_t stream, double mean, double std);
// out[i] = number first + i of the stream: a slice of a larger table (a
// vocab-parallel shard's rows) with the bits the whole table has there.
// first + out.size() must not exceed 2^64 (else Error(kSizeOverflow)).
TOKPOS_API void fill_normal(std::span<float> out, uint64_t seed, uint64_t stream, double mean, double std,
                            uint64_t first);

}  // namespace tokpos
