#include "tokpos/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "common/check.h"
#include "io/atomic_file.h"
#include "common/convert.h"

namespace tokpos {
namespace {

constexpr uint64_t kMaxHeader = 100u << 20;  // the format's own limit is 100 MB

}  // namespace

size_t safetensors_dtype_size(const std::string& d) {
  static const std::map<std::string, size_t> sizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"I16", 2}, {"U16", 2}, {"F16", 2},
      {"BF16", 2}, {"I32", 4}, {"U32", 4}, {"F32", 4},     {"F64", 8},     {"I64", 8}, {"U64", 8}};
  const auto it = sizes.find(d);
  return it == sizes.end() ? 0 : it->second;
}

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

struct SafetensorsFile::Mapping {
  void* base = MAP_FAILED;
  size_t size = 0;
  ~Mapping() {
    if (base != MAP_FAILED && size > 0) ::munmap(base, size);
  }
};

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  constexpr const char* kWhere = "safetensors";
  // The OS's failures (open, fstat, mmap) are kIoError with errno's text;
  // everything wrong inside the file is kCorruptFile.
  SafetensorsFile f;
  f.path_ = path;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) detail::fail(Status::kIoError, kWhere, "cannot open ", path, ": ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    detail::fail(Status::kIoError, kWhere, "cannot stat ", path, ": ", std::strerror(err));
  }
  if (S_ISDIR(st.st_mode)) {
    ::close(fd);
    detail::fail(Status::kIoError, kWhere, "cannot open ", path, ": ", std::strerror(EISDIR));
  }
  const auto file_size = static_cast<uint64_t>(st.st_size);
  f.map_ = std::make_shared<Mapping>();
  if (file_size > 0) {
    f.map_->base = ::mmap(nullptr, file_size, PROT_READ, MAP_PRIVATE, fd, 0);
    f.map_->size = file_size;
  }
  const int map_errno = errno;
  ::close(fd);
  if (file_size > 0 && f.map_->base == MAP_FAILED)
    detail::fail(Status::kIoError, kWhere, "cannot map ", path, ": ", std::strerror(map_errno));
  const auto* bytes = static_cast<const uint8_t*>(f.map_->base);

  // 1. The 8-byte little-endian header length, against the file size.
  if (file_size < 8) {
    detail::fail(Status::kCorruptFile, kWhere, path, ": truncated: ", file_size,
                 " bytes, not even the 8-byte header length");
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
  const char* header = reinterpret_cast<const char*>(bytes + 8);
  const uint64_t data_size = file_size - 8 - header_len;
  f.data_ = bytes + 8 + header_len;

  // 2. The JSON header; duplicate top-level names are caught while parsing.
  std::set<std::string> seen;
  std::string duplicate;
  auto callback = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    if (depth == 1 && event == nlohmann::json::parse_event_t::key) {
      const auto key = parsed.get<std::string>();
      if (!seen.insert(key).second && duplicate.empty()) duplicate = key;
    }
    return true;
  };
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(header, header + header_len, callback);
  } catch (const nlohmann::json::exception& e) {
    detail::fail(Status::kCorruptFile, kWhere, path, ": header is not valid JSON: ", e.what());
  }
  if (!duplicate.empty())
    detail::fail(Status::kCorruptFile, kWhere, path, ": tensor name '", duplicate, "' appears twice");
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
    uint64_t numel = 1;
    for (const auto& s : e["shape"]) {
      if (!s.is_number_unsigned())
        detail::fail(Status::kCorruptFile, kWhere, path, ": tensor '", name, "' has a bad shape entry");
      const auto d = s.get<uint64_t>();
      if (d > 0 && numel > UINT64_MAX / d)
        detail::fail(Status::kCorruptFile, kWhere, path, ": tensor '", name, "' shape overflows");
      numel *= d;
      info.shape.push_back(static_cast<int64_t>(d));
    }
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

std::span<const uint8_t> SafetensorsFile::bytes(const std::string& name) const {
  const auto& i = info(name);
  return {data_ + i.offset, static_cast<size_t>(i.bytes)};
}

std::span<const float> SafetensorsFile::view_f32(const std::string& name) const {
  const auto& i = info(name);
  if (i.dtype != "F32")
    detail::fail(Status::kInvalidArgument, "safetensors", path_, ": tensor '", name, "' is ", i.dtype,
                 ", not F32");
  if (reinterpret_cast<uintptr_t>(data_ + i.offset) % alignof(float) != 0) {
    detail::fail(Status::kInvalidArgument, "safetensors", path_, ": tensor '", name,
                 "' is not 4-byte aligned; use read_f32");
  }
  return {reinterpret_cast<const float*>(data_ + i.offset), static_cast<size_t>(i.numel())};
}

std::vector<float> SafetensorsFile::read_f32(const std::string& name) const {
  const auto& i = info(name);
  const uint8_t* p = data_ + i.offset;
  std::vector<float> out(static_cast<size_t>(i.numel()));
  if (i.dtype == "F32") {
    std::memcpy(out.data(), p, i.bytes);
  } else if (i.dtype == "F16" || i.dtype == "BF16") {
    for (size_t k = 0; k < out.size(); ++k) {
      uint16_t h;
      std::memcpy(&h, p + 2 * k, 2);
      out[k] = i.dtype == "F16" ? fp::to_f32(fp::f16_t{h}) : fp::to_f32(fp::bf16_t{h});
    }
  } else {
    detail::fail(Status::kInvalidArgument, "safetensors", path_, ": tensor '", name, "' has dtype ", i.dtype,
                 "; tables must be F32, F16 or BF16");
  }
  return out;
}

void write_safetensors(const std::string& path, const std::vector<TensorRef>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  constexpr const char* kWhere = "write_safetensors";
  std::vector<const TensorRef*> sorted;
  for (const auto& t : tensors) sorted.push_back(&t);
  std::sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return a->name < b->name; });
  nlohmann::ordered_json header;
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (size_t k = 0; k < sorted.size(); ++k) {
    const TensorRef& t = *sorted[k];
    if (k > 0 && t.name == sorted[k - 1]->name)
      detail::fail(Status::kInvalidArgument, kWhere, "tensor name '", t.name, "' given twice");
    const size_t elem = safetensors_dtype_size(t.dtype);
    if (elem == 0)
      detail::fail(Status::kInvalidArgument, kWhere, "tensor '", t.name, "': unknown dtype '", t.dtype, "'");
    uint64_t numel = 1;
    for (int64_t s : t.shape) {
      detail::check_at_least(kWhere, "shape entry", s, 0);
      numel *= static_cast<uint64_t>(s);
    }
    if (numel * elem != t.bytes) {
      detail::fail(Status::kShapeMismatch, kWhere, "tensor '", t.name, "': shape needs ", numel * elem,
                   " bytes, given ", t.bytes);
    }
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.bytes}}};
    offset += t.bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // align the data area to 8 bytes
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(static_cast<uint64_t>(text.size()) >> (8 * i));
  std::vector<std::pair<const void*, size_t>> pieces = {{len, 8}, {text.data(), text.size()}};
  for (const auto* t : sorted) pieces.emplace_back(t->data, static_cast<size_t>(t->bytes));
  detail::write_file_atomically(kWhere, path, pieces);
}

}  // namespace tokpos
