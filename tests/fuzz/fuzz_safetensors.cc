// Any bytes as a .safetensors file: the reader either accepts them, and then
// every tensor it lists can be read within the file, the same in both access
// modes, or throws tokpos::Error.
//
// Inputs that start with "MANY" instead describe a file of up to 65,536
// tensors (names, duplicates, dtypes and byte ranges drawn from the input),
// built here; of those, up to 1,000 are read back. The header parse is
// O(n log n); the quadratic parse it replaced took 3.4 s for 10,000 tensors
// and over a minute for 20,000 (Release, more under ASan), so `make fuzz`'s
// per-input limit (-timeout=10) reports a return of it as a timeout, while
// 65,536 tensors take 1 to 3 s here under ASan and UBSan (3 s on a busy
// 2-core machine).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "tokpos/error.h"
#include "tokpos/safetensors.h"

namespace {

// "MANY", then 2 bytes of count, then bytes that pick each tensor's kind.
std::string many_tensors(const uint8_t* data, size_t size) {
  const size_t n = 1 + (size_t{data[4]} << 8 | data[5]);
  const uint8_t* pick = data + 6;
  const size_t picks = size - 6;
  std::string header = "{";
  uint64_t offset = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint8_t b = picks ? pick[i % picks] : 0;
    // 1 in 256: a name seen before; else a fresh one.
    const size_t id = b == 0xff ? i / 2 : i;
    static const char* kDtypes[] = {"F32", "F16", "BF16", "I64", "F32", "U8", "F32", "F99"};
    const char* dtype = kDtypes[b & 7];
    const size_t elem = tokpos::safetensors_dtype_size(dtype);
    const uint64_t count = (b >> 3) & 3;
    uint64_t bytes = count * (elem ? elem : 4);
    if (b == 0xfe) bytes += 1;  // shape and bytes disagree
    uint64_t begin = offset;
    if (b == 0xfd && offset >= 4) begin -= 4;  // overlaps the previous tensor
    if (i) header += ',';
    header += "\"t" + std::to_string(id) + "\":{\"dtype\":\"" + dtype + "\",\"shape\":[" + std::to_string(count) +
              "],\"data_offsets\":[" + std::to_string(begin) + "," + std::to_string(begin + bytes) + "]}";
    offset = begin + bytes;
  }
  header += "}";
  std::string file(8, '\0');
  for (int i = 0; i < 8; ++i) file[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  file += header;
  // The data area: as long as the ranges need, or cut short when the count's low bit says so.
  file.append((data[5] & 1) && offset > 0 ? offset - 1 : offset, '\x3c');
  return file;
}

// `stride`: read back every stride-th tensor (all of them for ordinary inputs).
void check(const std::string& path, size_t stride = 1) {
  try {
    const auto mapped = tokpos::SafetensorsFile::open(path);
    const auto read = tokpos::SafetensorsFile::open(path, tokpos::SafetensorsFile::Access::kRead);
    const auto names = mapped.names();
    if (read.names() != names) __builtin_trap();
    for (size_t k = 0; k < names.size(); k += stride) {
      const auto& name = names[k];
      const auto& info = mapped.info(name);
      const auto bytes = mapped.bytes(name);
      if (bytes.size() != info.bytes) __builtin_trap();
      const auto copy = read.read_bytes(name);
      if (copy.size() != bytes.size() || !std::equal(copy.begin(), copy.end(), bytes.begin())) __builtin_trap();
      if (info.dtype == "F32" || info.dtype == "F16" || info.dtype == "BF16") {
        const auto values = mapped.read_f32(name);
        if (static_cast<int64_t>(values.size()) != info.numel()) __builtin_trap();
        const auto again = read.read_f32(name);
        if (again.size() != values.size() ||
            (!values.empty() && std::memcmp(again.data(), values.data(), values.size() * sizeof(float)) != 0)) {
          __builtin_trap();
        }
      }
    }
  } catch (const tokpos::Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size >= 6 && std::memcmp(data, "MANY", 4) == 0) {
    const auto file = many_tensors(data, size);
    const size_t n = 1 + (size_t{data[4]} << 8 | data[5]);
    check(tokpos::fuzz::write_temp(reinterpret_cast<const uint8_t*>(file.data()), file.size(), ".safetensors"),
          n / 1000 + 1);
    return 0;
  }
  check(tokpos::fuzz::write_temp(data, size, ".safetensors"));
  return 0;
}
