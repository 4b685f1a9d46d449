// frontend/demo_report.h: the report of `tokpos demo` and `python -m tokpos
// demo`, the seed lesson's comparison on one piece of text. Both front ends
// print it from here, with the defaults below.
#pragma once

#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <string_view>

namespace tokpos::frontend {

// The defaults of both front ends (python -m tokpos reads them through
// tokpos._core.DemoOptions).
struct DemoOptions {
  std::string text = "Hello, transformer!";  // through the byte tokenizer
  int64_t vocab_size = 260;                  // V: the byte tokenizer's vocabulary
  int64_t dim = 64;                          // D
  int64_t max_context = 128;                 // L
  uint64_t seed = 0;
  double base = 10000.0;
  bool json = false;
};

// Told before each step of the work (step 0 .. total-1, with its label) and
// once more with step == total, before the report is written. The CLI draws
// its progress bar from it; the report itself draws nothing.
using DemoProgress = std::function<void(int step, int total, std::string_view label)>;

// Prints the report (text, or one JSON object) to out. Throws tokpos::Error.
void run_demo(const DemoOptions& options, std::ostream& out, const DemoProgress& progress = {});

}  // namespace tokpos::frontend
