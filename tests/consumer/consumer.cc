#include <tokpos/tokpos.hpp>
#include <tokpos/tokpos.h>

#include <cstdio>

int main() {
  tokpos::EmbeddingComposer c(tokpos::TokenEmbedding({.vocab_size = 260, .dim = 8}),
                              std::make_unique<tokpos::SinusoidalPositionalEmbedding>(
                                  tokpos::SinusoidalOptions{.max_context = 16, .dim = 8}));
  const auto out = c.forward(std::vector<int64_t>{76, 109}, 1, 2);
  std::printf("consumer: %zu values, PE(1,0) = %.6f\n", out.size(), tokpos_pe_sinusoidal(1, 0, 8));
  return out.size() == 16 ? 0 : 1;
}
