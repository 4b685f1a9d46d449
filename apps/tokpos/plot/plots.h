// tokpos plot: the seed lesson's diagnostics as pictures.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "chart.h"

namespace tokpos::plot {

struct PlotOptions {
  int64_t dim = 64;                 // D (wavelength_bands also draws D/2)
  int64_t context = 128;            // L
  double base = 10000.0;
  std::string layout = "interleaved";
  std::string out = "out";          // directory, created if missing
  std::string text = "Hello";       // lookup.png's worked example
  uint64_t seed = 0;                // the learned table's initialisation
};

// Geometry shared with the tests, so they can find cells in the pictures.
inline constexpr int kWidth = 960, kHeight = 640;
inline constexpr Rect kTableRect{90, 80, 720, 480};             // position_table / learned_table heatmap
inline constexpr Rect kMatrixRect[2] = {{80, 100, 360, 360}, {500, 100, 360, 360}};  // similarity_matrix panels

// rope_scalings and alibi_slopes: the plot area (series are drawn inside it,
// legends to its right) and each series' colour, in legend order.
inline constexpr Rect kSeriesRect{100, 80, 600, 470};
inline constexpr Rgb kSeriesColors[5] = {
    {0.10, 0.10, 0.10}, {0.12, 0.47, 0.71}, {0.17, 0.63, 0.17}, {0.84, 0.15, 0.16}, {0.58, 0.40, 0.74}};
inline constexpr int64_t kAlibiHeads[4] = {8, 12, 16, 32};

struct PlotFile {
  std::string name;      // e.g. "position_table"
  std::string caption;   // one line on what to see
};

// Writes every picture (PNG and SVG) into options.out and lists them, in order.
// Throws tokpos::Error for a bad --out or a failed write, naming the path.
std::vector<PlotFile> make_plots(const PlotOptions& options, std::ostream& log);

}  // namespace tokpos::plot
