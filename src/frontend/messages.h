// frontend/messages.h: every word the demo report says, in one catalogue,
// key -> (en, zh). The numbers are never part of a message: each "{}" is
// filled, in order, with text the report formats once for both languages,
// so the Chinese report shows the English one's numbers byte for byte.
#pragma once

#include <initializer_list>
#include <span>
#include <string>
#include <string_view>

#include "frontend/lang.h"

namespace tokpos::frontend {

struct Message {
  std::string_view key;
  std::string_view en;
  std::string_view zh;
};

// The whole catalogue, in the order the report uses it.
std::span<const Message> demo_messages();

// The message of `key` in `lang`, each "{}" replaced by the next of `args`.
// An unknown key, or a count of arguments that is not the count of "{}",
// is a bug of the caller: Error(kInternal) naming the key.
std::string tr(Lang lang, std::string_view key, std::initializer_list<std::string_view> args = {});

// Columns a terminal gives s: 2 for each East Asian wide or fullwidth
// character (CJK, fullwidth punctuation), 1 for any other code point.
size_t display_width(std::string_view s);

// s padded with spaces on the right (left) to `width` columns of display_width.
std::string pad_right(std::string_view s, size_t width);
std::string pad_left(std::string_view s, size_t width);

}  // namespace tokpos::frontend
