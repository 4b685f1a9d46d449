#include "inspect.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tokpos/error.h"
#include "tokpos/gguf.h"
#include "tokpos/safetensors.h"

namespace tokpos::app {
namespace {

using nlohmann::ordered_json;

// 154389504 -> "154,389,504": byte counts read at a glance.
std::string grouped(uint64_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// One row of the tensor table; the JSON form has the same fields.
struct Row {
  std::string name, type;
  std::vector<int64_t> shape;
  uint64_t bytes = 0;
};

ordered_json inspect_safetensors(const std::string& path) {
  // pread: the header is read and validated, no tensor's bytes are.
  const auto file = SafetensorsFile::open(path, SafetensorsFile::Access::kRead);
  ordered_json j;
  j["file"] = gguf_text(path);
  j["format"] = "safetensors";
  j["metadata"] = ordered_json::object();
  for (const auto& [key, value] : file.metadata()) j["metadata"][key] = value;
  j["tensors"] = ordered_json::array();
  for (const auto& name : file.names()) {
    const auto& info = file.info(name);
    j["tensors"].push_back({{"name", name}, {"type", info.dtype}, {"shape", info.shape}, {"bytes", info.bytes}});
  }
  return j;
}

// A GGUF value as JSON: numbers, booleans, strings, and arrays of them.
// Strings, keys and names are the file's bytes as gguf_text shows them
// (bytes that are not UTF-8 as \xNN), the one rule of tokpos/gguf.h.
ordered_json gguf_json(const GgufValue& v) {
  switch (v.type()) {
    case GgufType::kString: return gguf_text(v.to_string());
    case GgufType::kBool: return v.to_bool();
    case GgufType::kFloat32:
    case GgufType::kFloat64: return v.to_double();
    case GgufType::kInt8:
    case GgufType::kInt16:
    case GgufType::kInt32:
    case GgufType::kInt64: return v.to_int64();
    case GgufType::kArray: {
      ordered_json a = ordered_json::array();
      for (uint64_t i = 0; i < v.size(); ++i) a.push_back(gguf_json(v.at(i)));
      return a;
    }
    default: return v.to_uint64();
  }
}

std::string gguf_type_text(const GgufValue& v) {
  if (!v.is_array()) return gguf_type_name(v.type());
  return std::string("ARRAY of ") + gguf_type_name(v.array_type());
}

ordered_json inspect_gguf(const std::string& path) {
  const auto file = GgufFile::open(path);  // the whole file is validated; no tensor is read
  ordered_json j;
  j["file"] = gguf_text(path);
  j["format"] = "gguf";
  j["version"] = file.version();
  j["alignment"] = file.alignment();
  j["metadata"] = ordered_json::object();
  for (const auto& kv : file.metadata())
    j["metadata"][gguf_text(kv.key)] = {{"type", gguf_type_text(kv.value)}, {"value", gguf_json(kv.value)}};
  j["tensors"] = ordered_json::array();
  for (const auto& t : file.tensors()) {
    const GgmlTypeTraits* traits = ggml_type_traits(static_cast<int64_t>(t.ggml_type));
    j["tensors"].push_back({{"name", gguf_text(t.name)},
                            {"type", traits != nullptr ? traits->name : "?"},
                            {"shape", t.shape()},
                            {"bytes", t.nbytes},
                            {"offset", file.data_offset() + t.offset}});
  }
  return j;
}

// A string of the JSON form as the table prints it: control characters as
// \xNN (gguf_printable), so no key, value or name of a file reaches the
// terminal as an escape sequence, a carriage return or a NUL.
std::string text(const ordered_json& v) { return gguf_printable(v.get<std::string>()); }

// A metadata value as the table prints it: arrays show their length and
// first elements, strings their text.
std::string value_text(const ordered_json& v) {
  if (v.is_string()) return text(v);
  if (!v.is_array()) return v.dump();
  std::string s = "[" + std::to_string(v.size()) + " items: ";
  const size_t shown = std::min<size_t>(v.size(), 8);
  for (size_t i = 0; i < shown; ++i) s += (i ? ", " : "") + (v[i].is_string() ? text(v[i]) : v[i].dump());
  return s + (shown < v.size() ? ", ...]" : "]");
}

void print_table(const ordered_json& j, std::ostream& out) {
  const auto& tensors = j["tensors"];
  const auto& metadata = j["metadata"];
  out << text(j["file"]) << ": " << j["format"].get<std::string>();
  if (j.contains("version")) out << " v" << j["version"].get<int>() << ", alignment " << j["alignment"].get<int>();
  out << ", " << tensors.size() << (tensors.size() == 1 ? " tensor" : " tensors") << ", " << metadata.size()
      << (metadata.size() == 1 ? " metadata entry" : " metadata entries") << "\n";
  if (!metadata.empty()) {
    out << "metadata:\n";
    for (const auto& [key, value] : metadata.items()) {
      const bool typed = value.is_object();  // GGUF: {"type": ..., "value": ...}
      out << "  " << gguf_printable(key);
      if (typed) out << " (" << value["type"].get<std::string>() << ")";
      out << " = " << value_text(typed ? value["value"] : value) << "\n";
    }
  }
  size_t name_w = 4, type_w = 4, shape_w = 5;
  for (const auto& t : tensors) {
    name_w = std::max(name_w, text(t["name"]).size());
    type_w = std::max(type_w, t["type"].get<std::string>().size());
    shape_w = std::max(shape_w, shape_text(t["shape"].get<std::vector<int64_t>>()).size());
  }
  char line[64];
  auto pad = [](const std::string& s, size_t w) { return s + std::string(w > s.size() ? w - s.size() : 0, ' '); };
  out << "tensors:\n  " << pad("name", name_w) << "  " << pad("type", type_w) << "  " << pad("shape", shape_w)
      << "  bytes\n";
  uint64_t total = 0;
  for (const auto& t : tensors) {
    const uint64_t bytes = t["bytes"].get<uint64_t>();
    total += bytes;
    out << "  " << pad(text(t["name"]), name_w) << "  " << pad(text(t["type"]), type_w)
        << "  " << pad(shape_text(t["shape"].get<std::vector<int64_t>>()), shape_w) << "  " << grouped(bytes)
        << "\n";
  }
  out << "total: " << grouped(total) << " bytes of tensor data";
  if (total >= 1024 * 1024) {
    std::snprintf(line, sizeof line, " (%.1f MiB)", static_cast<double>(total) / (1024.0 * 1024.0));
    out << line;
  }
  out << "\n";
}

}  // namespace

// GGUF by its magic, or by its name when the magic says nothing: a .gguf
// file too short for a magic (empty, 3 bytes), or with another one, goes to
// the GGUF reader, which names what it found. Anything else that is not a
// regular file goes to the safetensors reader, which names it.
bool is_gguf_file(const std::string& path) {
  std::string ext = path.size() >= 5 ? path.substr(path.size() - 5) : std::string();
  for (char& ch : ext) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (ext == ".gguf") return true;
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st {};
  char magic[4] = {};
  const bool regular = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
  const bool read_all = regular && ::pread(fd, magic, sizeof magic, 0) == static_cast<ssize_t>(sizeof magic);
  ::close(fd);
  return read_all && std::string(magic, sizeof magic) == "GGUF";
}

void run_inspect(const InspectCommand& c, std::ostream& out) {
  const bool gguf = is_gguf_file(c.file);
  const ordered_json j = gguf ? inspect_gguf(c.file) : inspect_safetensors(c.file);
  if (c.json) {
    out << j.dump(2) << "\n";
  } else {
    print_table(j, out);
  }
}

}  // namespace tokpos::app
