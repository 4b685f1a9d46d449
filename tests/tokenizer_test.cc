#include <gtest/gtest.h>

#include <string>

#include "tokpos/error.h"
#include "tokpos/tokenizer.h"

namespace {
using tokpos::ByteTokenizer;

TEST(ByteTokenizer, IdsAreBytePlusFour) {
  EXPECT_EQ(ByteTokenizer::encode("Hi"), (std::vector<int64_t>{76, 109}));
  EXPECT_EQ(ByteTokenizer::encode("Hi", true, true), (std::vector<int64_t>{2, 76, 109, 3}));
  EXPECT_TRUE(ByteTokenizer::encode("").empty());
  EXPECT_EQ(ByteTokenizer::kVocabSize, 260);
}

TEST(ByteTokenizer, RoundTripsEveryByteAndUtf8) {
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  const auto ids = ByteTokenizer::encode(all);
  for (int b = 0; b < 256; ++b) EXPECT_EQ(ids[b], b + 4);
  EXPECT_EQ(ByteTokenizer::decode(ids), all);
  const std::string text = "Hello, transformer! 你好 🙂";
  EXPECT_EQ(ByteTokenizer::decode(ByteTokenizer::encode(text, true, true)), text);
}

TEST(ByteTokenizer, SpecialsDecodeSensibly) {
  EXPECT_EQ(ByteTokenizer::decode(std::vector<int64_t>{0, 2, 76, 1, 109, 3, 0}), "H\xEF\xBF\xBDi");
}

TEST(ByteTokenizer, InvalidIdsAreNamed) {
  try {
    ByteTokenizer::decode(std::vector<int64_t>{76, 260});
    FAIL();
  } catch (const tokpos::Error& e) {
    EXPECT_EQ(e.status(), tokpos::Status::kIdOutOfRange);
    EXPECT_NE(std::string(e.what()).find("id 260 at index 1 is outside [0, 260)"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(ByteTokenizer::decode(std::vector<int64_t>{-1}), tokpos::Error);
}

}  // namespace
