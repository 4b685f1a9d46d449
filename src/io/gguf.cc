#include "tokpos/gguf.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <optional>

#include "common/check.h"
#include "tokpos/dtype.h"
#include "io/posix_file.h"

namespace tokpos {

static_assert(std::endian::native == std::endian::little, "the GGUF reader assumes a little-endian host");

namespace {

constexpr const char* kWhere = "gguf";
constexpr uint64_t kMaxTensorName = 64;  // the spec: a tensor name is at most 64 bytes
constexpr uint32_t kMaxDims = 4;         // GGML_MAX_DIMS
constexpr uint32_t kLastType = static_cast<uint32_t>(GgufType::kFloat64);

// Bytes of a fixed-size value type, 0 for STRING and ARRAY.
uint64_t fixed_size(GgufType t) {
  switch (t) {
    case GgufType::kUint8:
    case GgufType::kInt8:
    case GgufType::kBool: return 1;
    case GgufType::kUint16:
    case GgufType::kInt16: return 2;
    case GgufType::kUint32:
    case GgufType::kInt32:
    case GgufType::kFloat32: return 4;
    case GgufType::kUint64:
    case GgufType::kInt64:
    case GgufType::kFloat64: return 8;
    case GgufType::kString:
    case GgufType::kArray: return 0;
  }
  return 0;
}

// The fewest bytes one value of a type takes in the file: a string is at
// least its uint64 length, an array its uint32 type and uint64 count.
uint64_t min_size(GgufType t) {
  if (t == GgufType::kString) return 8;
  if (t == GgufType::kArray) return 12;
  return fixed_size(t);
}

bool is_integer(GgufType t) {
  switch (t) {
    case GgufType::kUint8:
    case GgufType::kInt8:
    case GgufType::kUint16:
    case GgufType::kInt16:
    case GgufType::kUint32:
    case GgufType::kInt32:
    case GgufType::kUint64:
    case GgufType::kInt64: return true;
    default: return false;
  }
}

template <typename T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// The owner of open()'s bytes: the mapping.
struct Mapping {
  void* base = MAP_FAILED;
  size_t size = 0;
  ~Mapping() {
    if (base != MAP_FAILED && size > 0) ::munmap(base, size);
  }
};

// A tensor's data range in the file, for the overlap check.
struct Range {
  uint64_t begin, end;
  size_t tensor;
};

// The length of the valid UTF-8 sequence at p (1..4), or 0 when the byte at p
// does not start one (the Unicode standard's table 3-7: no overlong forms, no
// surrogates, nothing past U+10FFFF): the bytes Python's UTF-8 decoder refuses.
size_t utf8_length(const unsigned char* p, size_t n) {
  const unsigned c = p[0];
  if (c < 0x80) return 1;
  auto cont = [&](size_t i, unsigned lo = 0x80, unsigned hi = 0xbf) { return i < n && p[i] >= lo && p[i] <= hi; };
  if (c >= 0xc2 && c <= 0xdf) return cont(1) ? 2 : 0;
  if (c == 0xe0) return cont(1, 0xa0) && cont(2) ? 3 : 0;
  if (c == 0xed) return cont(1, 0x80, 0x9f) && cont(2) ? 3 : 0;
  if (c >= 0xe1 && c <= 0xef) return cont(1) && cont(2) ? 3 : 0;
  if (c == 0xf0) return cont(1, 0x90) && cont(2) && cont(3) ? 4 : 0;
  if (c == 0xf4) return cont(1, 0x80, 0x8f) && cont(2) && cont(3) ? 4 : 0;
  if (c >= 0xf1 && c <= 0xf3) return cont(1) && cont(2) && cont(3) ? 4 : 0;
  return 0;
}

bool is_utf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  for (size_t i = 0; i < s.size();) {
    const size_t n = utf8_length(p + i, s.size() - i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

void append_escaped(std::string& out, unsigned char b) {
  static const char kHex[] = "0123456789abcdef";
  out += "\\x";
  out += kHex[b >> 4];
  out += kHex[b & 15];
}

std::string escaped(std::string_view s, bool controls) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const size_t n = utf8_length(p + i, s.size() - i);
    const bool control = controls && ((n == 1 && (p[i] < 0x20 || p[i] == 0x7f)) || (n == 2 && p[i] == 0xc2 && p[i + 1] < 0xa0));
    if (n == 0 || control) {
      for (size_t k = 0; k < std::max<size_t>(n, 1); ++k) append_escaped(out, p[i + k]);
      i += std::max<size_t>(n, 1);
    } else {
      out.append(s.substr(i, n));
      i += n;
    }
  }
  return out;
}

}  // namespace

std::string gguf_text(std::string_view bytes) { return escaped(bytes, false); }

std::string gguf_printable(std::string_view bytes) { return escaped(bytes, true); }

const char* gguf_type_name(GgufType type) {
  static const char* const kNames[] = {"UINT8", "INT8",   "UINT16", "INT16",  "UINT32", "INT32",  "FLOAT32",
                                       "BOOL",  "STRING", "ARRAY",  "UINT64", "INT64",  "FLOAT64"};
  const auto i = static_cast<uint32_t>(type);
  return i <= kLastType ? kNames[i] : "?";
}

// Reads and validates the bytes of one file; every failure names the file,
// the byte offset, the field and the value against its limit.
struct GgufParser {
  const std::string& name;
  const uint8_t* base;
  uint64_t size;
  std::shared_ptr<const void> owner;
  uint64_t pos = 0;

  template <typename... Args>
  [[noreturn]] void corrupt(uint64_t at, const Args&... args) const {
    detail::fail(Status::kCorruptFile, kWhere, name, ": at byte ", at, ": ", args...);
  }
  uint64_t remaining() const { return size - pos; }
  // n more bytes for `field`, else the error says how many remain.
  template <typename... Field>
  void need(uint64_t n, const Field&... field) const {
    if (n > remaining())
      corrupt(pos, field..., " needs ", n, " bytes but the file ends at byte ", size, " (", remaining(),
              " remain)");
  }
  template <typename T, typename... Field>
  T read(const Field&... field) {
    need(sizeof(T), field...);
    const T v = load<T>(base + pos);
    pos += sizeof(T);
    return v;
  }
  // A string: its uint64 length, checked against the bytes that remain, then its bytes.
  template <typename... Field>
  std::string_view read_string(const Field&... field) {
    const uint64_t at = pos;
    const auto len = read<uint64_t>(field..., " length");
    if (len > remaining())
      corrupt(at, field..., " length ", len, " runs past the end of the file: ", remaining(),
              " bytes remain");
    const std::string_view s(reinterpret_cast<const char*>(base + pos), static_cast<size_t>(len));
    pos += len;
    return s;
  }
  template <typename... Field>
  GgufType read_type(const Field&... field) {
    const uint64_t at = pos;
    const auto t = read<uint32_t>(field...);
    if (t > kLastType) corrupt(at, field..., " ", t, " is not a GGUF value type (0..", kLastType, ")");
    return static_cast<GgufType>(t);
  }

  // One value of type t; `depth` arrays enclose it. `key` names it in errors
  // (as gguf_printable shows it).
  GgufValue read_value(GgufType t, int depth, std::string_view key) {
    GgufValue v;
    v.type_ = t;
    v.owner_ = owner;
    const uint64_t at = pos;
    if (t == GgufType::kString) {
      const auto s = read_string("key '", key, "': string");
      v.data_ = reinterpret_cast<const uint8_t*>(s.data());
      v.count_ = s.size();
      return v;
    }
    if (t != GgufType::kArray) {
      need(fixed_size(t), "key '", key, "': ", gguf_type_name(t), " value");
      v.data_ = base + pos;
      if (t == GgufType::kBool && base[pos] > 1)
        corrupt(at, "key '", key, "': BOOL value ", int{base[pos]}, " is not 0 or 1");
      pos += fixed_size(t);
      return v;
    }
    if (depth + 1 > kGgufMaxArrayDepth)
      corrupt(at, "key '", key, "': array nesting depth ", depth + 1, " exceeds ", kGgufMaxArrayDepth);
    v.elem_ = read_type("key '", key, "': array element type");
    const uint64_t count_at = pos;
    v.count_ = read<uint64_t>("key '", key, "': array length");
    // Each element takes at least min_size bytes: a count the rest of the
    // file cannot hold is refused before anything is allocated for it.
    const uint64_t each = min_size(v.elem_);
    if (v.count_ > remaining() / each) {
      corrupt(count_at, "key '", key, "': array length ", v.count_, " of ", gguf_type_name(v.elem_),
              " needs at least ", each, " bytes each, but ", remaining(), " bytes remain (at most ",
              remaining() / each, " elements)");
    }
    v.data_ = base + pos;
    if (fixed_size(v.elem_) != 0) {
      if (v.elem_ == GgufType::kBool) {
        for (uint64_t i = 0; i < v.count_; ++i) {
          if (base[pos + i] > 1)
            corrupt(pos + i, "key '", key, "': BOOL element ", i, " is ", int{base[pos + i]}, ", not 0 or 1");
        }
      }
      pos += v.count_ * each;
      return v;
    }
    auto starts = std::make_shared<std::vector<uint64_t>>();
    starts->reserve(static_cast<size_t>(v.count_) + 1);
    const uint64_t first = pos;
    for (uint64_t i = 0; i < v.count_; ++i) {
      starts->push_back(pos - first);
      if (v.elem_ == GgufType::kString) {
        read_string("key '", key, "': string element ", i);
      } else {
        read_value(GgufType::kArray, depth + 1, key);
      }
    }
    starts->push_back(pos - first);  // the end of the last element
    v.starts_ = std::move(starts);
    return v;
  }

  // A key or tensor name that is not UTF-8 must not read as the same text
  // (gguf_text) as another: `index` maps the file's bytes to the entry,
  // `shown` the text of the names that are not UTF-8. Returns false, with the
  // other entry and the text, when the name collides.
  static bool text_collides(std::string_view name, const std::map<std::string, size_t, std::less<>>& index,
                            std::map<std::string, size_t, std::less<>>& shown, size_t entry, size_t* other,
                            std::string* text) {
    if (is_utf8(name)) {
      const auto it = shown.find(name);
      if (it == shown.end()) return false;
      *other = it->second;
      *text = std::string(name);
      return true;
    }
    *text = gguf_text(name);
    if (const auto it = index.find(*text); it != index.end()) {
      *other = it->second;
      return true;
    }
    const auto [it, fresh] = shown.try_emplace(*text, entry);
    *other = it->second;
    return !fresh;
  }

  void parse(GgufFile& f);
};

void GgufParser::parse(GgufFile& f) {
  // 1. The header: magic, version, counts.
  need(4, "magic");
  if (std::memcmp(base, "GGUF", 4) != 0) {
    corrupt(0, "magic is bytes ",
            detail::cat(int{base[0]}, " ", int{base[1]}, " ", int{base[2]}, " ", int{base[3]}),
            ", not \"GGUF\" (71 71 85 70): not a GGUF file");
  }
  pos = 4;
  const auto version = read<uint32_t>("version");
  if (version == 1)
    corrupt(4, "version 1 (GGUF v1, with 32-bit counts) is not supported; only versions 2 and 3");
  // A big-endian file's version 1, 2 or 3, read little-endian.
  if (const uint32_t swapped = __builtin_bswap32(version); swapped >= 1 && swapped <= 3) {
    corrupt(4, "version ", version, " reads as ", swapped,
            " byte-swapped: a big-endian file, which is not supported (little-endian versions 2 and 3 only)");
  }
  if (version != 2 && version != 3) corrupt(4, "version ", version, " is not supported (only 2 and 3)");
  f.version_ = version;
  const auto n_tensors = read<uint64_t>("tensor count");
  const auto n_kv = read<uint64_t>("kv count");
  // Each tensor info takes at least 32 bytes (a name length, n_dims, one
  // dim, the type, the offset) and each key/value 13 (a key length, the
  // type, a 1-byte value): counts the file cannot hold are refused here,
  // before anything is sized by them.
  constexpr uint64_t kMinTensorInfo = 8 + 4 + 8 + 4 + 8, kMinKv = 8 + 4 + 1;
  if (n_tensors > remaining() / kMinTensorInfo) {
    corrupt(8, "tensor count ", n_tensors, " needs at least ", kMinTensorInfo, " bytes per tensor info, but ",
            remaining(), " bytes remain (at most ", remaining() / kMinTensorInfo, " tensors)");
  }
  if (n_kv > remaining() / kMinKv) {
    corrupt(16, "kv count ", n_kv, " needs at least ", kMinKv, " bytes per key/value, but ", remaining(),
            " bytes remain (at most ", remaining() / kMinKv, " pairs)");
  }
  if (n_tensors * kMinTensorInfo + n_kv * kMinKv > remaining()) {
    corrupt(8, "tensor count ", n_tensors, " and kv count ", n_kv, " need at least ",
            n_tensors * kMinTensorInfo + n_kv * kMinKv, " bytes, but ", remaining(), " bytes remain");
  }

  // 2. The key/value pairs.
  // metadata_ and tensors_ grow as entries are read rather than being
  // reserved by the counts: an entry in memory is several times the bytes
  // it may take in the file, so a count is only trusted as far as entries
  // are actually there.
  std::map<std::string, size_t, std::less<>> shown_keys, shown_names;  // the names that are not UTF-8, as text
  for (uint64_t i = 0; i < n_kv; ++i) {
    const uint64_t at = pos;
    const auto key = read_string("kv ", i, " key");
    const std::string shown = gguf_printable(key);
    const auto type = read_type("key '", shown, "': value type");
    GgufKeyValue kv{std::string(key), read_value(type, 0, shown)};
    if (!f.key_index_.try_emplace(kv.key, f.metadata_.size()).second)
      corrupt(at, "key '", shown, "' appears twice (kv ", f.key_index_.find(key)->second, " and kv ", i, ")");
    size_t other = 0;
    std::string text;
    if (text_collides(key, f.key_index_, shown_keys, f.metadata_.size(), &other, &text)) {
      corrupt(at, "key '", shown, "' reads as '", gguf_printable(text), "' (bytes that are not UTF-8 as \\xNN), as kv ",
              other, " does: keys must differ as text");
    }
    if (key == "general.alignment") {
      if (type != GgufType::kUint32)
        corrupt(at, "general.alignment has value type ", gguf_type_name(type), ", not UINT32");
      const uint32_t a = load<uint32_t>(kv.value.data_);
      if (a == 0 || (a & (a - 1)) != 0)
        corrupt(at, "general.alignment ", a, " is not a power of two (it must be nonzero, e.g. 32)");
      f.alignment_ = a;
    }
    f.metadata_.push_back(std::move(kv));
  }

  // 3. The tensor infos.
  std::vector<uint64_t> info_at;                    // where each info starts, for the errors of step 4
  info_at.reserve(static_cast<size_t>(n_tensors));  // 8 bytes for each info's 32 or more
  for (uint64_t i = 0; i < n_tensors; ++i) {
    const uint64_t at = pos;
    GgufTensorInfo t;
    const auto name_bytes = read_string("tensor ", i, " name");
    if (name_bytes.size() > kMaxTensorName)
      corrupt(at, "tensor ", i, " name length ", name_bytes.size(), " exceeds ", kMaxTensorName, " bytes");
    t.name = std::string(name_bytes);
    const std::string tname = gguf_printable(name_bytes);  // the name in messages
    const uint64_t dims_at = pos;
    const auto n_dims = read<uint32_t>("tensor '", tname, "': n_dims");
    if (n_dims < 1 || n_dims > kMaxDims)
      corrupt(dims_at, "tensor '", tname, "': n_dims ", n_dims, " is outside [1, ", kMaxDims, "]");
    int64_t count = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t dim_at = pos;
      const auto ne = read<uint64_t>("tensor '", tname, "': dim ne[", d, "]");
      if (ne < 1 || ne > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        corrupt(dim_at, "tensor '", tname, "': dim ne[", d, "] = ", ne, " is outside [1, 2^63)");
      if (__builtin_mul_overflow(count, static_cast<int64_t>(ne), &count)) {
        corrupt(dim_at, "tensor '", tname, "': element count overflows int64 at dim ne[", d, "] = ", ne);
      }
      t.dims.push_back(static_cast<int64_t>(ne));
    }
    const uint64_t type_at = pos;
    const auto type = read<uint32_t>("tensor '", tname, "': ggml type");
    const GgmlTypeTraits* traits = ggml_type_traits(type);
    if (traits == nullptr)
      corrupt(type_at, "tensor '", tname, "': ggml type ", type, " is not a known ggml_type");
    t.ggml_type = traits->type;
    const auto row = ggml_row_bytes(*traits, t.dims[0]);
    if (!row) {
      if (t.dims[0] % traits->block_size != 0) {
        corrupt(dims_at, "tensor '", tname, "': row ne[0] = ", t.dims[0], " is not a whole number of ",
                traits->name, " blocks (", traits->block_size, " elements each)");
      }
      corrupt(dims_at, "tensor '", tname, "': the row bytes of ne[0] = ", t.dims[0], " ", traits->name,
              " overflow size_t");
    }
    const uint64_t rows = static_cast<uint64_t>(count / t.dims[0]);
    if (__builtin_mul_overflow(static_cast<uint64_t>(*row), rows, &t.nbytes)) {
      corrupt(dims_at, "tensor '", tname, "': byte size ", *row, " x ", rows, " rows (", traits->name,
              ") overflows uint64");
    }
    const uint64_t offset_at = pos;
    t.offset = read<uint64_t>("tensor '", tname, "': offset");
    if (t.offset % f.alignment_ != 0) {
      corrupt(offset_at, "tensor '", tname, "': offset ", t.offset, " is not a multiple of the alignment ",
              f.alignment_);
    }
    if (!f.tensor_index_.try_emplace(t.name, f.tensors_.size()).second) {
      corrupt(at, "tensor name '", tname, "' appears twice (tensor ", f.tensor_index_.find(t.name)->second,
              " and tensor ", i, ")");
    }
    size_t other = 0;
    std::string text;
    if (text_collides(t.name, f.tensor_index_, shown_names, f.tensors_.size(), &other, &text)) {
      corrupt(at, "tensor name '", tname, "' reads as '", gguf_printable(text),
              "' (bytes that are not UTF-8 as \\xNN), as tensor ", other, "'s does: names must differ as text");
    }
    f.tensors_.push_back(std::move(t));
    info_at.push_back(offset_at);
  }

  // 4. The data section: each range inside the file, none overlapping.
  const uint64_t a = f.alignment_;
  f.data_offset_ = pos + (a - pos % a) % a;
  const uint64_t data_size = f.data_offset_ <= size ? size - f.data_offset_ : 0;
  std::vector<Range> ranges;
  ranges.reserve(f.tensors_.size());
  for (size_t i = 0; i < f.tensors_.size(); ++i) {
    const GgufTensorInfo& t = f.tensors_[i];
    if (t.offset > data_size || t.nbytes > data_size - t.offset) {
      corrupt(info_at[i], "tensor '", gguf_printable(t.name), "': data range [", t.offset, ", ", t.offset, " + ", t.nbytes,
              ") of the data section (at byte ", f.data_offset_,
              ") runs past the end of the file: the section holds ", data_size, " bytes");
    }
    ranges.push_back({t.offset, t.offset + t.nbytes, i});
  }
  std::sort(ranges.begin(), ranges.end(), [](const Range& x, const Range& y) {
    return x.begin != y.begin ? x.begin < y.begin : x.end < y.end;
  });
  for (size_t k = 1; k < ranges.size(); ++k) {
    const Range &p = ranges[k - 1], &q = ranges[k];
    if (q.begin < p.end) {
      corrupt(info_at[q.tensor], "tensor '", gguf_printable(f.tensors_[q.tensor].name), "': data range [", q.begin,
              ", ", q.end, ") overlaps tensor '", gguf_printable(f.tensors_[p.tensor].name), "' at [", p.begin, ", ", p.end, ")");
    }
  }
}

GgufFile GgufFile::parse(std::span<const uint8_t> bytes, std::string name) {
  GgufFile f;
  f.name_ = std::move(name);
  auto copy = std::make_shared<std::vector<uint8_t>>(bytes.begin(), bytes.end());
  f.base_ = copy->data();
  f.size_ = copy->size();
  f.owner_ = std::move(copy);
  GgufParser{f.name_, f.base_, f.size_, f.owner_}.parse(f);
  return f;
}

GgufFile GgufFile::open(const std::string& path) {
  // The OS's failures (open, fstat, mmap) are kIoError with errno's text, as
  // is a path that is not a regular file; everything wrong inside the file
  // is kCorruptFile. The Mapping exists before the file is opened, and the
  // descriptor is closed before anything else can throw.
  GgufFile f;
  f.name_ = path;
  auto map = std::make_shared<Mapping>();
  struct stat st {};
  const int fd = detail::open_regular_file(kWhere, path, &st);
  const auto file_size = static_cast<uint64_t>(st.st_size);
  if (file_size > 0) {
    map->base = ::mmap(nullptr, file_size, PROT_READ, MAP_PRIVATE, fd, 0);
    map->size = file_size;
  }
  const int map_errno = errno;
  ::close(fd);
  if (file_size > 0 && map->base == MAP_FAILED)
    detail::fail(Status::kIoError, kWhere, "cannot map ", path, ": ", std::strerror(map_errno));
  f.base_ = file_size > 0 ? static_cast<const uint8_t*>(map->base) : nullptr;
  f.size_ = file_size;
  f.owner_ = std::move(map);
  GgufParser{f.name_, f.base_, f.size_, f.owner_}.parse(f);
  return f;
}

const GgufValue* GgufFile::find(std::string_view key) const {
  const auto it = key_index_.find(key);
  return it == key_index_.end() ? nullptr : &metadata_[it->second].value;
}

const GgufTensorInfo& GgufFile::tensor(std::string_view name) const {
  const auto it = tensor_index_.find(name);
  if (it == tensor_index_.end()) {
    std::string some;
    constexpr size_t kListed = 5;
    for (size_t i = 0; i < tensors_.size() && i < kListed; ++i)
      some += (i ? ", '" : "'") + gguf_printable(tensors_[i].name) + "'";
    if (tensors_.size() > kListed) some += ", ...";
    detail::fail(Status::kInvalidArgument, kWhere, name_, ": no tensor named '", gguf_printable(name), "' (",
                 tensors_.size(),
                 " tensors in the file", tensors_.empty() ? "" : ": ", some, ")");
  }
  return tensors_[it->second];
}

std::span<const uint8_t> GgufFile::bytes(std::string_view name) const {
  const GgufTensorInfo& t = tensor(name);
  return {base_ + data_offset_ + t.offset, static_cast<size_t>(t.nbytes)};
}

GgufFile::AlignedBytes GgufFile::aligned_bytes(std::string_view name) const {
  const GgufTensorInfo& t = tensor(name);
  const std::span<const uint8_t> in_place{base_ + data_offset_ + t.offset, static_cast<size_t>(t.nbytes)};
  const std::optional<DType> dtype = ggml_float_dtype(t.ggml_type);
  const size_t each = dtype ? dtype_size(*dtype) : 1;
  if (reinterpret_cast<uintptr_t>(in_place.data()) % each == 0) return {in_place, owner_, false};
  std::shared_ptr<std::vector<uint64_t>> copy;
  try {
    copy = std::make_shared<std::vector<uint64_t>>((in_place.size() + 7) / 8);
  } catch (const std::bad_alloc&) {
    detail::fail(Status::kOutOfMemory, kWhere, name_, ": cannot allocate ", in_place.size(),
                 " bytes for an aligned copy of tensor '", gguf_printable(t.name), "'");
  }
  std::memcpy(copy->data(), in_place.data(), in_place.size());
  return {{reinterpret_cast<const uint8_t*>(copy->data()), in_place.size()}, std::move(copy), true};
}

// --- GgufValue ---

namespace {

[[noreturn]] void wrong_type(const char* what, GgufType type) {
  detail::fail(Status::kInvalidArgument, "GgufValue", what, ": the value is ", gguf_type_name(type));
}

}  // namespace

uint64_t GgufValue::to_uint64() const {
  switch (type_) {
    case GgufType::kUint8: return load<uint8_t>(data_);
    case GgufType::kUint16: return load<uint16_t>(data_);
    case GgufType::kUint32: return load<uint32_t>(data_);
    case GgufType::kUint64: return load<uint64_t>(data_);
    case GgufType::kInt8:
    case GgufType::kInt16:
    case GgufType::kInt32:
    case GgufType::kInt64: {
      const int64_t v = to_int64();
      if (v < 0)
        detail::fail(Status::kInvalidArgument, "GgufValue", "to_uint64: the ", gguf_type_name(type_),
                     " value ", v, " is below 0");
      return static_cast<uint64_t>(v);
    }
    default: wrong_type("to_uint64 needs an integer", type_);
  }
}

int64_t GgufValue::to_int64() const {
  switch (type_) {
    case GgufType::kInt8: return load<int8_t>(data_);
    case GgufType::kInt16: return load<int16_t>(data_);
    case GgufType::kInt32: return load<int32_t>(data_);
    case GgufType::kInt64: return load<int64_t>(data_);
    case GgufType::kUint8:
    case GgufType::kUint16:
    case GgufType::kUint32:
    case GgufType::kUint64: {
      const uint64_t v = to_uint64();
      if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        detail::fail(Status::kInvalidArgument, "GgufValue", "to_int64: the UINT64 value ", v,
                     " exceeds INT64_MAX");
      return static_cast<int64_t>(v);
    }
    default: wrong_type("to_int64 needs an integer", type_);
  }
}

double GgufValue::to_double() const {
  if (type_ == GgufType::kFloat32) return load<float>(data_);
  if (type_ == GgufType::kFloat64) return load<double>(data_);
  wrong_type("to_double needs FLOAT32 or FLOAT64", type_);
}

bool GgufValue::to_bool() const {
  if (type_ != GgufType::kBool) wrong_type("to_bool needs BOOL", type_);
  return data_[0] != 0;
}

std::string_view GgufValue::to_string() const {
  if (type_ != GgufType::kString) wrong_type("to_string needs STRING", type_);
  return {reinterpret_cast<const char*>(data_), static_cast<size_t>(count_)};
}

GgufType GgufValue::array_type() const {
  if (!is_array()) wrong_type("array_type needs ARRAY", type_);
  return elem_;
}

uint64_t GgufValue::size() const {
  if (!is_array()) wrong_type("size needs ARRAY", type_);
  return count_;
}

GgufValue GgufValue::at(uint64_t i) const {
  if (!is_array()) wrong_type("at needs ARRAY", type_);
  if (i >= count_)
    detail::fail(Status::kInvalidArgument, "GgufValue", "at: index ", i, " is outside [0, ", count_, ")");
  const uint64_t each = fixed_size(elem_);
  if (each != 0) {
    GgufValue v;
    v.type_ = elem_;
    v.data_ = data_ + i * each;
    v.owner_ = owner_;
    return v;
  }
  // A string or an array, validated when the file was read: read it again
  // from its own bytes.
  const uint64_t begin = (*starts_)[i], end = (*starts_)[i + 1];
  const std::string name = "array element";
  GgufParser p{name, data_ + begin, end - begin, owner_};
  return p.read_value(elem_, 1, "");
}

std::vector<std::string> GgufValue::to_strings() const {
  if (array_type() != GgufType::kString)
    wrong_type("to_strings needs an ARRAY of STRING; the elements", elem_);
  std::vector<std::string> out;
  out.reserve(static_cast<size_t>(count_));
  for (uint64_t i = 0; i < count_; ++i) out.emplace_back(at(i).to_string());
  return out;
}

std::vector<int64_t> GgufValue::to_int64s() const {
  if (!is_integer(array_type())) wrong_type("to_int64s needs an ARRAY of integers; the elements", elem_);
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(count_));
  for (uint64_t i = 0; i < count_; ++i) out.push_back(at(i).to_int64());
  return out;
}

std::vector<double> GgufValue::to_doubles() const {
  if (array_type() != GgufType::kFloat32 && elem_ != GgufType::kFloat64)
    wrong_type("to_doubles needs an ARRAY of FLOAT32 or FLOAT64; the elements", elem_);
  std::vector<double> out;
  out.reserve(static_cast<size_t>(count_));
  for (uint64_t i = 0; i < count_; ++i) out.push_back(at(i).to_double());
  return out;
}

}  // namespace tokpos
