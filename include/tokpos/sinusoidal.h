// tokpos/sinusoidal.h: the seeds' sinusoidal position formula.
//
// For position p, feature i and model width D (the interleaved layout of
// "Attention Is All You Need", both seeds, and tensor2tensor's first paper):
//   angle(p, i) = p / base^(2*(i/2)/D)        (i/2 is integer division)
//   PE(p, i)    = sin(angle) for even i, cos(angle) for odd i
// Odd D is allowed: the last feature is then a lone sin.
// Every value is the exact real value correctly rounded to float (the
// interleaved case of position_table.h; docs/precision.md).
#pragma once

#include <cstdint>
#include <span>

#include "tokpos/export.h"

namespace tokpos {

inline constexpr double kDefaultBase = 10000.0;

// Frequency of feature i: base^(-2*(i/2)/D). Requires 0 <= i < D.
TOKPOS_API double sinusoidal_frequency(int64_t i, int64_t D, double base = kDefaultBase);

// One element, PE(pos, i) for width D: seed 002's pe(pos, dim, hidden_dim).
// Throws Error(kInvalidArgument) for pos < 0, i outside [0, D), or base <= 0.
TOKPOS_API float sinusoidal_value(int64_t pos, int64_t i, int64_t D, double base = kDefaultBase);

// out (L, D): row r holds PE(start + r, :). Overwrites out; out.size() must be L*D.
// Parallel; the result does not depend on the thread count.
TOKPOS_API void sinusoidal_table(std::span<float> out, int64_t L, int64_t D, double base = kDefaultBase,
                                 int64_t start = 0);

}  // namespace tokpos
