// Any bytes as a .safetensors file: the reader either accepts them, and then
// every tensor it lists can be read within the file, or throws tokpos::Error.
#include <cstdint>

#include "fuzz_util.h"
#include "tokpos/error.h"
#include "tokpos/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = tokpos::fuzz::write_temp(data, size, ".safetensors");
  try {
    const auto file = tokpos::SafetensorsFile::open(path);
    for (const auto& name : file.names()) {
      const auto& info = file.info(name);
      const auto bytes = file.bytes(name);
      if (bytes.size() != info.bytes) __builtin_trap();
      if (info.dtype == "F32" || info.dtype == "F16" || info.dtype == "BF16") {
        const auto values = file.read_f32(name);
        if (static_cast<int64_t>(values.size()) != info.numel()) __builtin_trap();
      }
    }
  } catch (const tokpos::Error&) {
  }
  return 0;
}
