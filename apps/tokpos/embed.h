// tokpos embed: run a real checkpoint's input stage on given token ids.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace tokpos::app {

struct EmbedCommand {
  std::string weights;           // FILE.safetensors, or FILE.gguf (read by its general.architecture)
  std::string preset = "bert";   // gpt2 | bert (safetensors only)
  bool preset_given = false;     // --preset was on the command line (refused for GGUF)
  std::string ids;               // "101,7592,2088,102"; rows of a batch separated by ';'
  std::string token_types;       // bert: same shape as ids (default all 0)
  std::string mask;              // gpt2: (B, past + T) attention mask, 0/1, for left padding
  int64_t past = 0;              // gpt2: tokens already in the cache
  std::vector<std::string> map;  // role=NAME overrides of tensor names
  double eps = 1e-12;            // bert LayerNorm eps
  bool eps_given = false;        // --eps was on the command line (refused for gpt2)
  bool no_layer_norm = false;    // bert: stop at the sum (for comparisons)
  std::string out;               // optional FILE.npy for the full (B, T, D) output
};

// Throws tokpos::Error; prints the summary to `log`.
void run_embed(const EmbedCommand& command, std::ostream& log);

}  // namespace tokpos::app
