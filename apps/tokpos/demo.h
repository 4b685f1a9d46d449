// tokpos demo: the seed lesson's comparison on one piece of text.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

namespace tokpos::app {

struct DemoOptions {
  std::string text = "Hello, transformer!";  // through the byte tokenizer
  int64_t vocab_size = 260;                  // V: the byte tokenizer's vocabulary
  int64_t dim = 64;                          // D
  int64_t max_context = 128;                 // L
  uint64_t seed = 0;
  double base = 10000.0;
  bool json = false;
};

// Prints the report (text or one JSON object) to out. Throws tokpos::Error.
void run_demo(const DemoOptions& options, std::ostream& out);

}  // namespace tokpos::app
