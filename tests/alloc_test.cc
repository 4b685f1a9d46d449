// Forward allocates nothing when the caller passes the output buffer,
// counted with a replaced global operator new.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <vector>

#include "test_util.h"
#include "tokpos/composer.h"
#include "tokpos/threading.h"
#include "replaced_new.h"

using tokpos::testing::g_allocations;

namespace {

TEST(Allocation, ForwardIntoACallerBufferAllocatesNothing) {
  for (int threads : {1, 2}) {
    tokpos::set_num_threads(threads);
    for (int mode = 0; mode < 4; ++mode) {
      const bool learned = mode & 1;
      // Through the cache, and with streaming stores (this 2 MiB output streams at 0).
      tokpos::set_stream_min_bytes(mode & 2 ? 0 : INT64_MAX);
      std::unique_ptr<tokpos::PositionalEmbedding> pos;
      if (learned) {
        pos = std::make_unique<tokpos::LearnedPositionalEmbedding>(
            tokpos::LearnedPositionalOptions{.max_context = 512, .dim = 256});
      } else {
        pos = std::make_unique<tokpos::SinusoidalPositionalEmbedding>(
            tokpos::SinusoidalOptions{.max_context = 512, .dim = 256});
      }
      tokpos::EmbeddingComposer c(tokpos::TokenEmbedding({.vocab_size = 1000, .dim = 256}), std::move(pos));
      const auto ids = tokpos::testing::ids_mod(4 * 512, 1000, 1);
      std::vector<float> out(4 * 512 * 256);
      c.forward(ids, 4, 512, out);  // warm up the library's workers
      const long before = g_allocations.load();
      c.forward(ids, 4, 512, out);
      c.forward(std::span(ids).first(1), 1, 1, std::span<float>(out.data(), 256),
                {.positions = {.start = 77}});  // decode
      c.token().forward(ids, 4, 512, out);
      EXPECT_EQ(g_allocations.load() - before, 0)
          << "threads " << threads << " learned " << learned << " streamed " << (mode >> 1);
    }
  }
  tokpos::set_num_threads(0);
  tokpos::set_stream_min_bytes(-1);
}

}  // namespace
