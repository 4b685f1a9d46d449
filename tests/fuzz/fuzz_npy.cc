// Any bytes as a .npy file: read_npy accepts them (and a write of what it
// read reads back the same) or throws tokpos::Error.
#include <cstdint>

#include "fuzz_util.h"
#include "tokpos/error.h"
#include "tokpos/npy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = tokpos::fuzz::write_temp(data, size, ".npy");
  try {
    const auto a = tokpos::read_npy(path);
    const auto copy = path + ".copy";
    tokpos::write_npy(copy, a.descr, a.shape, a.data.data(), a.data.size());
    const auto b = tokpos::read_npy(copy);
    if (b.descr != a.descr || b.shape != a.shape || b.data != a.data) __builtin_trap();
  } catch (const tokpos::Error&) {
  }
  return 0;
}
