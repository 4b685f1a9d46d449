#include "frontend/trained.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <sstream>
#include <utility>

#include <nlohmann/json.hpp>

#include "tokpos/error.h"

namespace tokpos::frontend {
namespace {

// Every answer built on a position table (rows, cosines, wavelengths) must be
// a finite number: a NaN or an infinity is refused here, once, naming the
// file, the table (tensor(): the tensor and whose table it is, asked only on
// failure), the row, the column and the value.
template <typename TensorText>
void refuse_non_finite(const std::string& path, const std::vector<float>& t, int64_t D, TensorText&& tensor) {
  const auto bad = std::find_if(t.begin(), t.end(), [](float v) { return !std::isfinite(v); });
  if (bad == t.end()) return;
  const auto i = static_cast<int64_t>(bad - t.begin());
  std::ostringstream os;
  os << path << ": " << tensor() << " (L = " << static_cast<int64_t>(t.size()) / D << ", D = " << D << "): row "
     << i / D << " holds " << *bad << " at column " << i % D
     << ", the first value that is not finite; every value of a position table must be finite";
  throw Error(Status::kInvalidArgument, os.str());
}

}  // namespace

const std::vector<std::string>& preset_roles(std::string_view preset) {
  static const std::vector<std::string> gpt2{"wte", "wpe"};
  static const std::vector<std::string> bert{"word", "position", "token_type", "ln_weight", "ln_bias"};
  if (preset == "gpt2") return gpt2;
  if (preset == "bert") return bert;
  throw Error(Status::kInvalidArgument, "preset '" + std::string(preset) + "' is not one of gpt2, bert");
}

NameMap parse_name_map(std::string_view who, std::string_view preset, const std::vector<std::string>& map) {
  const std::string w(who);
  const auto& roles = preset_roles(preset);
  NameMap names;
  for (const auto& m : map) {
    const auto eq = m.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == m.size()) {
      throw Error(Status::kInvalidArgument, w + ": --map '" + m + "' is not ROLE=NAME");
    }
    const std::string role = m.substr(0, eq);
    if (std::find(roles.begin(), roles.end(), role) == roles.end()) {
      throw Error(Status::kInvalidArgument,
                  w + ": --map '" + m + "': '" + role + "' is not a role of the " + std::string(preset) +
                      " preset (gpt2: wte, wpe; bert: word, position, token_type, ln_weight, ln_bias)");
    }
    if (!names.emplace(role, m.substr(eq + 1)).second) {
      throw Error(Status::kInvalidArgument, w + ": --map: role '" + role + "' is given twice");
    }
  }
  return names;
}

TrainedPositions load_trained_positions(const std::string& path, std::string_view preset, const NameMap& names) {
  (void)preset_roles(preset);  // a bad preset is named before the file is read
  const auto file = SafetensorsFile::open(path, SafetensorsFile::Access::kRead);
  const EmbeddingComposer model =
      preset == "gpt2" ? gpt2_from_safetensors(file, names) : bert_from_safetensors(file, 1e-12, names);
  const PositionalEmbedding& pos = model.position();
  TrainedPositions t;
  t.file_name = std::filesystem::path(path).filename().string();
  t.preset = std::string(preset);
  t.max_context = pos.max_context();
  t.dim = pos.dim();
  t.table.assign(pos.table().begin(), pos.table().end());
  refuse_non_finite(path, t.table, t.dim, [&] {
    return "tensor '" + preset_tensor_name(file, preset, preset == "gpt2" ? "wpe" : "position", names) + "', the " +
           std::string(preset) + " preset's position table";
  });
  return t;
}

namespace {

[[noreturn]] void corrupt_run(const std::string& path, const std::string& what) {
  throw Error(Status::kCorruptFile, path + ": " + what);
}

// A metadata value as it appears in a message: at most 80 bytes, then "...".
std::string shown_value(const std::string& s) { return "'" + (s.size() > 80 ? s.substr(0, 80) + "..." : s) + "'"; }

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

// The metadata value of `key` parsed as JSON; a missing key or bad JSON names the key.
nlohmann::json run_metadata(const SafetensorsFile& file, const char* key, const char* what) {
  const auto& meta = file.metadata();
  const auto it = meta.find(key);
  if (it == meta.end()) corrupt_run(file.path(), std::string("metadata '") + key + "' is missing: " + what);
  nlohmann::json j = nlohmann::json::parse(it->second, nullptr, false);
  if (j.is_discarded()) {
    corrupt_run(file.path(), std::string("metadata '") + key + "' = " + shown_value(it->second) + " is not JSON: " + what);
  }
  return j;
}

// An F32/F16/BF16 tensor of exactly `shape`, read as floats.
std::vector<float> run_tensor(const SafetensorsFile& file, const std::string& name, const std::vector<int64_t>& shape,
                              const std::string& why) {
  if (!file.contains(name)) corrupt_run(file.path(), "tensor '" + name + "' is missing: " + why);
  const TensorInfo& info = file.info(name);
  if (info.shape != shape) {
    corrupt_run(file.path(), "tensor '" + name + "' has shape " + shape_text(info.shape) + ", not " + shape_text(shape) +
                                 ": " + why);
  }
  return file.read_f32(name);
}

}  // namespace

bool is_training_run(const std::string& path) {
  const auto file = SafetensorsFile::open(path, SafetensorsFile::Access::kRead);
  return file.metadata().count(kRunMetadataKey) != 0;
}

TrainingRun load_training_run(const std::string& path) {
  const auto file = SafetensorsFile::open(path, SafetensorsFile::Access::kRead);
  const auto& meta = file.metadata();
  const auto mark = meta.find(kRunMetadataKey);
  if (mark == meta.end()) {
    corrupt_run(path, std::string("metadata '") + kRunMetadataKey +
                          "' is missing: this is not a training run (python -m tokpos train writes one)");
  }
  if (mark->second != "1") {
    corrupt_run(path, std::string("metadata '") + kRunMetadataKey + "' = " + shown_value(mark->second) +
                          " is not a version this reader knows (1)");
  }
  TrainingRun run;
  run.file_name = std::filesystem::path(path).filename().string();

  const char* steps_what = "a non-empty JSON list of ascending integers >= 0, e.g. [0, 25, 50]";
  const nlohmann::json steps = run_metadata(file, "steps", steps_what);
  if (!steps.is_array() || steps.empty()) {
    corrupt_run(path, "metadata 'steps' = " + shown_value(steps.dump()) + " is not " + steps_what);
  }
  for (size_t i = 0; i < steps.size(); ++i) {
    const nlohmann::json& s = steps[i];
    const std::string at = "metadata 'steps': entry " + std::to_string(i) + " = " + shown_value(s.dump());
    if (!s.is_number_integer()) corrupt_run(path, at + " is not an integer");
    const int64_t step = s.get<int64_t>();
    if (step < 0) corrupt_run(path, at + " is below 0");
    if (!run.steps.empty() && step <= run.steps.back()) {
      corrupt_run(path, at + " does not follow " + std::to_string(run.steps.back()) + ": the steps must ascend");
    }
    run.steps.push_back(step);
  }

  const nlohmann::json config = run_metadata(file, "config", "a JSON object with the integers \"dim\" and \"context\"");
  for (const char* key : {"dim", "context"}) {
    const auto it = config.is_object() ? config.find(key) : config.end();
    if (!config.is_object() || it == config.end() || !it->is_number_integer() || it->get<int64_t>() < 1) {
      corrupt_run(path, std::string("metadata 'config' needs \"") + key + "\" as an integer >= 1 (config = " +
                            shown_value(config.dump()) + ")");
    }
  }
  run.dim = config["dim"].get<int64_t>();
  run.max_context = config["context"].get<int64_t>();
  run.config_json = config.dump();
  run.beyond_json = "null";
  if (meta.count("beyond")) run.beyond_json = run_metadata(file, "beyond", "a JSON object").dump();

  const int64_t L = run.max_context, D = run.dim;
  const auto S = static_cast<int64_t>(run.steps.size());
  const std::string table_why = "config's context and dim make the tables (L, D) = " + shape_text({L, D});
  const auto check_finite = [&](const std::string& name, const std::vector<float>& t) {
    refuse_non_finite(path, t, D, [&] { return "tensor '" + name + "', a position table of the run"; });
  };
  for (const int64_t step : run.steps) {
    const std::string name = "positions.step_" + std::to_string(step);
    TrainedPositions t;
    t.file_name = run.file_name;
    t.preset = "run";
    t.max_context = L;
    t.dim = D;
    t.table = run_tensor(file, name, {L, D}, "metadata 'steps' lists step " + std::to_string(step) + "; " + table_why);
    check_finite(name, t.table);
    run.snapshots.push_back(std::move(t));
  }
  run.sinusoidal = run_tensor(file, "positions.sinusoidal", {L, D}, table_why);
  check_finite("positions.sinusoidal", run.sinusoidal);

  const std::string loss_why = "one loss for each of the " + std::to_string(S) + " steps of metadata 'steps'";
  const std::pair<const char*, std::vector<float>*> losses[4] = {{"loss.train.learned", &run.loss_train_learned},
                                                                  {"loss.heldout.learned", &run.loss_heldout_learned},
                                                                  {"loss.train.sinusoidal", &run.loss_train_sinusoidal},
                                                                  {"loss.heldout.sinusoidal", &run.loss_heldout_sinusoidal}};
  for (const auto& [name, out] : losses) {
    *out = run_tensor(file, name, {S}, loss_why);
    const auto bad = std::find_if(out->begin(), out->end(), [](float v) { return !std::isfinite(v); });
    if (bad != out->end()) {
      const auto i = static_cast<size_t>(bad - out->begin());
      std::ostringstream os;
      os << path << ": tensor '" << name << "': entry " << i << " (step " << run.steps[i] << ") holds " << *bad
         << "; every loss must be finite";
      throw Error(Status::kInvalidArgument, os.str());
    }
  }
  return run;
}

}  // namespace tokpos::frontend
