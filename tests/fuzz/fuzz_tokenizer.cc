// Any bytes round-trip through the byte tokenizer; any ids decode or throw.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "tokpos/error.h"
#include "tokpos/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  if (tokpos::ByteTokenizer::decode(tokpos::ByteTokenizer::encode(text, size % 2, size % 3)) != text) __builtin_trap();
  std::vector<int64_t> ids(size / 8);
  if (!ids.empty()) std::memcpy(ids.data(), data, ids.size() * 8);
  try {
    tokpos::ByteTokenizer::decode(ids);
  } catch (const tokpos::Error&) {
  }
  return 0;
}
