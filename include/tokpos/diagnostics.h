// tokpos/diagnostics.h: the seed lesson's diagnostics, as plain functions on tables.
//
// Tables are row-major (L, D) float spans; all sums are done in double.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "tokpos/export.h"
#include "tokpos/position_table.h"

namespace tokpos {

// cos(a, b) = a.b / (|a| |b|), in double. Defined as 0 when either row is all zeros.
TOKPOS_API double cosine(std::span<const float> a, std::span<const float> b);

// L-1 values: cos(row p, row p+1) for p = 0 .. L-2.
TOKPOS_API std::vector<double> adjacent_cosine(std::span<const float> table, int64_t L, int64_t D);

// max_offset+1 values: for k = 0 .. max_offset, the mean over p of cos(row p, row p+k).
// Requires 0 <= max_offset < L.
TOKPOS_API std::vector<double> cosine_by_offset(std::span<const float> table, int64_t L, int64_t D,
                                                int64_t max_offset);

// L*L values, row-major: entry (p, q) is cos(row p, row q), bit for bit what
// cosine() returns for the two rows (so the matrix is exactly symmetric).
// Each row's norm is summed once; the work is about L*L*D/2 multiply-adds.
TOKPOS_API std::vector<double> cosine_matrix(std::span<const float> table, int64_t L, int64_t D);

// Wavelength of each sin/cos pair k = 0 .. ceil(D/2)-1 of the interleaved
// sinusoidal table: 2*pi * base^(2k/D), in positions. Pair 0 turns once every
// 2*pi positions; the last pair approaches 2*pi*base.
TOKPOS_API std::vector<double> sinusoidal_wavelengths(int64_t D, double base);

// Pairs grouped by decade of wavelength: [10^e, 10^(e+1)) for each e that holds one.
struct WavelengthBand {
  double lower = 0;   // 10^e
  double upper = 0;   // 10^(e+1)
  int64_t pairs = 0;  // how many pairs have a wavelength in [lower, upper)
  int64_t first_pair = 0;
  int64_t last_pair = 0;
};
TOKPOS_API std::vector<WavelengthBand> wavelength_bands(std::span<const double> wavelengths);

// How well PE(p + k) = R_k PE(p) holds, with R_k block-diagonal rotations,
// one 2x2 rotation per sin/cos column pair of `layout` (pair columns of the
// interleaved layout for learned tables). For each pair the best rotation in
// the least-squares sense is fitted over all p in [0, L - k); the result is
// the largest residual |PE(p+k) - R_k PE(p)| of any entry. A sinusoidal
// table gives about float epsilon; an untrained learned table gives residuals
// as large as its entries. Columns outside a pair (odd D) are not fitted.
struct RelativeFit {
  int64_t offset = 0;
  int64_t pairs = 0;        // column pairs fitted
  double max_residual = 0;  // largest |residual| of any fitted entry
  double relative = 0;      // max_residual / largest |entry| of the fitted columns
};
TOKPOS_API RelativeFit relative_position_fit(std::span<const float> table, int64_t L, int64_t D, int64_t k,
                                             Layout layout = Layout::kInterleaved);

struct Summary {
  int64_t count = 0;
  double mean = 0, stddev = 0, min = 0, max = 0;
};
// Population statistics of a series; all zeros for an empty series.
TOKPOS_API Summary summarize(std::span<const double> values);

}  // namespace tokpos
