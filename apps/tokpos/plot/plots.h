// tokpos plot: the seed lesson's diagnostics as pictures.
#pragma once

#include <cstdint>
#include <iostream>
#include <ostream>
#include <string>
#include <vector>

#include "chart.h"
#include "frontend/trained.h"

namespace tokpos::plot {

struct PlotOptions {
  int64_t dim = 64;                 // D (wavelength_bands also draws D/2)
  int64_t context = 128;            // L
  double base = 10000.0;
  std::string layout = "interleaved";
  std::string out = "out";          // directory, created if missing
  std::string text = "Hello";       // lookup.png's worked example
  uint64_t seed = 0;                // the learned table's initialisation
  // --weights FILE --preset gpt2|bert [--map ROLE=NAME ...]: instead of the
  // fresh tables' pictures, the file's trained position table beside a
  // sinusoidal table of its shape (base and layout as above).
  // --weights RUN.safetensors (a file with "tokpos.run" metadata, from
  // python -m tokpos train) needs no preset: it draws the run's four
  // pictures instead (run_heatmaps, run_diagnostics, run_fit, run_loss).
  std::string weights{};
  std::string preset{};
  std::vector<std::string> map{};
  // The language of the training run's pictures, "en" or "zh"; empty:
  // frontend::default_lang(). The other pictures are drawn in English.
  std::string lang{};
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

// The lookup figure's rows are bytes; the bytes of one UTF-8 character are
// grouped under it: rows [first, first + count) carry the character `label`
// (drawn once, tied to its rows by a bracket when count > 1). An invalid
// byte is a group of its own labelled U+FFFD; a control character is a
// group with an empty label. A character cut by the number of rows shown keeps the rows
// that are shown (cut is true then).
struct ByteGroup {
  int64_t first = 0;
  int64_t count = 1;
  std::string label;
  bool cut = false;
};
std::vector<ByteGroup> byte_groups(std::string_view text, int64_t shown);

// The numbers the --weights pictures draw: the file's table and a
// sinusoidal table of the same L and D, their cosine similarity by offset
// k = 0 .. L-1 (mean over p of cos(P[p], P[p+k])) and their L x L
// similarity matrices cos(P[p], P[q]), row-major.
struct TrainedComparison {
  frontend::TrainedPositions trained;
  std::vector<float> sinusoidal;
  std::vector<double> by_offset_trained, by_offset_sinusoidal;
  std::vector<float> matrix_trained, matrix_sinusoidal;
};
// Reads options.weights by options.preset and options.map and computes the
// comparison. Throws tokpos::Error for a bad file, preset or map, or a table
// larger than tokpos plot draws (L <= 2048, D <= 4096).
TrainedComparison compare_trained(const PlotOptions& options);

// The numbers the training-run pictures draw (--weights RUN.safetensors).
struct RunDiagnostics {
  std::vector<size_t> shown;      // indices into run.steps of the heatmap grid: up to 6, first and last included
  std::vector<int64_t> offsets;   // the offsets k drawn: those of 1, 4, 16, 64 below L
  // learned[i][s]: mean over p of cos(P[p], P[p+k]) for k = offsets[i], of snapshot s.
  std::vector<std::vector<double>> learned;
  std::vector<double> sinusoidal;  // [i]: the same for the run's sinusoidal table
  // The rotation fit PE(p+k) = R_k PE(p) (tokpos::relative_position_fit,
  // interleaved column pairs) at fit_offsets (those of 1, 8 below L): its
  // relative residual for each snapshot, fit_learned[i][s], and for the
  // sinusoidal table, fit_sinusoidal[i].
  std::vector<int64_t> fit_offsets;
  std::vector<std::vector<double>> fit_learned;
  std::vector<double> fit_sinusoidal;
};
// Throws tokpos::Error for a table larger than tokpos plot draws, as compare_trained does.
RunDiagnostics run_diagnostics(const frontend::TrainingRun& run);
// run_heatmaps: the heatmap of panel i of n (up to 3 a row), so the tests can find its cells.
Rect run_panel_rect(int i, int n);

struct PlotFile {
  std::string name;      // e.g. "position_table"
  std::string caption;   // one line on what to see
};

// Writes every picture (PNG and SVG) into options.out and lists them, in
// order: the fresh tables' eight, or with options.weights the three of the
// trained table (trained_table, trained_similarity_matrix,
// trained_similarity_by_offset), or for a training run its four
// (run_heatmaps, run_diagnostics, run_fit, run_loss). A checkpoint needs
// options.preset; a training run refuses it and options.map. Throws tokpos::Error for a bad --out or a
// failed write, naming the path. Characters no installed font can draw are
// named on `warn` (missing_glyphs_warning).
std::vector<PlotFile> make_plots(const PlotOptions& options, std::ostream& log, std::ostream& warn = std::cerr);

}  // namespace tokpos::plot
