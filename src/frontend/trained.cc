#include "frontend/trained.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <sstream>

#include "tokpos/error.h"

namespace tokpos::frontend {

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
  // Every answer built on the table (rows, cosines, wavelengths) must be a
  // finite number: a NaN or an infinity is refused here, once, naming where.
  const auto bad = std::find_if(t.table.begin(), t.table.end(), [](float v) { return !std::isfinite(v); });
  if (bad != t.table.end()) {
    const auto i = static_cast<int64_t>(bad - t.table.begin());
    std::ostringstream os;
    os << path << ": tensor '" << preset_tensor_name(file, preset, preset == "gpt2" ? "wpe" : "position", names) << "', the " << preset
       << " preset's position table (L = " << t.max_context << ", D = " << t.dim << "): row " << i / t.dim
       << " holds " << *bad << " at column " << i % t.dim
       << ", the first value that is not finite; every value of a position table must be finite";
    throw Error(Status::kInvalidArgument, os.str());
  }
  return t;
}

}  // namespace tokpos::frontend
