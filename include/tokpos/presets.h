// tokpos/presets.h: the input stages of real architectures, loaded from
// .safetensors checkpoints with the names those checkpoints use.
//
// Given a mapped SafetensorsFile (Access::kMap), F32 tables are borrowed from
// the mapping with no copy (table() points into it); the modules hold the
// mapping alive, so the SafetensorsFile passed in may be destroyed before
// them. The mapped file must then stay as it is for as long as the modules
// live: truncating it is SIGBUS (see safetensors.h). Given a path, or a file
// opened with Access::kRead, every table is read with pread into buffers the
// modules own: a file truncated while it is read is a named Error, and the
// modules never touch the file again. F16 and BF16 tables are always widened
// into owned buffers. Borrowed tables are read-only and not frozen: backward
// fills the modules' own gradients; make_owned() gives a writable copy for an
// optimiser. LayerNorm weights are copied.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tokpos/composer.h"
#include "tokpos/export.h"
#include "tokpos/safetensors.h"

namespace tokpos {

// Tensor names a preset reads. Defaults are those of transformers' GPT2Model
// and BertModel; a name missing from the file is also tried with the usual
// prefixes ("transformer.", "bert.") before it fails. `overrides` maps a
// preset role ("wte", "wpe", "word", "position", "token_type", "ln_weight",
// "ln_bias") to the name in the file (the CLI's --map).
using NameMap = std::map<std::string, std::string>;

// The name in `file` of the tensor a preset ("gpt2" or "bert") reads for
// `role`: the override, else the default, else the default with a prefix, as
// the loaders below resolve it. A role the preset lacks, or a tensor the file
// lacks, is an Error(kInvalidArgument) naming it.
TOKPOS_API std::string preset_tensor_name(const SafetensorsFile& file, std::string_view preset,
                                          std::string_view role, const NameMap& overrides = {});

// GPT-2: wte (V, D) + wpe (L, D); the LM head is tied to wte
// (TokenEmbedding::logits / logits_backward). F32 tables are borrowed (above).
TOKPOS_API EmbeddingComposer gpt2_from_safetensors(const SafetensorsFile& file,
                                                   const NameMap& overrides = {});
// The same, reading the tables from `path` (Access::kRead: copies, no mapping).
TOKPOS_API EmbeddingComposer gpt2_from_safetensors(const std::string& path, const NameMap& overrides = {});

// BERT: word (V, D) + token_type (types, D) + position (L, D), then
// LayerNorm(eps), fused. BERT's position ids start at 0 (PositionSpec{}).
// Dropout after the LayerNorm is the identity at inference and is omitted.
TOKPOS_API EmbeddingComposer bert_from_safetensors(const SafetensorsFile& file, double layer_norm_eps = 1e-12,
                                                   const NameMap& overrides = {});
// The same, reading the tables from `path` (Access::kRead: copies, no mapping).
TOKPOS_API EmbeddingComposer bert_from_safetensors(const std::string& path, double layer_norm_eps = 1e-12,
                                                   const NameMap& overrides = {});

// GPT-2 position ids for a left-padded batch, as transformers' generation
// code computes them: cumsum(mask) - 1 along each row, and 1 where mask is 0.
// mask is (B, past + T), covering the cached tokens and the new ones; the
// result is (B, T), the last T columns. mask entries must be 0 or 1. A thin
// wrapper: position_ids_from_mask (tokpos/positions.h) computes it.
TOKPOS_API std::vector<int64_t> gpt2_position_ids(std::span<const int64_t> mask, int64_t B, int64_t T,
                                                  int64_t past_length = 0);

}  // namespace tokpos
