// Any bytes as a GGUF file: the reader either accepts them, and then every
// value and every tensor it lists lies inside the file (the bytes are parsed
// from an exact-size copy, so ASan sees any read past them), the same when
// the bytes are opened from a file, or it throws tokpos::Error. Nothing it
// allocates is sized beyond the file (-rss_limit_mb reports it otherwise).
//
// Inputs that start with "TI" instead describe up to 4,096 tensor infos
// (dims, ggml types, offsets and names drawn from the input), written here
// after a sound header and followed by a data section of a size the input
// picks: the range, alignment, overlap and duplicate checks get inputs that
// pass everything before them.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "tokpos/error.h"
#include "tokpos/gguf.h"

namespace {

void put32(std::vector<uint8_t>& b, uint32_t x) {
  for (int i = 0; i < 4; ++i) b.push_back(static_cast<uint8_t>(x >> (8 * i)));
}
void put64(std::vector<uint8_t>& b, uint64_t x) {
  for (int i = 0; i < 8; ++i) b.push_back(static_cast<uint8_t>(x >> (8 * i)));
}
void put_string(std::vector<uint8_t>& b, const std::string& s) {
  put64(b, s.size());
  b.insert(b.end(), s.begin(), s.end());
}

// "TI", a count byte, a data-size byte, then 4 bytes per tensor.
std::vector<uint8_t> tensor_infos(const uint8_t* data, size_t size) {
  const size_t n = 1 + size_t{data[2]} * 16;
  const uint8_t* pick = data + 4;
  const size_t picks = size - 4;
  auto at = [&](size_t i) -> uint8_t { return picks ? pick[i % picks] : 0; };
  std::vector<uint8_t> b = {'G', 'G', 'U', 'F'};
  put32(b, 3);
  put64(b, n);
  put64(b, 1);
  put_string(b, "general.alignment");
  put32(b, 4);
  const uint32_t alignment = 1u << (data[3] & 7);  // 1 .. 128
  put32(b, alignment);
  static const uint32_t kTypes[] = {0, 1, 8, 2, 12, 14, 30, 4};  // f32 f16 q8_0 q4_0 q4_K q6_K bf16, and 4 (no type)
  uint64_t offset = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint8_t p = at(4 * i), q = at(4 * i + 1), r = at(4 * i + 2), s = at(4 * i + 3);
    put_string(b, "t" + std::to_string(s == 0xff ? i / 2 : i));  // 1 in 256: a name seen before
    const uint32_t type = kTypes[p & 7];
    const uint32_t n_dims = 1 + ((p >> 3) & 3);
    put32(b, n_dims);
    const uint64_t block = type == 12 || type == 14 ? 256 : type == 8 || type == 2 ? 32 : 1;
    uint64_t ne0 = block * (1 + (q & 3));
    if (q & 0x80) ne0 += 1;  // not a whole number of blocks
    put64(b, ne0);
    for (uint32_t d = 1; d < n_dims; ++d) put64(b, (r >> (2 * d)) & 3);  // 0 now and then
    put32(b, type);
    uint64_t begin = offset;
    if ((r & 3) == 3 && begin >= alignment) begin -= alignment;  // overlaps the previous one
    if (s == 0xfe) begin += 1;                                    // misaligned
    put64(b, begin);
    // Bytes to the next tensor: this one's, rounded up, from an estimate of its size.
    const uint64_t estimate = 64 * (1 + (q & 3)) * (1 + ((r >> 2) & 3));
    offset = begin + (estimate + alignment - 1) / alignment * alignment;
  }
  while (b.size() % alignment != 0) b.push_back(0);
  // The data section: as long as the offsets reach, less a little now and then.
  const uint64_t cut = (data[3] >> 3) * uint64_t{7};
  b.resize(b.size() + (offset > cut ? offset - cut : 0), 0x5a);
  return b;
}

// Reads every element of a value: ASan reports any that lies past the file's bytes.
uint64_t walk(const tokpos::GgufValue& v) {
  using T = tokpos::GgufType;
  uint64_t sum = 0;
  switch (v.type()) {
    case T::kString:
      for (const char c : v.to_string()) sum += static_cast<uint8_t>(c);
      break;
    case T::kArray:
      for (uint64_t i = 0; i < v.size() && i < 4096; ++i) sum += walk(v.at(i));
      break;
    case T::kFloat32:
    case T::kFloat64: sum += v.to_double() > 0; break;
    case T::kBool: sum += v.to_bool(); break;
    default:
      try {
        sum += static_cast<uint64_t>(v.to_int64());
      } catch (const tokpos::Error&) {
        sum += v.to_uint64();  // a UINT64 above INT64_MAX
      }
  }
  return sum;
}

void check(const std::vector<uint8_t>& bytes) {
  try {
    const auto f = tokpos::GgufFile::parse(bytes, "fuzz.gguf");
    if (f.file_size() != bytes.size()) __builtin_trap();
    for (const auto& kv : f.metadata()) {
      if (f.find(kv.key) != &kv.value) __builtin_trap();
    }
    const uint8_t* base = nullptr;
    for (const auto& t : f.tensors()) {
      const auto b = f.bytes(t.name);
      if (b.size() != t.nbytes || t.offset % f.alignment() != 0) __builtin_trap();
      if (f.data_offset() + t.offset + t.nbytes > bytes.size()) __builtin_trap();
      if (base == nullptr) base = b.data() - f.data_offset() - t.offset;
      if (b.data() != base + f.data_offset() + t.offset) __builtin_trap();
      if (std::memcmp(b.data(), bytes.data() + f.data_offset() + t.offset, b.size()) != 0) __builtin_trap();
    }
    volatile uint64_t sink = 0;
    for (const auto& kv : f.metadata()) sink = sink + walk(kv.value);
    // The same bytes from a file: the same reading.
    if (bytes.size() < (1u << 16)) {
      const auto g = tokpos::GgufFile::open(tokpos::fuzz::write_temp(bytes.data(), bytes.size(), ".gguf"));
      if (g.tensors().size() != f.tensors().size() || g.metadata().size() != f.metadata().size() ||
          g.data_offset() != f.data_offset()) {
        __builtin_trap();
      }
      for (size_t i = 0; i < g.tensors().size(); ++i) {
        if (g.tensors()[i].name != f.tensors()[i].name || g.tensors()[i].dims != f.tensors()[i].dims ||
            g.tensors()[i].nbytes != f.tensors()[i].nbytes) {
          __builtin_trap();
        }
      }
    }
  } catch (const tokpos::Error& e) {
    if (e.status() != tokpos::Status::kCorruptFile) __builtin_trap();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size >= 4 && data[0] == 'T' && data[1] == 'I') {
    check(tensor_infos(data, size));
    return 0;
  }
  check(std::vector<uint8_t>(data, data + size));
  return 0;
}
