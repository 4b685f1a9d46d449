// One number in printf style, for the demo's text and the figures' labels.
#pragma once

#include <cstdio>
#include <string>

namespace tokpos::plot {

// fmt("%.3f", 0.5) == "0.500". f takes exactly one double.
inline std::string fmt(const char* f, double v) {
  char buf[96];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

}  // namespace tokpos::plot
