// tokpos table: write an exact position table as a NumPy .npy file.
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>

namespace tokpos::app {

struct TableCommand {
  std::string layout = "interleaved";  // a layout_name (frontend::layout_names())
  int64_t dim = 0;                     // D
  int64_t context = 0;                 // L rows
  int64_t start = 0;                   // first position
  double base = 10000.0;
  double min_timescale = 1.0;  // t2t only
  int64_t padding_idx = -1;    // fairseq only; -1 = none
  std::string dtype = "f32";   // a float dtype_name: f32, bf16, f16
  std::string out;             // FILE.npy
  int64_t relative = 0;        // > 0: also report the relative-position fit at this offset
};

// Throws tokpos::Error; prints a short summary to `log`.
void run_table(const TableCommand& command, std::ostream& log);

}  // namespace tokpos::app
