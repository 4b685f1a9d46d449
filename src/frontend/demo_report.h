// frontend/demo_report.h: the report of `tokpos demo` and `python -m tokpos
// demo`, the seed lesson's comparison on one piece of text. Both front ends
// print it from here, with the defaults below.
#pragma once

#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

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
  // The report's language: "en" or "zh"; empty: default_lang() (frontend/lang.h).
  // The JSON object is the same in both.
  std::string lang;
  // A checkpoint whose trained position table is shown beside the fresh
  // learned and the sinusoidal ones, which then take its (L, D). preset
  // ("gpt2" or "bert") is required with it; map holds --map's ROLE=NAME.
  // The file fixes L and D: dim_given or context_given (the caller saw --dim
  // or --context) with a file is an error naming both.
  std::string weights;
  std::string preset;
  std::vector<std::string> map;
  bool dim_given = false;
  bool context_given = false;
};

// Told before each step of the work (step 0 .. total-1, with its label) and
// once more with step == total, before the report is written. The CLI draws
// its progress bar from it; the report itself draws nothing.
using DemoProgress = std::function<void(int step, int total, std::string_view label)>;

// Prints the report (text, or one JSON object) to out. Throws tokpos::Error.
void run_demo(const DemoOptions& options, std::ostream& out, const DemoProgress& progress = {});

}  // namespace tokpos::frontend
