#include "embed.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string_view>
#include <sstream>

#include "inspect.h"
#include "progress.h"

#include "frontend/trained.h"

#include "tokpos/diagnostics.h"
#include "tokpos/error.h"
#include "tokpos/gguf.h"
#include "tokpos/ops.h"
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

// out = mean, std, min, max and the first values of (B, T, D) floats, then --out.
void report(const EmbedCommand& c, const std::vector<float>& out, int64_t B, int64_t T, int64_t D,
            std::ostream& log) {
  std::vector<double> all(out.begin(), out.end());
  const auto s = summarize(all);
  char line[256];
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

// The architectures whose GGUF files hold a learned position table
// (position_embd.weight), added to the token rows as GPT-2 adds wpe. Every
// other architecture positions tokens inside attention (RoPE, ALiBi): its
// input stage is the token rows alone.
bool has_learned_positions(std::string_view arch) { return arch == "gpt2" || arch == "starcoder"; }

// A GGUF tensor's bytes as a (rows, row_bytes) uint8 DLTensor, for the ops:
// in place, or copied where general.alignment leaves f32, f16 or bf16 data
// unaligned for its elements (GgufFile::aligned_bytes).
struct BlockView {
  int64_t shape[2];
  DLTensor dl{};
  GgufFile::AlignedBytes bytes;
  BlockView(const GgufFile& file, const GgufTensorInfo& t) : bytes(file.aligned_bytes(t.name)) {
    const int64_t rows = t.dims.size() == 2 ? t.dims[1] : 1;
    shape[0] = rows;
    shape[1] = static_cast<int64_t>(t.nbytes) / (rows > 0 ? rows : 1);
    dl.data = const_cast<uint8_t*>(bytes.bytes.data());
    dl.device = {kDLCPU, 0};
    dl.ndim = 2;
    dl.dtype = {kDLUInt, 8, 1};
    dl.shape = shape;
  }
};

// tokpos embed --weights FILE.gguf: token_embd.weight in any of ggml's block
// types, looked up and dequantized, plus position_embd.weight where the
// file's general.architecture has one.
void run_embed_gguf(const EmbedCommand& c, std::ostream& log) {
  const char* fn = "tokpos embed";
  auto refuse = [&](const std::string& what) { throw Error(Status::kInvalidArgument, std::string(fn) + ": " + what); };
  if (c.preset_given) refuse("--preset is for safetensors files; a GGUF file names its architecture (general.architecture)");
  if (!c.map.empty()) refuse("--map is for safetensors files; a GGUF file's tensor names are fixed (token_embd.weight)");
  if (!c.token_types.empty() || c.eps_given || c.no_layer_norm)
    refuse("--token-types, --eps and --no-layer-norm belong to the bert preset of safetensors files");
  int64_t B, T;
  const auto ids = parse_matrix(c.ids, "--ids", &B, &T);
  const auto file = GgufFile::open(c.weights);
  const GgufValue* arch_value = file.find("general.architecture");
  if (arch_value == nullptr || arch_value->type() != GgufType::kString)
    throw Error(Status::kCorruptFile, c.weights + ": general.architecture is " +
                                          (arch_value ? std::string("not a string") : std::string("missing")) +
                                          "; GGUF requires it, and it says which tables the input stage reads");
  const std::string arch = gguf_printable(arch_value->to_string());  // shown, never sent to the terminal raw
  if (arch == "bert" || arch == "nomic-bert" || arch == "jina-bert-v2")
    refuse("general.architecture '" + arch + "': the BERT input stage (token types, LayerNorm) is read from "
           "safetensors with --preset bert; its GGUF form is not supported");
  const GgufTensorInfo& token = file.tensor("token_embd.weight");
  if (token.dims.size() != 2)
    throw Error(Status::kCorruptFile, c.weights + ": token_embd.weight has " + std::to_string(token.dims.size()) +
                                          " dims; a token table has 2 (D, V)");
  const int64_t D = token.dims[0], V = token.dims[1];
  const bool learned = has_learned_positions(arch);
  std::vector<int64_t> positions;
  int64_t start = 0;
  std::string position_note;
  if (learned && !c.mask.empty()) {
    int64_t r, k;
    const auto mask = parse_matrix(c.mask, "--mask", &r, &k);
    if (r != B || k != c.past + T)
      refuse("--mask must be (B, past + T) = (" + std::to_string(B) + ", " + std::to_string(c.past + T) + ")");
    positions = position_ids_from_mask(mask, B, c.past + T, T);
    position_note = "positions from the attention mask (cumsum - 1, pads at 1)";
  } else if (learned) {
    start = c.past;
    position_note = "positions " + std::to_string(c.past) + ".." + std::to_string(c.past + T - 1);
  } else {
    if (!c.mask.empty() || c.past != 0)
      refuse("--mask and --past: general.architecture '" + arch + "' has no position table (positions enter "
             "inside attention), so the input stage does not depend on them");
    position_note = "token rows only (" + arch + " has no position table)";
  }
  const BlockView blocks(file, token);
  std::optional<TensorView> pos;
  GgufFile::AlignedBytes pos_bytes;
  int64_t L = 0;
  if (learned) {
    const GgufTensorInfo& p = file.tensor("position_embd.weight");
    if (p.dims.size() != 2 || p.dims[0] != D)
      throw Error(Status::kCorruptFile, c.weights + ": position_embd.weight must be (D, L) with D = " +
                                            std::to_string(D) + " as token_embd.weight");
    L = p.dims[1];
    const std::optional<DType> pos_dtype = ggml_float_dtype(p.ggml_type);
    if (!pos_dtype)
      refuse(std::string("position_embd.weight is ") + ggml_type_traits(static_cast<int64_t>(p.ggml_type))->name +
             "; a position table must be f32, f16 or bf16");
    pos_bytes = file.aligned_bytes(p.name);
    pos.emplace(pos_bytes.bytes.data(), *pos_dtype, std::initializer_list<int64_t>{L, D});
  }
  std::vector<float> out;
  try {
    out.resize(static_cast<size_t>(B) * static_cast<size_t>(T) * static_cast<size_t>(D));
  } catch (const std::bad_alloc&) {
    throw Error(Status::kOutOfMemory, std::string(fn) + ": the output (B, T, D) = (" + std::to_string(B) + ", " +
                                          std::to_string(T) + ", " + std::to_string(D) + ") floats");
  }
  const TensorView out_view(out.data(), DType::kF32, {B, T, D});
  const TensorView ids_view(ids.data(), DType::kI64, {B, T});
  std::optional<TensorView> pos_ids;
  if (!positions.empty()) pos_ids.emplace(positions.data(), DType::kI64, std::initializer_list<int64_t>{B, T});
  ops::compose_forward(out_view, ids_view, ops::QuantizedTable{&blocks.dl, static_cast<int>(token.ggml_type), D},
                       pos ? pos->get() : nullptr, pos_ids ? pos_ids->get() : nullptr, start, {.where = fn});
  const GgmlTypeTraits* traits = ggml_type_traits(static_cast<int64_t>(token.ggml_type));
  char line[256];
  std::snprintf(line, sizeof line, "%s from %s (GGUF v%u): token_embd.weight %s, V = %lld, D = %lld", arch.c_str(),
                c.weights.c_str(), file.version(), traits->name, static_cast<long long>(V),
                static_cast<long long>(D));
  log << line;
  if (learned) log << ", position_embd.weight L = " << L;
  log << "\n";
  log << "ids (B, T) = (" << B << ", " << T << ") -> output (B, T, D) = (" << B << ", " << T << ", " << D
      << "), " << position_note << "\n";
  report(c, out, B, T, D, log);
}

}  // namespace

void run_embed(const EmbedCommand& c, std::ostream& log) {
  if (is_gguf_file(c.weights)) return run_embed_gguf(c, log);
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

  char line[256];
  std::snprintf(line, sizeof line, "%s preset from %s: V = %lld, D = %lld, L = %lld%s\n", c.preset.c_str(),
                c.weights.c_str(), static_cast<long long>(model.token().vocab_size()),
                static_cast<long long>(D), static_cast<long long>(model.position().max_context()),
                c.preset == "bert" ? (c.no_layer_norm ? ", sum before LayerNorm" : ", with LayerNorm") : "");
  log << line;
  log << "ids (B, T) = (" << B << ", " << T << ") -> output (B, T, D) = (" << B << ", " << T << ", " << D
      << "), " << position_note << "\n";
  report(c, out, B, T, D, log);
}

}  // namespace tokpos::app
