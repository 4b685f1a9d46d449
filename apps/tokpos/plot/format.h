// One number in printf style, for the demo's text and the figures' labels.
#pragma once

#include <concepts>
#include <cstdio>
#include <string>

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

}  // namespace tokpos::plot
