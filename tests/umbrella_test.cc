// tokpos/tokpos.hpp is the whole C++ API: this file includes nothing else of
// tokpos and uses one name from each public header (check_umbrella.cmake
// checks that every header of include/tokpos is included there).
#include "tokpos/tokpos.hpp"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

namespace {

TEST(Umbrella, OneNameFromEachPublicHeader) {
  // checkpoint.h, presets.h, safetensors.h, files.h, npy.h: declarations only.
  void (*load)(const std::string&, tokpos::TokenEmbedding&, bool) = &tokpos::load_checkpoint;
  EXPECT_NE(load, nullptr);
  EXPECT_TRUE((std::is_same_v<tokpos::NameMap, std::map<std::string, std::string>>));  // presets.h
  EXPECT_TRUE(std::is_class_v<tokpos::SafetensorsFile>);                              // safetensors.h
  EXPECT_TRUE(std::is_class_v<tokpos::FileBytes>);                                    // files.h
  EXPECT_TRUE(std::is_class_v<tokpos::NpyArray>);                                     // npy.h
  EXPECT_STREQ(tokpos::dtype_name(tokpos::DType::kF32), "f32");                       // dtype.h
  EXPECT_STREQ(tokpos::status_name(tokpos::Status::kOk), "TOKPOS_OK");                   // error.h
  EXPECT_GE(tokpos::num_threads(), 1);                                                // threading.h
  EXPECT_EQ(tokpos::kPositionTableStream, 1u);                                        // random.h
  EXPECT_EQ(tokpos::alibi_slopes(1).size(), 1u);                                      // positions.h
  EXPECT_EQ(tokpos::rope_frequencies(8, 10000.0).inv_freq.size(), 4u);                // rope.h
  EXPECT_EQ(tokpos::ByteTokenizer::encode("ab").size(), 2u);                          // tokenizer.h
  EXPECT_DOUBLE_EQ(tokpos::cosine(std::vector<float>{1, 0}, std::vector<float>{1, 0}), 1.0);  // diagnostics.h
  EXPECT_EQ(tokpos::sinusoidal_value(0, 1, 4), 1.0f);                                 // position_table.h
  const std::vector<float> values(6, 1.0f);
  const auto table = tokpos::TableStorage::borrowed("test", values, 3, 2);            // table_storage.h
  EXPECT_TRUE(table.borrowed());
  const tokpos::TensorView view(values.data(), tokpos::DType::kF32, {3, 2});           // ops.h
  EXPECT_EQ(view.get()->ndim, 2);
  tokpos::EmbeddingComposer model(                                                    // composer.h
      tokpos::TokenEmbedding({.vocab_size = 5, .dim = 4}),                            // token_embedding.h
      std::make_unique<tokpos::SinusoidalPositionalEmbedding>(
          tokpos::SinusoidalOptions{.max_context = 8, .dim = 4}));                    // positional.h
  EXPECT_EQ(model.forward(std::vector<int64_t>{1, 2}, 1, 2).size(), 8u);
}

}  // namespace
