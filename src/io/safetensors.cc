#include "tokpos/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <vector>

#include "common/check.h"
#include "io/posix_file.h"
#include "io/atomic_file.h"
#include "common/convert.h"

namespace tokpos {
namespace {

constexpr uint64_t kMaxHeader = 100u << 20;  // the format's own limit is 100 MB

// The element count of a shape whose entries are all >= 0, or false if it
// does not fit int64. The product of the non-zero entries must fit (not only
// the whole product, which a zero entry makes 0), so that every partial
// product, in any order, is representable: TensorInfo::numel and the
// readers of a shape may multiply the entries in any order.
bool shape_numel(const std::vector<int64_t>& shape, int64_t* numel) {
  int64_t nonzero = 1;
  bool any_zero = false;
  for (const int64_t s : shape) {
    if (s == 0) {
      any_zero = true;
      continue;
    }
    if (__builtin_mul_overflow(nonzero, s, &nonzero)) return false;
  }
  *numel = any_zero ? 0 : nonzero;
  return true;
}

}  // namespace

size_t safetensors_dtype_size(const std::string& d) {
  static const std::map<std::string, size_t> sizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"I16", 2}, {"U16", 2}, {"F16", 2},
      {"BF16", 2}, {"I32", 4}, {"U32", 4}, {"F32", 4},     {"F64", 8},     {"I64", 8}, {"U64", 8}};
  const auto it = sizes.find(d);
  return it == sizes.end() ? 0 : it->second;
}

int64_t TensorInfo::numel() const {
  // SafetensorsFile::open refuses a shape whose count does not fit; this
  // guards a TensorInfo built by hand.
  int64_t n = 0;
  if (std::any_of(shape.begin(), shape.end(), [](int64_t s) { return s < 0; }) || !shape_numel(shape, &n))
    detail::fail(Status::kSizeOverflow, "TensorInfo::numel", "the element count of the shape does not fit int64");
  return n;
}

struct SafetensorsFile::Mapping {
  void* base = MAP_FAILED;
  size_t size = 0;
  int fd = -1;  // Access::kRead: the open file, read with pread
  ~Mapping() {
    if (base != MAP_FAILED && size > 0) ::munmap(base, size);
    if (fd >= 0) ::close(fd);
  }
};

namespace {

// Reads n bytes at offset with pread. A failing read is kIoError; a file that
// ends early (truncated after it was opened and validated) is kCorruptFile.
void pread_all(const std::string& path, int fd, void* buf, uint64_t n, uint64_t offset, const std::string& what) {
  auto* c = static_cast<char*>(buf);
  uint64_t got = 0;
  while (got < n) {
    const size_t chunk = static_cast<size_t>(std::min<uint64_t>(n - got, 1u << 30));
    const ssize_t r = ::pread(fd, c + got, chunk, static_cast<off_t>(offset + got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0)
      detail::fail(Status::kIoError, "safetensors", "cannot read ", path, " (", what, "): ", std::strerror(errno));
    if (r == 0) {
      struct stat st {};
      const uint64_t now = ::fstat(fd, &st) == 0 ? static_cast<uint64_t>(st.st_size) : offset + got;
      detail::fail(Status::kCorruptFile, "safetensors", path, ": truncated while reading: ", what, " needs bytes [",
                   offset, ", ", offset + n, ") of the file, which now ends at ", now);
    }
    got += static_cast<uint64_t>(r);
  }
}

// Builds the header's JSON value with nlohmann's SAX interface, noting the
// first top-level name that appears twice. (A parsed object has already
// dropped duplicates, and nlohmann's callback parser rescans the top-level
// object after every tensor entry: quadratic in the number of tensors.)
class HeaderParser : public nlohmann::json_sax<nlohmann::json> {
 public:
  using json = nlohmann::json;
  json root;
  std::string duplicate;  // the first repeated top-level name
  std::string error;      // the parse error's text

  bool null() override { return put(nullptr); }
  bool boolean(bool v) override { return put(v); }
  bool number_integer(number_integer_t v) override { return put(v); }
  bool number_unsigned(number_unsigned_t v) override { return put(v); }
  bool number_float(number_float_t v, const string_t&) override { return put(v); }
  bool string(string_t& v) override { return put(std::move(v)); }
  bool binary(binary_t& v) override { return put(json::binary(std::move(v))); }
  bool start_object(std::size_t) override { return open(json::value_t::object); }
  bool start_array(std::size_t) override { return open(json::value_t::array); }
  bool end_object() override { return close(); }
  bool end_array() override { return close(); }
  bool key(string_t& k) override {
    auto& object = stack_.back()->get_ref<json::object_t&>();
    const auto [it, inserted] = object.try_emplace(std::move(k));
    if (!inserted) {
      if (stack_.size() == 1 && duplicate.empty()) duplicate = it->first;
      it->second = json();  // deeper levels: the last value wins, as in nlohmann's parser
    }
    slot_ = &it->second;
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    error = e.what();
    return false;
  }

 private:
  std::vector<json*> stack_;
  json* slot_ = nullptr;  // where the next object member goes

  json* place(json&& v) {
    if (stack_.empty()) {
      root = std::move(v);
      return &root;
    }
    json* top = stack_.back();
    if (top->is_array()) {
      auto& a = top->get_ref<json::array_t&>();
      a.push_back(std::move(v));
      return &a.back();
    }
    *slot_ = std::move(v);
    return slot_;
  }
  template <typename V>
  bool put(V&& v) {
    place(json(std::forward<V>(v)));
    return true;
  }
  bool open(json::value_t t) {
    stack_.push_back(place(json(t)));
    return true;
  }
  bool close() {
    stack_.pop_back();
    return true;
  }
};

}  // namespace

SafetensorsFile SafetensorsFile::open(const std::string& path, Access access) {
  constexpr const char* kWhere = "safetensors";
  // The OS's failures (open, fstat, mmap, pread) are kIoError with errno's
  // text, as is a path that is not a regular file; everything wrong inside
  // the file is kCorruptFile.
  SafetensorsFile f;
  f.path_ = path;
  f.access_ = access;
  // The Mapping is allocated before the file is opened, and owns the
  // descriptor (kRead) or the descriptor is closed (kMap) before anything
  // else can throw: a bad_alloc cannot leak it.
  f.map_ = std::make_shared<Mapping>();
  struct stat st {};
  const int fd = detail::open_regular_file(kWhere, path, &st);
  const auto file_size = static_cast<uint64_t>(st.st_size);
  const uint8_t* bytes = nullptr;
  std::vector<uint8_t> head;  // Access::kRead: the length and the header, read with pread
  if (access == Access::kRead) {
    f.map_->fd = fd;
  } else {
    if (file_size > 0) {
      f.map_->base = ::mmap(nullptr, file_size, PROT_READ, MAP_PRIVATE, fd, 0);
      f.map_->size = file_size;
    }
    const int map_errno = errno;
    ::close(fd);
    if (file_size > 0 && f.map_->base == MAP_FAILED)
      detail::fail(Status::kIoError, kWhere, "cannot map ", path, ": ", std::strerror(map_errno));
    bytes = static_cast<const uint8_t*>(f.map_->base);
  }

  // 1. The 8-byte little-endian header length, against the file size.
  if (file_size < 8) {
    detail::fail(Status::kCorruptFile, kWhere, path, ": truncated: ", file_size,
                 " bytes, not even the 8-byte header length");
  }
  if (access == Access::kRead) {
    head.resize(8);
    pread_all(path, fd, head.data(), 8, 0, "the header length");
    bytes = head.data();
  }
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | bytes[i];
  if (header_len > file_size - 8) {
    detail::fail(Status::kCorruptFile, kWhere, path, ": header length ", header_len,
                 " runs past the end of the file (", file_size - 8, " bytes after the length)");
  }
  if (header_len > kMaxHeader) {
    detail::fail(Status::kCorruptFile, kWhere, path, ": header length ", header_len, " exceeds 100 MB");
  }
  if (access == Access::kRead) {
    head.resize(8 + header_len);
    pread_all(path, fd, head.data() + 8, header_len, 8, "the header");
    bytes = head.data();
  }
  const char* header = reinterpret_cast<const char*>(bytes + 8);
  const uint64_t data_size = file_size - 8 - header_len;
  f.data_offset_ = 8 + header_len;
  if (access == Access::kMap) f.data_ = bytes + 8 + header_len;

  // 2. The JSON header; duplicate top-level names are caught while parsing.
  HeaderParser parser;
  try {
    nlohmann::json::sax_parse(header, header + header_len, &parser);
  } catch (const nlohmann::json::exception& e) {
    parser.error = e.what();
  }
  if (!parser.error.empty())
    detail::fail(Status::kCorruptFile, kWhere, path, ": header is not valid JSON: ", parser.error);
  if (!parser.duplicate.empty())
    detail::fail(Status::kCorruptFile, kWhere, path, ": tensor name '", parser.duplicate, "' appears twice");
  const nlohmann::json& j = parser.root;
  if (!j.is_object()) detail::fail(Status::kCorruptFile, kWhere, path, ": header is not a JSON object");

  // 3. Every entry: dtype, shape, offsets, size.
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& name = it.key();
    if (name == "__metadata__") {
      if (!it->is_object())
        detail::fail(Status::kCorruptFile, kWhere, path, ": __metadata__ is not an object");
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (!m->is_string())
          detail::fail(Status::kCorruptFile, kWhere, path, ": metadata '", m.key(), "' is not a string");
        f.metadata_[m.key()] = m->get<std::string>();
      }
      continue;
    }
    const auto& e = *it;
    if (!e.is_object() || !e.contains("dtype") || !e.contains("shape") || !e.contains("data_offsets") ||
        !e["dtype"].is_string() || !e["shape"].is_array() || !e["data_offsets"].is_array() ||
        e["data_offsets"].size() != 2) {
      detail::fail(Status::kCorruptFile, kWhere, path, ": tensor '", name,
                   "' needs dtype (string), shape (array) and data_offsets ([begin, end])");
    }
    TensorInfo info;
    info.dtype = e["dtype"].get<std::string>();
    const size_t elem = safetensors_dtype_size(info.dtype);
    if (elem == 0)
      detail::fail(Status::kCorruptFile, kWhere, path, ": tensor '", name, "' has unknown dtype '",
                   info.dtype, "'");
    for (const auto& s : e["shape"]) {
      if (!s.is_number_unsigned())
        detail::fail(Status::kCorruptFile, kWhere, path, ": tensor '", name, "' has a bad shape entry");
      const auto d = s.get<uint64_t>();
      if (d > static_cast<uint64_t>(INT64_MAX)) {
        detail::fail(Status::kCorruptFile, kWhere, path, ": tensor '", name, "' has shape entry ", d,
                     ", above the int64 maximum");
      }
      info.shape.push_back(static_cast<int64_t>(d));
    }
    int64_t count = 0;
    if (!shape_numel(info.shape, &count)) {
      detail::fail(Status::kCorruptFile, kWhere, path, ": tensor '", name,
                   "' shape overflows: the product of its non-zero entries does not fit int64");
    }
    const auto numel = static_cast<uint64_t>(count);
    if (!e["data_offsets"][0].is_number_unsigned() || !e["data_offsets"][1].is_number_unsigned()) {
      detail::fail(Status::kCorruptFile, kWhere, path, ": tensor '", name,
                   "' has non-integer data_offsets");
    }
    const auto begin = e["data_offsets"][0].get<uint64_t>(), end = e["data_offsets"][1].get<uint64_t>();
    if (end < begin || end > data_size) {
      detail::fail(Status::kCorruptFile, kWhere, path, ": tensor '", name, "' bytes [", begin, ", ", end,
                   ") lie outside the data area of ", data_size, " bytes");
    }
    if (numel > UINT64_MAX / elem || numel * elem != end - begin) {
      detail::fail(Status::kCorruptFile, kWhere, path, ": tensor '", name, "' shape needs ", numel, " x ",
                   elem, " bytes (", info.dtype, ") but its byte range holds ", end - begin);
    }
    info.offset = begin;
    info.bytes = end - begin;
    ranges.emplace_back(begin, end);
    f.tensors_[name] = std::move(info);
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) {
    if (ranges[i].first < ranges[i - 1].second) {
      detail::fail(Status::kCorruptFile, kWhere, path, ": byte ranges [", ranges[i - 1].first, ", ",
                   ranges[i - 1].second, ") and [", ranges[i].first, ", ", ranges[i].second, ") overlap");
    }
  }
  return f;
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  for (const auto& [name, info] : tensors_) out.push_back(name);
  return out;
}

const TensorInfo& SafetensorsFile::info(const std::string& name) const {
  const auto it = tensors_.find(name);
  if (it == tensors_.end()) {
    detail::fail(Status::kInvalidArgument, "safetensors", path_, ": no tensor named '", name, "' (",
                 tensors_.size(), " tensors in the file)");
  }
  return it->second;
}

namespace {

// out = the F32, F16 or BF16 numbers at p (out.size() of them), widened exactly.
void widen_f32(const std::string& dtype, const uint8_t* p, std::span<float> out) {
  if (dtype == "F32") {
    if (!out.empty()) std::memcpy(out.data(), p, out.size() * sizeof(float));
    return;
  }
  const bool f16 = dtype == "F16";
  for (size_t k = 0; k < out.size(); ++k) {
    uint16_t h;
    std::memcpy(&h, p + 2 * k, 2);
    out[k] = f16 ? fp::to_f32(fp::f16_t{h}) : fp::to_f32(fp::bf16_t{h});
  }
}

// The zero-copy accessors need the mapping.
void require_map(const std::string& path, SafetensorsFile::Access access, const std::string& name,
                 const char* what) {
  if (access != SafetensorsFile::Access::kMap) {
    detail::fail(Status::kInvalidArgument, "safetensors", path, ": ", what, " of tensor '", name,
                 "' needs the file mapped (Access::kMap); it was opened with Access::kRead: use read_f32 or "
                 "read_bytes");
  }
}

}  // namespace

std::span<const uint8_t> SafetensorsFile::bytes(const std::string& name) const {
  const auto& i = info(name);
  require_map(path_, access_, name, "a zero-copy view");
  return {data_ + i.offset, static_cast<size_t>(i.bytes)};
}

std::vector<uint8_t> SafetensorsFile::read_bytes(const std::string& name) const {
  const auto& i = info(name);
  std::vector<uint8_t> out(static_cast<size_t>(i.bytes));
  if (access_ == Access::kMap) {
    if (i.bytes > 0) std::memcpy(out.data(), data_ + i.offset, out.size());
  } else {
    pread_all(path_, map_->fd, out.data(), i.bytes, data_offset_ + i.offset, "tensor '" + name + "'");
  }
  return out;
}

std::span<const float> SafetensorsFile::view_f32(const std::string& name) const {
  const auto& i = info(name);
  if (i.dtype != "F32")
    detail::fail(Status::kInvalidArgument, "safetensors", path_, ": tensor '", name, "' is ", i.dtype,
                 ", not F32");
  require_map(path_, access_, name, "a zero-copy view");
  if (reinterpret_cast<uintptr_t>(data_ + i.offset) % alignof(float) != 0) {
    detail::fail(Status::kInvalidArgument, "safetensors", path_, ": tensor '", name,
                 "' is not 4-byte aligned; use read_f32");
  }
  return {reinterpret_cast<const float*>(data_ + i.offset), static_cast<size_t>(i.numel())};
}

std::vector<float> SafetensorsFile::read_f32(const std::string& name) const {
  const auto& i = info(name);
  if (i.dtype != "F32" && i.dtype != "F16" && i.dtype != "BF16") {
    detail::fail(Status::kInvalidArgument, "safetensors", path_, ": tensor '", name, "' has dtype ", i.dtype,
                 "; tables must be F32, F16 or BF16");
  }
  std::vector<float> out(static_cast<size_t>(i.numel()));
  std::vector<uint8_t> copy;  // Access::kRead: the tensor's bytes
  const uint8_t* p = access_ == Access::kMap ? data_ + i.offset : nullptr;
  if (access_ == Access::kRead) {
    if (i.dtype == "F32") {  // straight into the result
      pread_all(path_, map_->fd, out.data(), i.bytes, data_offset_ + i.offset, "tensor '" + name + "'");
      return out;
    }
    copy = read_bytes(name);
    p = copy.data();
  }
  widen_f32(i.dtype, p, out);
  return out;
}

void SafetensorsFile::read_f32_rows(const std::string& name, int64_t row_begin, int64_t rows,
                                    std::span<float> out) const {
  constexpr const char* kWhere = "safetensors";
  const auto& i = info(name);
  if (i.dtype != "F32" && i.dtype != "F16" && i.dtype != "BF16") {
    detail::fail(Status::kInvalidArgument, kWhere, path_, ": tensor '", name, "' has dtype ", i.dtype,
                 "; tables must be F32, F16 or BF16");
  }
  if (i.shape.empty())
    detail::fail(Status::kInvalidArgument, kWhere, path_, ": tensor '", name, "' is 0-D: it has no rows to read");
  const int64_t total = i.shape[0];
  if (row_begin < 0 || rows < 0 || row_begin > total || rows > total - row_begin) {
    detail::fail(Status::kInvalidArgument, kWhere, path_, ": ", rows, " rows from row ", row_begin, " of tensor '",
                 name, "' are not inside its ", total, " rows");
  }
  // numel fits int64 (open checked the shape), so the row size and the count do too.
  const int64_t row_elems = total == 0 ? 0 : i.numel() / total;
  const auto want = static_cast<uint64_t>(rows) * static_cast<uint64_t>(row_elems);
  if (out.size() != want) {
    detail::fail(Status::kInvalidArgument, kWhere, path_, ": rows [", row_begin, ", ", row_begin + rows,
                 ") of tensor '", name, "' hold ", want, " numbers, but the output holds ", out.size());
  }
  if (want == 0) return;
  const uint64_t elem = safetensors_dtype_size(i.dtype);
  const uint64_t first = i.offset + static_cast<uint64_t>(row_begin) * static_cast<uint64_t>(row_elems) * elem;
  const uint64_t bytes = want * elem;
  const std::string what = "rows [" + std::to_string(row_begin) + ", " + std::to_string(row_begin + rows) +
                           ") of tensor '" + name + "'";
  std::vector<uint8_t> copy;  // F16, BF16 read with pread: the rows' bytes
  const uint8_t* p = nullptr;
  if (access_ == Access::kMap) {
    p = data_ + first;
  } else if (i.dtype == "F32") {
    pread_all(path_, map_->fd, out.data(), bytes, data_offset_ + first, what);
    return;
  } else {
    copy.resize(static_cast<size_t>(bytes));
    pread_all(path_, map_->fd, copy.data(), bytes, data_offset_ + first, what);
    p = copy.data();
  }
  widen_f32(i.dtype, p, out);
}

void write_safetensors(const std::string& path, const std::vector<TensorRef>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  constexpr const char* kWhere = "write_safetensors";
  std::vector<const TensorRef*> sorted;
  for (const auto& t : tensors) sorted.push_back(&t);
  std::sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return a->name < b->name; });
  // The header text is built entry by entry (names are sorted and unique):
  // ordered_json's operator[] searches linearly, quadratic in the tensor count.
  std::string text = "{";
  if (!metadata.empty()) text += "\"__metadata__\":" + nlohmann::json(metadata).dump();
  uint64_t offset = 0;
  for (size_t k = 0; k < sorted.size(); ++k) {
    const TensorRef& t = *sorted[k];
    if (k > 0 && t.name == sorted[k - 1]->name)
      detail::fail(Status::kInvalidArgument, kWhere, "tensor name '", t.name, "' given twice");
    const size_t elem = safetensors_dtype_size(t.dtype);
    if (elem == 0)
      detail::fail(Status::kInvalidArgument, kWhere, "tensor '", t.name, "': unknown dtype '", t.dtype, "'");
    for (int64_t s : t.shape) detail::check_at_least(kWhere, "shape entry", s, 0);
    // What the reader accepts: the product of the non-zero entries fits
    // int64, and the byte count fits uint64 (a wrapped product could equal
    // t.bytes and record a wrong shape).
    int64_t numel = 0;
    uint64_t need = 0;
    if (!shape_numel(t.shape, &numel) || __builtin_mul_overflow(static_cast<uint64_t>(numel), elem, &need)) {
      detail::fail(Status::kSizeOverflow, kWhere, path, ": tensor '", t.name,
                   "': the element or byte count of its shape overflows");
    }
    if (need != t.bytes) {
      detail::fail(Status::kShapeMismatch, kWhere, "tensor '", t.name, "': shape needs ", need, " bytes, given ",
                   t.bytes);
    }
    if (text.size() > 1) text += ',';
    text += nlohmann::json(t.name).dump() + ':' +
            nlohmann::ordered_json{{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.bytes}}}
                .dump();
    offset += t.bytes;
  }
  text += '}';
  text.append((8 - text.size() % 8) % 8, ' ');  // align the data area to 8 bytes
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(static_cast<uint64_t>(text.size()) >> (8 * i));
  std::vector<std::pair<const void*, size_t>> pieces = {{len, 8}, {text.data(), text.size()}};
  for (const auto* t : sorted) pieces.emplace_back(t->data, static_cast<size_t>(t->bytes));
  detail::write_file_atomically(kWhere, path, pieces);
}

}  // namespace tokpos
