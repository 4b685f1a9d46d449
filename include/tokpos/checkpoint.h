// tokpos/checkpoint.h: saving and loading module parameters (and gradients)
// as .safetensors. Saving is atomic (safetensors.h); loading checks every
// tensor's presence and shape before it changes anything, so a failed load
// leaves the module exactly as it was.
//
// Names: "token.weight", "position.weight" (learned tables only),
// "token_type.weight", "layer_norm.weight", "layer_norm.bias", and for
// gradients the same with ".grad" in place of ".weight".
#pragma once

#include <string>

#include "tokpos/composer.h"
#include "tokpos/export.h"

namespace tokpos {

TOKPOS_API void save_checkpoint(const std::string& path, const EmbeddingComposer& model,
                                bool with_gradients = false);
TOKPOS_API void load_checkpoint(const std::string& path, EmbeddingComposer& model,
                                bool with_gradients = false);

// Single modules: "weight" (and "grad").
TOKPOS_API void save_checkpoint(const std::string& path, const TokenEmbedding& module,
                                bool with_gradients = false);
TOKPOS_API void load_checkpoint(const std::string& path, TokenEmbedding& module, bool with_gradients = false);
TOKPOS_API void save_checkpoint(const std::string& path, const LearnedPositionalEmbedding& module,
                                bool with_gradients = false);
TOKPOS_API void load_checkpoint(const std::string& path, LearnedPositionalEmbedding& module,
                                bool with_gradients = false);

}  // namespace tokpos
