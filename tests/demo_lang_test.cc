// The demo report's catalogue (frontend/messages.h): every message in both
// languages, the same placeholders and the same literal numbers in each, and
// the report itself in either language with the same numbers.
#include <gtest/gtest.h>

#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "frontend/demo_report.h"
#include "frontend/messages.h"
#include "tokpos/error.h"

namespace fe = tokpos::frontend;

namespace {

size_t count_placeholders(std::string_view s) {
  size_t n = 0;
  for (size_t at = s.find("{}"); at != std::string_view::npos; at = s.find("{}", at + 2)) ++n;
  return n;
}

// Every number of s, in order: digits with a sign before them, and the
// ",ddd" groups, the ".ddd" fraction and the "e-08" exponent that follow.
std::vector<std::string> numbers(const std::string& s) {
  auto digit = [&](size_t i) { return i < s.size() && s[i] >= '0' && s[i] <= '9'; };
  auto digits_from = [&](size_t i) {
    while (digit(i)) ++i;
    return i;
  };
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    if (!digit(i)) {
      ++i;
      continue;
    }
    size_t begin = i > 0 && (s[i - 1] == '-' || s[i - 1] == '+') ? i - 1 : i;
    size_t end = digits_from(i);
    while (end + 3 < s.size() + 0 && s[end] == ',' && digit(end + 1) && digit(end + 2) && digit(end + 3) &&
           !digit(end + 4)) {
      end += 4;
    }
    if (end < s.size() && s[end] == '.' && digit(end + 1)) end = digits_from(end + 1);
    if (end < s.size() && s[end] == 'e' && end + 1 < s.size() && (s[end + 1] == '-' || s[end + 1] == '+') &&
        digit(end + 2)) {
      end = digits_from(end + 2);
    }
    out.push_back(s.substr(begin, end - begin));
    i = end;
  }
  return out;
}

std::string report(fe::DemoOptions o, const char* lang) {
  o.lang = lang;
  std::ostringstream os;
  fe::run_demo(o, os);
  return os.str();
}

}  // namespace

TEST(DemoMessages, EveryMessageHasBothLanguages) {
  std::set<std::string_view> keys;
  ASSERT_GT(fe::demo_messages().size(), 30u);
  for (const fe::Message& m : fe::demo_messages()) {
    EXPECT_TRUE(keys.insert(m.key).second) << "key given twice: " << m.key;
    EXPECT_FALSE(m.en.empty()) << m.key << " has no English";
    EXPECT_FALSE(m.zh.empty()) << m.key << " has no Chinese";
    EXPECT_NE(m.en, m.zh) << m.key << ": the Chinese is the English";
    EXPECT_EQ(count_placeholders(m.en), count_placeholders(m.zh)) << m.key;
    EXPECT_EQ(numbers(std::string(m.en)), numbers(std::string(m.zh))) << m.key;
  }
}

TEST(DemoMessages, TrFillsPlaceholdersAndRefusesMisuse) {
  EXPECT_EQ(fe::tr(fe::Lang::kEn, "text.bytes", {"19"}), "(19 bytes)");
  EXPECT_EQ(fe::tr(fe::Lang::kZh, "text.bytes", {"19"}), "（19 字节）");
  EXPECT_THROW((void)fe::tr(fe::Lang::kEn, "no.such.key"), tokpos::Error);
  EXPECT_THROW((void)fe::tr(fe::Lang::kEn, "text.bytes"), tokpos::Error);
  EXPECT_THROW((void)fe::tr(fe::Lang::kZh, "text.bytes", {"1", "2"}), tokpos::Error);
}

TEST(DemoMessages, DisplayWidthCountsWideCharactersTwice) {
  EXPECT_EQ(fe::display_width("learned"), 7u);
  EXPECT_EQ(fe::display_width("学习式"), 6u);
  EXPECT_EQ(fe::display_width("（19）"), 6u);
  EXPECT_EQ(fe::display_width("\xe4\xbd"), 2u);  // a cut character: one column per byte
  EXPECT_EQ(fe::pad_right("正弦", 6), "正弦  ");
  EXPECT_EQ(fe::pad_left("合计", 5), " 合计");
}

TEST(DemoMessages, ReportsInBothLanguagesHaveTheSameNumbersAndJson) {
  std::vector<fe::DemoOptions> configs(4);
  configs[1].dim = 32;
  configs[2].max_context = 2;
  configs[2].text = "ab";
  configs[3].text = "你好";
  for (fe::DemoOptions& o : configs) {
    const std::string en = report(o, "en"), zh = report(o, "zh");
    EXPECT_NE(en, zh);
    EXPECT_EQ(numbers(en), numbers(zh)) << zh;
    o.json = true;
    EXPECT_EQ(report(o, "en"), report(o, "zh"));
  }
}

TEST(DemoMessages, AnUnknownLanguageIsNamed) {
  fe::DemoOptions o;
  o.lang = "fr";
  std::ostringstream os;
  try {
    fe::run_demo(o, os);
    FAIL() << "no error";
  } catch (const tokpos::Error& e) {
    EXPECT_NE(std::string(e.what()).find("language 'fr' is not one of en, zh"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(os.str().empty());
}
