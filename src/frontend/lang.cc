#include "frontend/lang.h"

#include <cstdlib>
#include <string>

#include "tokpos/error.h"

namespace tokpos::frontend {

std::string_view lang_name(Lang lang) { return lang == Lang::kZh ? "zh" : "en"; }

Lang parse_lang(std::string_view text) {
  if (text == "en") return Lang::kEn;
  if (text == "zh") return Lang::kZh;
  throw Error(Status::kInvalidArgument, "language '" + std::string(text) + "' is not one of en, zh");
}

Lang default_lang() {
  for (const char* name : {"LC_ALL", "LC_MESSAGES", "LANG"}) {
    const char* value = std::getenv(name);
    if (value != nullptr && value[0] != '\0') return std::string_view(value).starts_with("zh") ? Lang::kZh : Lang::kEn;
  }
  return Lang::kEn;
}

}  // namespace tokpos::frontend
