// frontend/trained.h: a trained position table read from a checkpoint by
// preset, for the front ends that show the lesson's diagnostics on it
// (tokpos demo/plot/serve --weights FILE --preset gpt2|bert [--map ROLE=NAME]).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokpos/presets.h"

namespace tokpos::frontend {

// The roles a preset reads ("wte", "wpe" for gpt2; "word", "position",
// "token_type", "ln_weight", "ln_bias" for bert). Throws for another preset:
//   preset 'x' is not one of gpt2, bert
const std::vector<std::string>& preset_roles(std::string_view preset);

// --map ROLE=NAME ... as a NameMap, each entry checked against the preset's
// roles; `who` starts each message ("tokpos embed").
NameMap parse_name_map(std::string_view who, std::string_view preset, const std::vector<std::string>& map);

struct TrainedPositions {
  std::string file_name;  // the file's name, without its folders
  std::string preset;     // "gpt2" or "bert"
  int64_t max_context = 0;  // L
  int64_t dim = 0;          // D
  std::vector<float> table;  // (L, D), row-major, widened to f32
};

// Reads the preset's position table (gpt2: wpe, bert: position) from the
// .safetensors file at `path` with pread (copies: the file may change after).
// Every error of the presets (a missing tensor, a wrong shape) is theirs.
TrainedPositions load_trained_positions(const std::string& path, std::string_view preset, const NameMap& names);

}  // namespace tokpos::frontend
