#include "frontend/params.h"

#include <charconv>
#include <cmath>
#include <system_error>

namespace tokpos::frontend {
namespace {

// A value as it appears in a message: quoted, at most 64 bytes, then "...".
std::string shown(std::string_view s) {
  return "'" + std::string(s.substr(0, 64)) + (s.size() > 64 ? "..." : "") + "'";
}

std::string range(const IntParam& p) { return "[" + std::to_string(p.min) + ", " + std::to_string(p.max) + "]"; }

[[noreturn]] void bad(const char* name, std::string message) { throw ParamError(name, message); }

}  // namespace

std::string describe(const IntParam& p) { return "an integer in " + range(p); }
std::string describe(const PositiveParam&) { return "finite and > 0"; }
std::string describe_seed() { return "an integer in [0, 2^64 - 1 = 18446744073709551615]"; }

std::string out_of_range(const IntParam& p, std::string_view text) {
  return std::string(p.name) + " = " + shown(text) + " is outside " + range(p);
}

int64_t parse(const IntParam& p, std::string_view text) {
  int64_t v = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (text.empty() || ptr != end || (ec != std::errc() && ec != std::errc::result_out_of_range)) {
    bad(p.name, std::string(p.name) + " = " + shown(text) + " is not " + describe(p));
  }
  if (ec == std::errc::result_out_of_range || v < p.min || v > p.max) bad(p.name, out_of_range(p, text));
  return v;
}

uint64_t parse_seed(std::string_view text, const char* name) {
  uint64_t v = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (text.empty() || ptr != end || ec != std::errc()) {
    bad(name, std::string(name) + " = " + shown(text) + " is not " + describe_seed());
  }
  return v;
}

double parse(const PositiveParam& p, std::string_view text) {
  double v = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (text.empty() || ptr != end || (ec != std::errc() && ec != std::errc::result_out_of_range)) {
    bad(p.name, std::string(p.name) + " = " + shown(text) + " is not a number (it must be " + describe(p) + ")");
  }
  if (ec == std::errc::result_out_of_range || !std::isfinite(v) || !(v > 0.0)) {
    bad(p.name, std::string(p.name) + " = " + shown(text) + " must be " + describe(p));
  }
  return v;
}

size_t parse_choice(std::string_view text, const char* name, const std::vector<std::string>& choices) {
  for (size_t i = 0; i < choices.size(); ++i) {
    if (text == choices[i]) return i;
  }
  bad(name, std::string(name) + " = " + shown(text) + " is not one of " + join(choices));
}

Layout parse_layout_param(std::string_view text, const char* name) {
  return all_layouts()[parse_choice(text, name, layout_names())];
}

DType parse_float_dtype(std::string_view text, const char* name) {
  const std::vector<std::string> names = float_dtype_names();
  return *parse_dtype(names[parse_choice(text, name, names)]);
}

std::vector<std::string> layout_names() {
  std::vector<std::string> names;
  for (const Layout l : all_layouts()) names.emplace_back(layout_name(l));
  return names;
}

std::vector<std::string> float_dtype_names() {
  std::vector<std::string> names;
  for (const DType d : {DType::kF32, DType::kBF16, DType::kF16, DType::kI32, DType::kI64}) {
    if (is_float(d)) names.emplace_back(dtype_name(d));
  }
  return names;
}

std::string join(const std::vector<std::string>& names, const char* sep) {
  std::string s;
  for (size_t i = 0; i < names.size(); ++i) s += (i ? sep : "") + names[i];
  return s;
}

}  // namespace tokpos::frontend
