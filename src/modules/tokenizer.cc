#include "tokpos/tokenizer.h"

#include "common/check.h"

namespace tokpos {

std::vector<int64_t> ByteTokenizer::encode(std::string_view text, bool add_bos, bool add_eos) {
  std::vector<int64_t> ids;
  ids.reserve(text.size() + 2);
  if (add_bos) ids.push_back(kBos);
  for (unsigned char byte : text) ids.push_back(kByteOffset + byte);
  if (add_eos) ids.push_back(kEos);
  return ids;
}

std::string ByteTokenizer::decode(std::span<const int64_t> ids) {
  std::string text;
  text.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    const int64_t id = ids[i];
    if (id >= kByteOffset && id < kVocabSize) {
      text.push_back(static_cast<char>(static_cast<unsigned char>(id - kByteOffset)));
    } else if (id == kUnk) {
      text += "\xEF\xBF\xBD";  // U+FFFD REPLACEMENT CHARACTER
    } else if (id != kPad && id != kBos && id != kEos) {
      detail::fail(Status::kIdOutOfRange, "ByteTokenizer::decode", "id ", id, " at index ", i,
                   " is outside [0, ", kVocabSize, ")");
    }
  }
  return text;
}

}  // namespace tokpos
