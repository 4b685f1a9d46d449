#include "tokpos/presets.h"

#include <sstream>

#include "common/check.h"

namespace tokpos {
namespace {

std::string shape_text(const std::vector<int64_t>& shape) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  return os.str() + "]";
}

// The file's name for a role: an override, else the default, else the default with a prefix.
std::string resolve(const SafetensorsFile& f, const NameMap& overrides, const std::string& role,
                    const std::string& name, const char* preset) {
  if (const auto it = overrides.find(role); it != overrides.end()) {
    if (!f.contains(it->second)) {
      detail::fail(Status::kInvalidArgument, preset, f.path(), ": missing tensor '", it->second,
                   "' (mapped from ", role, ")");
    }
    return it->second;
  }
  for (const char* prefix : {"", "transformer.", "bert.", "model."}) {
    if (f.contains(prefix + name)) return prefix + name;
  }
  detail::fail(Status::kInvalidArgument, preset, f.path(), ": missing tensor '", name, "' (the ", role,
               " table of the ", preset, " preset; map another name with --map ", role, "=NAME)");
}

// A 2-D table whose second dimension, if D > 0, must be D.
std::vector<float> table(const SafetensorsFile& f, const std::string& name, int64_t D, const char* preset,
                         int64_t* rows, int64_t* cols) {
  const auto& info = f.info(name);
  if (info.shape.size() != 2 || (D > 0 && info.shape[1] != D) || info.shape[0] < 1 || info.shape[1] < 1) {
    detail::fail(Status::kShapeMismatch, preset, f.path(), ": tensor '", name, "' has shape ",
                 shape_text(info.shape), " but the ", preset, " preset needs [rows, ",
                 D > 0 ? std::to_string(D) : std::string("D"), "]");
  }
  *rows = info.shape[0];
  *cols = info.shape[1];
  return f.read_f32(name);
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

TokenEmbedding owned_table(std::vector<float> t, int64_t rows, int64_t D) {  // trainable copy
  return TokenEmbedding::from_pretrained(std::move(t), {.vocab_size = rows, .dim = D}, /*frozen=*/false);
}

std::unique_ptr<LearnedPositionalEmbedding> position_table(std::vector<float> t, int64_t L, int64_t D) {
  auto p = std::make_unique<LearnedPositionalEmbedding>(LearnedPositionalOptions{.max_context = L, .dim = D});
  std::copy(t.begin(), t.end(), p->mutable_table().begin());
  return p;
}

}  // namespace

EmbeddingComposer gpt2_from_safetensors(const SafetensorsFile& f, const NameMap& overrides) {
  constexpr const char* kPreset = "gpt2";
  int64_t V, D, L, D2;
  auto wte = table(f, resolve(f, overrides, "wte", "wte.weight", kPreset), 0, kPreset, &V, &D);
  auto wpe = table(f, resolve(f, overrides, "wpe", "wpe.weight", kPreset), D, kPreset, &L, &D2);
  return EmbeddingComposer(owned_table(std::move(wte), V, D), position_table(std::move(wpe), L, D));
}

EmbeddingComposer bert_from_safetensors(const SafetensorsFile& f, double eps, const NameMap& overrides) {
  constexpr const char* kPreset = "bert";
  int64_t V, D, L, Ty, unused;
  auto word = table(f, resolve(f, overrides, "word", "embeddings.word_embeddings.weight", kPreset), 0,
                    kPreset, &V, &D);
  auto pos = table(f, resolve(f, overrides, "position", "embeddings.position_embeddings.weight", kPreset), D,
                   kPreset, &L, &unused);
  auto types =
      table(f, resolve(f, overrides, "token_type", "embeddings.token_type_embeddings.weight", kPreset), D,
            kPreset, &Ty, &unused);
  auto gamma =
      vector_of(f, resolve(f, overrides, "ln_weight", "embeddings.LayerNorm.weight", kPreset), D, kPreset);
  auto beta =
      vector_of(f, resolve(f, overrides, "ln_bias", "embeddings.LayerNorm.bias", kPreset), D, kPreset);
  EmbeddingComposer model(owned_table(std::move(word), V, D), position_table(std::move(pos), L, D));
  model.set_token_types(owned_table(std::move(types), Ty, D));
  model.set_layer_norm({std::move(gamma), std::move(beta), eps});
  return model;
}

std::vector<int64_t> gpt2_position_ids(std::span<const int64_t> mask, int64_t B, int64_t T, int64_t past) {
  constexpr const char* kWhere = "gpt2_position_ids";
  detail::check_at_least(kWhere, "B", B, 0);
  detail::check_at_least(kWhere, "T", T, 0);
  detail::check_at_least(kWhere, "past_length", past, 0);
  const int64_t cols = past + T;
  detail::check_size(kWhere, "mask", mask.size(), detail::checked_mul(kWhere, "B*(past+T)", B, cols));
  std::vector<int64_t> out(static_cast<size_t>(B * T));
  for (int64_t b = 0; b < B; ++b) {
    int64_t sum = 0;
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t m = mask[b * cols + c];
      if (m != 0 && m != 1) {
        detail::fail(Status::kInvalidArgument, kWhere, "mask value ", m, " at (b=", b, ", t=", c,
                     ") is not 0 or 1");
      }
      sum += m;
      if (c >= past) out[b * T + (c - past)] = m == 0 ? 1 : sum - 1;
    }
  }
  return out;
}

}  // namespace tokpos
