// frontend/lang.h: the learner's language, one rule for every front end
// (tokpos demo and lab, python -m tokpos, the page's default).
#pragma once

#include <string_view>

namespace tokpos::frontend {

enum class Lang { kEn, kZh };

// "en" or "zh".
std::string_view lang_name(Lang lang);

// "en" -> kEn, "zh" -> kZh; anything else throws Error(kInvalidArgument),
// "language 'fr' is not one of en, zh", naming the value and the two accepted ones.
Lang parse_lang(std::string_view text);

// The learner's language when no --lang is given: the first of LC_ALL,
// LC_MESSAGES and LANG that is set and not empty decides; zh when it starts
// with "zh", else en (en too when none is set).
Lang default_lang();

}  // namespace tokpos::frontend
