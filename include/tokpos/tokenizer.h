// tokpos/tokenizer.h: the course's byte-level tokenizer (seed 002, Chapter 2).
//
// Four special ids, then one id per byte:
//   PAD = 0, UNK = 1, BOS = 2, EOS = 3, byte b -> b + 4     ("Hi" -> 76, 109)
// so the vocabulary has 260 entries. Any byte string round-trips exactly,
// including invalid UTF-8.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tokpos/export.h"

namespace tokpos {

struct TOKPOS_API ByteTokenizer {
  static constexpr int64_t kPad = 0;
  static constexpr int64_t kUnk = 1;
  static constexpr int64_t kBos = 2;
  static constexpr int64_t kEos = 3;
  static constexpr int64_t kByteOffset = 4;
  static constexpr int64_t kVocabSize = 260;

  // One id per byte, optionally framed by BOS and EOS.
  static std::vector<int64_t> encode(std::string_view text, bool add_bos = false, bool add_eos = false);

  // Inverse of encode: PAD, BOS and EOS are dropped, UNK becomes U+FFFD.
  // Throws Error(kIdOutOfRange) naming the id and its index for ids outside [0, 260).
  static std::string decode(std::span<const int64_t> ids);
};

}  // namespace tokpos
