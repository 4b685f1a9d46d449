// Any bytes as a GGUF file: the reader either accepts them, and then every
// value and every tensor it lists lies inside the file (the bytes are parsed
// from an exact-size copy, so ASan sees any read past them), the same when
// the bytes are opened from a file, or it throws tokpos::Error. Nothing it
// allocates is sized beyond the file (-rss_limit_mb reports it otherwise).
//
// Inputs that start with "TI" instead describe up to 4,081 tensor infos
// (dims, ggml types, offsets, names and one damage or none each, drawn from
// the input), written here after a sound header and followed by a data
// section of a size the input picks: the range, alignment, overlap and
// duplicate checks get inputs that pass everything before them.
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

// "TI", a count byte, a byte for the alignment and the data size, then 4
// bytes per tensor (its type and rank, row length, other dims, and whether
// and how it is damaged; at most 3,360 bytes of data each). Sound tensors
// are laid out back to back, so most files pass every check but the one a
// damaged tensor fails.
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
  const uint64_t alignment = uint64_t{1} << (data[3] & 7);  // 1 .. 128
  put32(b, static_cast<uint32_t>(alignment));
  struct Type {
    uint32_t id;
    uint64_t block, bytes;
  };
  // f32 f16 q8_0 q4_0 q4_K q6_K bf16 q2_K
  static const Type kTypes[] = {{0, 1, 4},      {1, 1, 2},      {8, 32, 34}, {2, 32, 18},
                                {12, 256, 144}, {14, 256, 210}, {30, 1, 2},  {10, 256, 84}};
  uint64_t offset = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint8_t p = at(4 * i), q = at(4 * i + 1), r = at(4 * i + 2), s = at(4 * i + 3);
    put_string(b, "t" + std::to_string(s == 0xff ? i / 2 : i));  // 0xff: a name seen before
    const Type& type = kTypes[p & 7];
    const uint32_t n_dims = 1 + ((p >> 3) & 3);
    put32(b, n_dims);
    const uint64_t ne0 = type.block * (1 + (q & 1)) + (s == 0xfa ? 1 : 0);  // 0xfa: not whole blocks
    put64(b, ne0);
    uint64_t rows = 1;
    for (uint32_t d = 1; d < n_dims; ++d) {
      const uint64_t ne = s == 0xfc ? 0 : 1 + ((r >> d) & 1);  // 0xfc: a dim of 0
      put64(b, ne);
      rows *= ne;
    }
    put32(b, s == 0xfb ? 4 : type.id);  // 0xfb: ggml type 4, removed
    uint64_t begin = offset;
    if (s == 0xfd && begin >= alignment) begin -= alignment;  // 0xfd: overlaps the previous tensor
    put64(b, s == 0xfe ? begin + 1 : begin);                  // 0xfe: misaligned
    const uint64_t nbytes = ne0 / type.block * type.bytes * rows;
    offset = begin + (nbytes + alignment - 1) / alignment * alignment;
  }
  while (b.size() % alignment != 0) b.push_back(0);
  // The data section: as long as the offsets reach, or cut short when data[3] says so.
  const uint64_t cut = (data[3] >> 3) & 1 ? (data[3] >> 4) + uint64_t{1} : 0;
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
    case T::kArray: {
      for (uint64_t i = 0; i < v.size() && i < 4096; ++i) sum += walk(v.at(i));
      if (v.size() > 4096) break;
      // The whole-array conversions agree with the elements' own.
      const T e = v.array_type();
      if (e == T::kString) {
        const auto all = v.to_strings();
        for (uint64_t i = 0; i < v.size(); ++i) {
          if (all[i] != v.at(i).to_string()) __builtin_trap();
        }
      } else if (e == T::kFloat32 || e == T::kFloat64) {
        const auto all = v.to_doubles();
        for (uint64_t i = 0; i < v.size(); ++i) {
          const double x = v.at(i).to_double();
          if (std::memcmp(&all[i], &x, sizeof x) != 0) __builtin_trap();
        }
      } else if (e != T::kBool && e != T::kArray) {
        try {
          const auto all = v.to_int64s();
          for (uint64_t i = 0; i < v.size(); ++i) {
            if (all[i] != v.at(i).to_int64()) __builtin_trap();
          }
        } catch (const tokpos::Error&) {  // a UINT64 above INT64_MAX
          if (e != T::kUint64) __builtin_trap();
        }
      }
      break;
    }
    case T::kFloat32:
    case T::kFloat64: sum += v.to_double() > 0; break;
    case T::kBool: sum += v.to_bool(); break;
    default: try { sum += static_cast<uint64_t>(v.to_int64());
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
