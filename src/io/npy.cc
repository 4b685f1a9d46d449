#include "tokpos/npy.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <string_view>

#include "common/check.h"
#include "io/posix_file.h"
#include "io/atomic_file.h"

namespace tokpos {
namespace {

constexpr char kMagic[] = "\x93NUMPY";

// Bytes per element of a descr tokpos reads and writes; 0 for any other.
size_t item_size(const std::string& descr) {
  if (descr == "<f4" || descr == "<i4" || descr == "<u4") return 4;
  if (descr == "<f2" || descr == "<u2" || descr == "<i2") return 2;
  if (descr == "<f8" || descr == "<i8" || descr == "<u8") return 8;
  if (descr == "|u1" || descr == "|i1") return 1;
  return 0;
}

// A descr of numpy's own form (byte order, kind, item size, a datetime unit),
// such as '>f4', '<c8' or '<M8[ns]': a valid file tokpos does not read.
bool numpy_descr(const std::string& d) {
  if (d.size() < 2 || std::string_view("<>|=").find(d[0]) == std::string_view::npos ||
      std::string_view("?bBhHiIlLqQefdgFDGSUVOMmuca").find(d[1]) == std::string_view::npos) {
    return false;
  }
  size_t k = 2;
  while (k < d.size() && d[k] >= '0' && d[k] <= '9') ++k;
  return k == d.size() || (d[k] == '[' && d.back() == ']');
}

// The descriptor of an open file, closed on every path out.
struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// Reads up to n bytes: fewer only where the file ends. A failing read is an I/O error.
size_t read_up_to(const char* where, const std::string& path, int fd, void* buf, size_t n) {
  char* c = static_cast<char*>(buf);
  size_t got = 0;
  while (got < n) {
    const ssize_t r = ::read(fd, c + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) detail::fail(Status::kIoError, where, "cannot read ", path, ": ", std::strerror(errno));
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  return got;
}

}  // namespace

void write_npy(const std::string& path, const std::string& descr, const std::vector<int64_t>& shape,
               const void* data, size_t bytes) {
  constexpr const char* kWhere = "write_npy";
  if (item_size(descr) == 0)
    detail::fail(Status::kInvalidArgument, kWhere, path, ": unsupported dtype descr '", descr, "'");
  int64_t count = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    const int64_t s = shape[i];
    if (s < 0) detail::fail(Status::kInvalidArgument, kWhere, path, ": shape entry ", i, " is ", s, ", must be >= 0");
    if (__builtin_mul_overflow(count, s, &count))
      detail::fail(Status::kSizeOverflow, kWhere, path, ": the element count of the shape overflows int64");
  }
  // The byte count must not wrap either: a wrapped product could equal
  // `bytes` and record a wrong shape.
  uint64_t need = 0;
  if (__builtin_mul_overflow(static_cast<uint64_t>(count), static_cast<uint64_t>(item_size(descr)), &need))
    detail::fail(Status::kSizeOverflow, kWhere, path, ": the byte count of the shape overflows");
  if (need != bytes) {
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
  // The OS's failures (open, fstat, read) are kIoError with errno's text; a
  // file that is not a well-formed .npy is kCorruptFile; a well-formed one
  // that uses what tokpos does not read (version 2 or 3, Fortran order, a
  // dtype outside its list) is kUnimplemented.
  struct stat st {};
  const Fd file{detail::open_regular_file(kWhere, path, &st)};
  auto take = [&](void* buf, size_t n) { return read_up_to(kWhere, path, file.fd, buf, n) == n; };
  auto bad = [&](const std::string& why) { detail::fail(Status::kCorruptFile, kWhere, path, ": ", why); };

  char magic[6];
  uint8_t version[2], len[2];
  if (!take(magic, 6) || std::memcmp(magic, kMagic, 6) != 0 || !take(version, 2)) bad("not a .npy file");
  if (version[0] == 2 || version[0] == 3) {
    detail::fail(Status::kUnimplemented, kWhere, path, ": .npy version ", int(version[0]),
                 " is not supported (only version 1)");
  }
  if (version[0] != 1) bad(".npy version " + std::to_string(version[0]) + " does not exist");
  if (!take(len, 2)) bad("truncated");
  const size_t header_len = len[0] | (static_cast<size_t>(len[1]) << 8);
  std::string header(header_len, '\0');
  if (!take(header.data(), header_len)) bad("truncated header");
  // The header is a Python dict literal; parse just what .npy uses, and treat
  // anything else as a damaged file (never as a library error).
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
  const size_t item = item_size(a.descr);
  if (item == 0 && numpy_descr(a.descr)) {
    detail::fail(Status::kUnimplemented, kWhere, path, ": dtype descr '", a.descr,
                 "' is not supported (little-endian f2, f4, f8, i1-i8, u1-u8)");
  }
  if (item == 0) bad("dtype descr '" + a.descr + "' is not a numpy dtype");
  k = value_at("'fortran_order':");
  if (header.compare(k, 4, "True") == 0)
    detail::fail(Status::kUnimplemented, kWhere, path, ": Fortran order is not supported (only C order)");
  if (header.compare(k, 5, "False") != 0) bad("fortran_order is neither True nor False");
  k = value_at("'shape':");
  const size_t close = header.find(')', k);
  if (header[k] != '(' || close == std::string::npos) bad("shape is not a tuple");
  uint64_t bytes = item;
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
      if (d < 0) bad("shape entry " + std::to_string(d) + " is negative");
      a.shape.push_back(d);
      if (__builtin_mul_overflow(bytes, static_cast<uint64_t>(d), &bytes) || bytes > SIZE_MAX / 2)
        bad("shape overflows the address space");
    }
    pos = comma + 1;
  }
  // Compare with the file's size before allocating: a damaged header must not
  // ask for terabytes (only regular files get this far).
  const uint64_t offset = 10 + header_len;
  if (bytes > static_cast<uint64_t>(st.st_size) - std::min<uint64_t>(offset, st.st_size)) {
    bad("data is shorter than shape: " + std::to_string(bytes / item) + " x " + std::to_string(item) +
        " bytes, but the file holds " + std::to_string(static_cast<uint64_t>(st.st_size) - offset));
  }
  a.data.resize(static_cast<size_t>(bytes));
  if (!take(a.data.data(), a.data.size())) {
    bad("data is shorter than shape: " + std::to_string(bytes / item) + " x " + std::to_string(item) + " bytes");
  }
  return a;
}

}  // namespace tokpos
