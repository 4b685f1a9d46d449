// Any bytes as a .npy file: read_npy accepts them (and a write of what it
// read reads back the same) or throws tokpos::Error. What it accepts never
// holds more data than the file: a header that declares more is refused
// before anything is allocated (libFuzzer's -rss_limit_mb / malloc limit
// reports an allocation of a declared terabyte as a crash).
//
// Inputs that start with "BIG" instead give a dtype byte and 1 to 3 eight-byte
// shape entries, written here into a well-formed header followed by whatever
// input remains as data: declared sizes far larger than the file.
#include <cstdint>
#include <cstring>
#include <string>

#include "fuzz_util.h"
#include "tokpos/error.h"
#include "tokpos/npy.h"

namespace {

std::string big_shape(const uint8_t* data, size_t size) {
  static const char* kDescr[] = {"<f4", "<f2", "<f8", "|u1", "<i8", "<u2", ">f4", "<c8"};
  const char* descr = kDescr[data[3] & 7];
  const size_t dims = 1 + (data[3] >> 3) % 3;
  size_t at = 4;
  std::string shape;
  for (size_t d = 0; d < dims; ++d) {
    uint64_t v = 0;
    for (int k = 0; k < 8 && at < size; ++k) v |= uint64_t{data[at++]} << (8 * k);
    v >>= (data[3] >> 5);  // some entries small enough to fit, most not
    shape += std::to_string(v) + ", ";
  }
  std::string header = std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': (" + shape + "), }";
  header.append((64 - (10 + header.size() + 1) % 64) % 64, ' ');
  header.push_back('\n');
  std::string file = "\x93NUMPY\x01";
  file.push_back('\0');
  file.push_back(static_cast<char>(header.size() & 0xff));
  file.push_back(static_cast<char>(header.size() >> 8));
  file += header;
  if (at < size) file.append(reinterpret_cast<const char*>(data + at), size - at);
  return file;
}

void check(const std::string& path, size_t file_size) {
  try {
    const auto a = tokpos::read_npy(path);
    if (a.data.size() > file_size) __builtin_trap();
    const auto copy = path + ".copy";
    tokpos::write_npy(copy, a.descr, a.shape, a.data.data(), a.data.size());
    const auto b = tokpos::read_npy(copy);
    if (b.descr != a.descr || b.shape != a.shape || b.data != a.data) __builtin_trap();
  } catch (const tokpos::Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size >= 4 && std::memcmp(data, "BIG", 3) == 0) {
    const auto file = big_shape(data, size);
    check(tokpos::fuzz::write_temp(reinterpret_cast<const uint8_t*>(file.data()), file.size(), ".npy"), file.size());
    return 0;
  }
  check(tokpos::fuzz::write_temp(data, size, ".npy"), size);
  return 0;
}
