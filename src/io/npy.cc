#include "tokpos/npy.h"

#include <charconv>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/check.h"
#include "io/atomic_file.h"

namespace tokpos {
namespace {

constexpr char kMagic[] = "\x93NUMPY";

size_t item_size(const char* where, const std::string& descr) {
  if (descr == "<f4" || descr == "<i4" || descr == "<u4") return 4;
  if (descr == "<f2" || descr == "<u2" || descr == "<i2") return 2;
  if (descr == "<f8" || descr == "<i8" || descr == "<u8") return 8;
  if (descr == "|u1" || descr == "|i1") return 1;
  detail::fail(Status::kInvalidArgument, where, "unsupported dtype descr '", descr, "'");
}

}  // namespace

void write_npy(const std::string& path, const std::string& descr, const std::vector<int64_t>& shape,
               const void* data, size_t bytes) {
  constexpr const char* kWhere = "write_npy";
  int64_t count = 1;
  for (int64_t s : shape) {
    detail::check_at_least(kWhere, "shape entry", s, 0);
    count = detail::checked_mul(kWhere, "element count", count, s);
  }
  if (static_cast<uint64_t>(count) * item_size(kWhere, descr) != bytes) {
    detail::fail(Status::kShapeMismatch, kWhere, path, ": ", bytes, " bytes do not match shape and dtype ",
                 descr);
  }
  std::ostringstream dict;
  dict << "{'descr': '" << descr << "', 'fortran_order': False, 'shape': (";
  for (size_t i = 0; i < shape.size(); ++i)
    dict << shape[i] << (shape.size() == 1 || i + 1 < shape.size() ? ", " : "");
  dict << "), }";
  std::string header = dict.str();
  // Pad with spaces so that magic(6) + version(2) + length(2) + header ends on a 64-byte boundary.
  const size_t unpadded = 10 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header.push_back('\n');
  if (header.size() > 65535) detail::fail(Status::kInvalidArgument, kWhere, path, ": header too long");

  const uint8_t preamble[10] = {0x93,
                                'N',
                                'U',
                                'M',
                                'P',
                                'Y',
                                1,
                                0,
                                static_cast<uint8_t>(header.size() & 0xff),
                                static_cast<uint8_t>(header.size() >> 8)};
  detail::write_file_atomically(kWhere, path,
                                {{preamble, 10}, {header.data(), header.size()}, {data, bytes}});
}

NpyArray read_npy(const std::string& path) {
  constexpr const char* kWhere = "read_npy";
  std::ifstream in(path, std::ios::binary);
  if (!in) detail::fail(Status::kInvalidArgument, kWhere, "cannot open ", path);
  char magic[6];
  uint8_t version[2], len[2];
  if (!in.read(magic, 6) || std::memcmp(magic, kMagic, 6) != 0 ||
      !in.read(reinterpret_cast<char*>(version), 2)) {
    detail::fail(Status::kInvalidArgument, kWhere, path, ": not a .npy file");
  }
  size_t header_len = 0;
  if (version[0] == 1) {
    if (!in.read(reinterpret_cast<char*>(len), 2))
      detail::fail(Status::kInvalidArgument, kWhere, path, ": truncated");
    header_len = len[0] | (static_cast<size_t>(len[1]) << 8);
  } else {
    detail::fail(Status::kInvalidArgument, kWhere, path, ": .npy version ", int(version[0]),
                 " is not supported");
  }
  std::string header(header_len, '\0');
  if (!in.read(header.data(), static_cast<std::streamsize>(header_len))) {
    detail::fail(Status::kInvalidArgument, kWhere, path, ": truncated header");
  }
  // The header is a Python dict literal; parse just what .npy uses, and treat
  // anything else as a damaged file (never as a library error).
  auto bad = [&](const std::string& why) { detail::fail(Status::kInvalidArgument, kWhere, path, ": ", why); };
  auto value_at = [&](const char* key) {
    const size_t at = header.find(key);
    if (at == std::string::npos) bad(std::string("header lacks ") + key);
    size_t k = at + std::strlen(key);
    while (k < header.size() && header[k] == ' ') ++k;
    if (k >= header.size()) bad(std::string("header ends after ") + key);
    return k;
  };
  NpyArray a;
  size_t k = value_at("'descr':");
  if (header[k] != '\'') bad("descr is not a quoted string");
  const size_t end = header.find('\'', k + 1);
  if (end == std::string::npos) bad("descr is not a quoted string");
  a.descr = header.substr(k + 1, end - k - 1);
  k = value_at("'fortran_order':");
  if (header.compare(k, 4, "True") == 0) bad("Fortran order is not supported");
  if (header.compare(k, 5, "False") != 0) bad("fortran_order is neither True nor False");
  k = value_at("'shape':");
  const size_t close = header.find(')', k);
  if (header[k] != '(' || close == std::string::npos) bad("shape is not a tuple");
  int64_t count = 1;
  size_t pos = k + 1;
  while (pos < close) {
    size_t comma = header.find(',', pos);
    if (comma == std::string::npos || comma > close) comma = close;
    size_t lo = pos, hi = comma;
    while (lo < hi && header[lo] == ' ') ++lo;
    while (hi > lo && header[hi - 1] == ' ') --hi;
    if (lo < hi) {
      int64_t d = -1;
      const auto [ptr, ec] = std::from_chars(header.data() + lo, header.data() + hi, d);
      if (ec != std::errc() || ptr != header.data() + hi) {
        bad("shape entry '" + header.substr(lo, hi - lo) + "' is not an integer");
      }
      detail::check_at_least(kWhere, "shape entry", d, 0);
      a.shape.push_back(d);
      count = detail::checked_mul(kWhere, "element count", count, d);
    }
    pos = comma + 1;
  }
  const size_t bytes = static_cast<size_t>(count) * item_size(kWhere, a.descr);
  a.data.resize(bytes);
  if (!in.read(reinterpret_cast<char*>(a.data.data()), static_cast<std::streamsize>(bytes))) {
    detail::fail(Status::kInvalidArgument, kWhere, path, ": data is shorter than shape ", count, " x ",
                 item_size(kWhere, a.descr), " bytes");
  }
  return a;
}

}  // namespace tokpos
