#include "tokpos/presets.h"

#include <cstdint>
#include <memory>
#include <sstream>

#include "common/check.h"
#include "tokpos/positions.h"

namespace tokpos {
namespace {

std::string shape_text(const std::vector<int64_t>& shape) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  return os.str() + "]";
}

// The default name of each preset's roles: transformers' GPT2Model and BertModel.
const char* default_name(std::string_view preset, std::string_view role) {
  struct Role {
    std::string_view preset, role;
    const char* name;
  };
  static constexpr Role kRoles[] = {
      {"gpt2", "wte", "wte.weight"},
      {"gpt2", "wpe", "wpe.weight"},
      {"bert", "word", "embeddings.word_embeddings.weight"},
      {"bert", "position", "embeddings.position_embeddings.weight"},
      {"bert", "token_type", "embeddings.token_type_embeddings.weight"},
      {"bert", "ln_weight", "embeddings.LayerNorm.weight"},
      {"bert", "ln_bias", "embeddings.LayerNorm.bias"},
  };
  for (const Role& r : kRoles)
    if (r.preset == preset && r.role == role) return r.name;
  detail::fail(Status::kInvalidArgument, "preset_tensor_name", "'", role, "' is not a role of the '", preset,
               "' preset (gpt2: wte, wpe; bert: word, position, token_type, ln_weight, ln_bias)");
}

// A table from the file: an F32 tensor viewed in place in the mapping (no
// copy), or F16 / BF16 (or an F32 tensor not 4-byte aligned, or any tensor of
// a file opened with Access::kRead) read into an owned buffer.
struct Loaded {
  std::span<const float> view;  // the mapped tensor when borrowed; empty otherwise
  std::vector<float> owned;     // the widened values otherwise
  bool borrowed() const { return !view.empty(); }
};

Loaded load(const SafetensorsFile& f, const std::string& name) {
  if (f.access() == SafetensorsFile::Access::kMap && f.info(name).dtype == "F32" &&
      reinterpret_cast<uintptr_t>(f.bytes(name).data()) % alignof(float) == 0) {
    return {f.view_f32(name), {}};
  }
  return {{}, f.read_f32(name)};
}

// A 2-D table whose second dimension, if D > 0, must be D.
Loaded table(const SafetensorsFile& f, const std::string& name, int64_t D, const char* preset, int64_t* rows,
             int64_t* cols) {
  const auto& info = f.info(name);
  if (info.shape.size() != 2 || (D > 0 && info.shape[1] != D) || info.shape[0] < 1 || info.shape[1] < 1) {
    detail::fail(Status::kShapeMismatch, preset, f.path(), ": tensor '", name, "' has shape ",
                 shape_text(info.shape), " but the ", preset, " preset needs [rows, ",
                 D > 0 ? std::to_string(D) : std::string("D"), "]");
  }
  *rows = info.shape[0];
  *cols = info.shape[1];
  return load(f, name);
}

std::vector<float> vector_of(const SafetensorsFile& f, const std::string& name, int64_t D,
                             const char* preset) {
  const auto& info = f.info(name);
  if (info.shape.size() != 1 || info.shape[0] != D) {
    detail::fail(Status::kShapeMismatch, preset, f.path(), ": tensor '", name, "' has shape ",
                 shape_text(info.shape), " but the ", preset, " preset needs [", D, "]");
  }
  return f.read_f32(name);
}

// Not frozen: backward fills the module's own gradient either way. `file`
// keeps the mapping alive for as long as a borrowed table needs it.
TokenEmbedding token_table(Loaded t, int64_t rows, int64_t D,
                           const std::shared_ptr<const SafetensorsFile>& file) {
  const TokenEmbeddingOptions options{.vocab_size = rows, .dim = D};
  if (t.borrowed()) return TokenEmbedding::borrow(t.view, options, /*frozen=*/false, file);
  return TokenEmbedding::from_pretrained(std::move(t.owned), options, /*frozen=*/false);
}

std::unique_ptr<LearnedPositionalEmbedding> position_table(
    Loaded t, int64_t L, int64_t D, const std::shared_ptr<const SafetensorsFile>& file) {
  const LearnedPositionalOptions options{.max_context = L, .dim = D};
  if (t.borrowed()) {
    return std::make_unique<LearnedPositionalEmbedding>(
        LearnedPositionalEmbedding::borrow(t.view, options, file));
  }
  auto p = std::make_unique<LearnedPositionalEmbedding>(options);
  std::copy(t.owned.begin(), t.owned.end(), p->mutable_table().begin());
  return p;
}

}  // namespace

// The file's name for a role: an override, else the default, else the default with a prefix.
std::string preset_tensor_name(const SafetensorsFile& f, std::string_view preset, std::string_view role,
                               const NameMap& overrides) {
  const char* name = default_name(preset, role);
  const std::string where(preset);
  if (const auto it = overrides.find(std::string(role)); it != overrides.end()) {
    if (!f.contains(it->second)) {
      detail::fail(Status::kInvalidArgument, where.c_str(), f.path(), ": missing tensor '", it->second,
                   "' (mapped from ", role, ")");
    }
    return it->second;
  }
  for (const char* prefix : {"", "transformer.", "bert.", "model."}) {
    if (f.contains(prefix + std::string(name))) return prefix + std::string(name);
  }
  detail::fail(Status::kInvalidArgument, where.c_str(), f.path(), ": missing tensor '", name, "' (the ", role,
               " table of the ", preset, " preset; map another name with --map ", role, "=NAME)");
}

// The presets view the tables in a copy of the file object: it shares the
// mapping, so the modules keep it alive after the caller's object is gone.
EmbeddingComposer gpt2_from_safetensors(const SafetensorsFile& file, const NameMap& overrides) {
  constexpr const char* kPreset = "gpt2";
  const auto keep = std::make_shared<const SafetensorsFile>(file);
  const SafetensorsFile& f = *keep;
  int64_t V, D, L, D2;
  auto wte = table(f, preset_tensor_name(f, kPreset, "wte", overrides), 0, kPreset, &V, &D);
  auto wpe = table(f, preset_tensor_name(f, kPreset, "wpe", overrides), D, kPreset, &L, &D2);
  return EmbeddingComposer(token_table(std::move(wte), V, D, keep),
                           position_table(std::move(wpe), L, D, keep));
}

EmbeddingComposer bert_from_safetensors(const SafetensorsFile& file, double eps, const NameMap& overrides) {
  constexpr const char* kPreset = "bert";
  const auto keep = std::make_shared<const SafetensorsFile>(file);
  const SafetensorsFile& f = *keep;
  int64_t V, D, L, Ty, unused;
  auto word = table(f, preset_tensor_name(f, kPreset, "word", overrides), 0,
                    kPreset, &V, &D);
  auto pos = table(f, preset_tensor_name(f, kPreset, "position", overrides), D,
                   kPreset, &L, &unused);
  auto types =
      table(f, preset_tensor_name(f, kPreset, "token_type", overrides), D,
            kPreset, &Ty, &unused);
  auto gamma =
      vector_of(f, preset_tensor_name(f, kPreset, "ln_weight", overrides), D, kPreset);
  auto beta =
      vector_of(f, preset_tensor_name(f, kPreset, "ln_bias", overrides), D, kPreset);
  EmbeddingComposer model(token_table(std::move(word), V, D, keep),
                          position_table(std::move(pos), L, D, keep));
  model.set_token_types(token_table(std::move(types), Ty, D, keep));
  model.set_layer_norm({std::move(gamma), std::move(beta), eps});
  return model;
}

EmbeddingComposer gpt2_from_safetensors(const std::string& path, const NameMap& overrides) {
  return gpt2_from_safetensors(SafetensorsFile::open(path, SafetensorsFile::Access::kRead), overrides);
}

EmbeddingComposer bert_from_safetensors(const std::string& path, double eps, const NameMap& overrides) {
  return bert_from_safetensors(SafetensorsFile::open(path, SafetensorsFile::Access::kRead), eps, overrides);
}

std::vector<int64_t> gpt2_position_ids(std::span<const int64_t> mask, int64_t B, int64_t T, int64_t past) {
  constexpr const char* kWhere = "gpt2_position_ids";
  detail::check_at_least(kWhere, "T", T, 0);
  detail::check_at_least(kWhere, "past_length", past, 0);
  int64_t cols = 0;
  if (__builtin_add_overflow(past, T, &cols)) {
    detail::fail(Status::kSizeOverflow, kWhere, "past_length + T = ", past, " + ", T, " overflows int64");
  }
  return position_ids_from_mask(mask, B, cols, T);
}

}  // namespace tokpos
