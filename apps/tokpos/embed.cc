#include "embed.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "progress.h"

#include "frontend/trained.h"

#include "tokpos/diagnostics.h"
#include "tokpos/error.h"
#include "tokpos/npy.h"
#include "tokpos/positions.h"
#include "tokpos/presets.h"

namespace tokpos::app {
namespace {

// "1,2,3;4,5,6" -> values and the (rows, cols) shape; rows must agree in length.
std::vector<int64_t> parse_matrix(const std::string& text, const char* flag, int64_t* rows, int64_t* cols) {
  std::vector<int64_t> values;
  *rows = 0;
  *cols = -1;
  std::stringstream all(text);
  std::string row;
  while (std::getline(all, row, ';')) {
    std::stringstream items(row);
    std::string item;
    int64_t count = 0;
    while (std::getline(items, item, ',')) {
      try {
        size_t used = 0;
        values.push_back(std::stoll(item, &used));
        if (item.find_first_not_of(" ", used) != std::string::npos) throw std::invalid_argument(item);
      } catch (const std::exception&) {
        throw Error(Status::kInvalidArgument,
                    std::string("tokpos embed: ") + flag + ": '" + item + "' is not an integer");
      }
      ++count;
    }
    if (*cols >= 0 && count != *cols) {
      throw Error(Status::kInvalidArgument, std::string("tokpos embed: ") + flag + ": row " +
                                                std::to_string(*rows) + " has " + std::to_string(count) +
                                                " values, row 0 has " + std::to_string(*cols));
    }
    *cols = count;
    ++*rows;
  }
  if (*rows == 0 || *cols <= 0)
    throw Error(Status::kInvalidArgument, std::string("tokpos embed: ") + flag + " is empty");
  return values;
}

}  // namespace

void run_embed(const EmbedCommand& c, std::ostream& log) {
  // Every flag is checked before the weights are read: none is silently ignored.
  if (c.preset == "gpt2" && c.eps_given)
    throw Error(Status::kInvalidArgument, "tokpos embed: --eps belongs to the bert preset (gpt2 has no LayerNorm here)");
  if (c.preset == "gpt2" && c.no_layer_norm)
    throw Error(Status::kInvalidArgument, "tokpos embed: --no-layer-norm belongs to the bert preset");
  const NameMap names = frontend::parse_name_map("tokpos embed", c.preset, c.map);
  int64_t B, T;
  const auto ids = parse_matrix(c.ids, "--ids", &B, &T);
  // Read with pread (copies): a weights file truncated meanwhile is a named error, not SIGBUS.
  const auto file = SafetensorsFile::open(c.weights, SafetensorsFile::Access::kRead);
  ComposeOptions options;
  std::vector<int64_t> types, positions;
  std::string position_note = "positions 0.." + std::to_string(T - 1);
  EmbeddingComposer model =
      c.preset == "gpt2" ? gpt2_from_safetensors(file, names) : bert_from_safetensors(file, c.eps, names);
  if (!c.token_types.empty()) {
    if (c.preset != "bert")
      throw Error(Status::kInvalidArgument, "tokpos embed: --token-types belongs to the bert preset");
    int64_t r, k;
    types = parse_matrix(c.token_types, "--token-types", &r, &k);
    if (r != B || k != T)
      throw Error(Status::kInvalidArgument, "tokpos embed: --token-types must have the shape of --ids");
    const int64_t n_types = model.token_types() ? model.token_types()->vocab_size() : 0;
    for (size_t i = 0; i < types.size(); ++i) {
      if (types[i] < 0 || types[i] >= n_types) {
        throw Error(Status::kIdOutOfRange,
                    "tokpos embed: --token-types: token type id " + std::to_string(types[i]) + " at (b=" +
                        std::to_string(static_cast<int64_t>(i) / T) + ", t=" +
                        std::to_string(static_cast<int64_t>(i) % T) + ") is outside [0, " +
                        std::to_string(n_types) + ") (the checkpoint's token types)");
      }
    }
    options.token_type_ids = types;
  }
  if (c.preset == "gpt2") {
    if (!c.mask.empty()) {
      int64_t r, k;
      const auto mask = parse_matrix(c.mask, "--mask", &r, &k);
      if (r != B || k != c.past + T) {
        throw Error(Status::kInvalidArgument, "tokpos embed: --mask must be (B, past + T) = (" +
                                                  std::to_string(B) + ", " + std::to_string(c.past + T) +
                                                  ")");
      }
      positions = position_ids_from_mask(mask, B, c.past + T, T);
      options.positions.ids = positions;
      position_note = "positions from the attention mask (cumsum - 1, pads at 1)";
    } else {
      options.positions.start = c.past;
      position_note = "positions " + std::to_string(c.past) + ".." + std::to_string(c.past + T - 1);
    }
  } else if (!c.mask.empty() || c.past != 0) {
    throw Error(Status::kInvalidArgument, "tokpos embed: --mask and --past belong to the gpt2 preset");
  }
  options.layer_norm = !c.no_layer_norm;
  const auto out = model.forward(ids, B, T, options);
  const int64_t D = model.dim();

  std::vector<double> all(out.begin(), out.end());
  const auto s = summarize(all);
  char line[256];
  std::snprintf(line, sizeof line, "%s preset from %s: V = %lld, D = %lld, L = %lld%s\n", c.preset.c_str(),
                c.weights.c_str(), static_cast<long long>(model.token().vocab_size()),
                static_cast<long long>(D), static_cast<long long>(model.position().max_context()),
                c.preset == "bert" ? (c.no_layer_norm ? ", sum before LayerNorm" : ", with LayerNorm") : "");
  log << line;
  log << "ids (B, T) = (" << B << ", " << T << ") -> output (B, T, D) = (" << B << ", " << T << ", " << D
      << "), " << position_note << "\n";
  std::snprintf(line, sizeof line, "output: mean %+.6f, std %.6f, min %+.6f, max %+.6f\n", s.mean, s.stddev,
                s.min, s.max);
  log << line;
  log << "out[0, 0, :6] =";
  for (int64_t d = 0; d < std::min<int64_t>(6, D); ++d) {
    std::snprintf(line, sizeof line, " %+.6f", static_cast<double>(out[static_cast<size_t>(d)]));
    log << line;
  }
  log << "\n";
  if (!c.out.empty()) {
    plot::DeferSignals defer;  // an interrupt waits for the (atomic) write: no temporary file is left
    write_npy(c.out, "<f4", {B, T, D}, out.data(), out.size() * sizeof(float));
    log << "wrote " << c.out << "\n";
  }
}

}  // namespace tokpos::app
