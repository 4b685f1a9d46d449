// frontend/trained.h: a trained position table read from a checkpoint by
// preset, for the front ends that show the lesson's diagnostics on it
// (tokpos demo/plot/serve --weights FILE --preset gpt2|bert [--map ROLE=NAME]),
// and a training run's snapshots of a learned table (tokpos plot/serve
// --weights RUN.safetensors, written by python -m tokpos train).
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

// A training run (docs/lessons.md): the learned position table after each
// of S steps, the sinusoidal table the other model used, and the losses of
// both schemes at those steps.
struct TrainingRun {
  std::string file_name;  // the file's name, without its folders
  int64_t max_context = 0;  // L, config's "context"
  int64_t dim = 0;          // D, config's "dim"
  std::vector<int64_t> steps;  // S >= 1 step numbers, ascending, each >= 0
  // snapshots[i]: the table after steps[i] optimizer steps (file_name is the
  // run's, preset "run"), so every reader of a trained table reads one.
  std::vector<TrainedPositions> snapshots;
  std::vector<float> sinusoidal;  // (L, D)
  // (S,) each: the loss at each step, train and held-out, of each scheme.
  std::vector<float> loss_train_learned, loss_heldout_learned, loss_train_sinusoidal, loss_heldout_sinusoidal;
  std::string config_json;  // the "config" metadata, as compact JSON text
  std::string beyond_json;  // the "beyond" metadata (what happens past L), compact JSON; "null" when absent
};

// The metadata key that marks a .safetensors file as a training run.
inline constexpr const char* kRunMetadataKey = "tokpos.run";

// Whether the .safetensors file at `path` has kRunMetadataKey (reads its
// header only). Errors of the file itself (missing, corrupt) are the reader's.
bool is_training_run(const std::string& path);

// Reads and checks a whole training run. Error(kCorruptFile) naming the file,
// the key or tensor, and the bad value or limit: no "tokpos.run" key; "steps"
// not a non-empty ascending JSON list of integers >= 0; "config" without
// integers "dim" and "context" >= 1; a positions.step_N missing for an N of
// steps, or any table not of shape (L, D); a loss not of shape (S,).
// Error(kInvalidArgument) for a value that is not finite, naming where, as
// load_trained_positions does.
TrainingRun load_training_run(const std::string& path);

}  // namespace tokpos::frontend
