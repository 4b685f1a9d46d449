// One number in printf style, for the demo's text and the figures' labels.
#pragma once

#include <algorithm>
#include <concepts>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

namespace tokpos::plot {

// A printf format with exactly one conversion, and that conversion takes a
// double (f F e E g G a A). Checked at compile time: fmt("%02x", byte) does
// not compile, rather than pass a byte where printf reads a double.
class DoubleFormat {
 public:
  consteval DoubleFormat(const char* f) : f_(f) {  // NOLINT: implicit from a literal on purpose
    int conversions = 0;
    for (const char* p = f; *p != '\0'; ++p) {
      if (*p != '%') continue;
      ++p;
      if (*p == '%') continue;
      while (*p == '-' || *p == '+' || *p == ' ' || *p == '#' || *p == '0') ++p;
      while (*p >= '0' && *p <= '9') ++p;
      if (*p == '.') {
        ++p;
        while (*p >= '0' && *p <= '9') ++p;
      }
      switch (*p) {
        case 'f': case 'F': case 'e': case 'E': case 'g': case 'G': case 'a': case 'A':
          ++conversions;
          break;
        default:
          bad_format();  // a length modifier, '*', or a conversion that takes no double
      }
    }
    if (conversions != 1) bad_format();
  }
  const char* c_str() const { return f_; }

 private:
  static void bad_format() {}  // not constexpr: calling it makes the constructor ill-formed
  const char* f_;
};

// fmt("%.3f", 0.5) == "0.500". Takes one floating-point value; integers must be
// converted by the caller on purpose (or formatted another way).
inline std::string fmt(DoubleFormat f, std::floating_point auto v) {
  char buf[96];
  std::snprintf(buf, sizeof buf, f.c_str(), static_cast<double>(v));
  return buf;
}

// One character of a UTF-8 text: bytes [begin, begin + size). A byte that
// is not part of a valid UTF-8 character (a stray continuation byte, an
// overlong form, a surrogate, a code point past U+10FFFF, a sequence cut
// short) is a character of its own, with valid false and size 1.
struct Utf8Char {
  size_t begin = 0;
  size_t size = 1;
  bool valid = false;
  char32_t code = 0;  // the code point; for an invalid byte, the byte's value
};

// s split into characters, in order, covering every byte exactly once.
inline std::vector<Utf8Char> utf8_chars(std::string_view s) {
  static constexpr char32_t kSmallest[5] = {0, 0, 0x80, 0x800, 0x10000};  // by length: no overlong forms
  std::vector<Utf8Char> out;
  size_t i = 0;
  while (i < s.size()) {
    const auto lead = static_cast<unsigned char>(s[i]);
    const size_t len = lead < 0x80 ? 1 : (lead >> 5) == 6 ? 2 : (lead >> 4) == 14 ? 3 : (lead >> 3) == 30 ? 4 : 0;
    char32_t cp = len == 1 ? lead : len == 2 ? lead & 0x1Fu : len == 3 ? lead & 0x0Fu : lead & 0x07u;
    bool ok = len > 0 && i + len <= s.size();
    for (size_t j = 1; ok && j < len; ++j) {
      const auto c = static_cast<unsigned char>(s[i + j]);
      ok = (c & 0xC0) == 0x80;
      cp = (cp << 6) | (c & 0x3Fu);
    }
    ok = ok && cp >= kSmallest[len] && cp <= 0x10FFFF && (cp < 0xD800 || cp > 0xDFFF);
    if (ok) {
      out.push_back({i, len, true, cp});
      i += len;
    } else {
      out.push_back({i, 1, false, lead});
      ++i;
    }
  }
  return out;
}

// The first max_bytes bytes of s as text for a label, in whole characters:
// a UTF-8 character that does not fit entirely is left out, never cut (Cairo
// refuses a string that ends mid-character), and each byte that is not part
// of a valid UTF-8 character is shown as U+FFFD, so any bytes give a label
// Cairo can draw.
inline std::string utf8_label(std::string_view s, size_t max_bytes) {
  std::string out;
  const size_t end = std::min(s.size(), max_bytes);
  for (const Utf8Char& c : utf8_chars(s)) {
    if (c.begin >= end) break;
    if (!c.valid) {
      out += "\xEF\xBF\xBD";  // U+FFFD for this one byte
      continue;
    }
    if (c.begin + c.size > end) break;  // a whole character past the limit: left out, not cut
    out.append(s.substr(c.begin, c.size));
  }
  return out;
}

// A byte as a label: two lower-case hex digits after "0x" (0xe4 for 228).
inline std::string byte_label(unsigned char b) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "0x%02x", static_cast<unsigned>(b));
  return buf;
}

}  // namespace tokpos::plot
