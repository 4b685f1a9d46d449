// The lab kits: the naming rule, the language rule and the all-or-nothing
// writing of a kit (lab.h).
#include "frontend/lab.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <system_error>

#include "frontend/lab_files.h"
#include "tokpos/error.h"
#include "tokpos/files.h"

namespace tokpos::frontend {
namespace {

namespace fs = std::filesystem;

// One embedded file of a kit, read by the naming rule.
struct Entry {
  std::string kind;    // "c"
  std::string target;  // the path written, relative to the kit ("framework/student.c")
  std::optional<Lang> lang;
  bool exercise = false;
  std::string source;  // the path in lab/ ("c/framework/student.en.c")
  std::string_view bytes;
  std::string problem;  // why the name breaks the rule, or empty
};

std::vector<std::string> split(std::string_view s, char sep) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (;;) {
    const size_t end = s.find(sep, start);
    parts.emplace_back(s.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start));
    if (end == std::string_view::npos) return parts;
    start = end + 1;
  }
}

Entry read_entry(const detail::LabFile& f) {
  Entry e;
  e.source = std::string(f.path);
  e.bytes = f.bytes;
  const size_t slash = f.path.find('/');
  e.kind = std::string(f.path.substr(0, slash));
  const std::string_view rel = slash == std::string_view::npos ? std::string_view() : f.path.substr(slash + 1);
  const size_t last = rel.rfind('/');
  const std::string_view folder = last == std::string_view::npos ? std::string_view() : rel.substr(0, last + 1);
  const std::string_view base = last == std::string_view::npos ? rel : rel.substr(last + 1);
  std::vector<std::string> parts = split(base, '.');
  std::string name = parts[0];
  for (size_t k = 1; k < parts.size(); ++k) {
    const std::string& p = parts[k];
    if (p == "en" || p == "zh") {
      if (e.lang) e.problem = e.source + " has two language tags";
      e.lang = p == "en" ? Lang::kEn : Lang::kZh;
    } else if (p == "exercise") {
      e.exercise = true;
    } else {
      name += "." + p;
    }
  }
  e.target = std::string(folder) + name;
  return e;
}

std::vector<Entry> entries(std::span<const detail::LabFile> files) {
  std::vector<Entry> all;
  for (const detail::LabFile& f : files) all.push_back(read_entry(f));
  return all;
}

std::span<const detail::LabFile> embedded() { return {detail::kLabFiles, detail::kLabFileCount}; }

// The source name of e in the other language.
std::string other_language(const Entry& e) {
  std::string s = e.source;
  const std::string from = e.lang == Lang::kEn ? ".en" : ".zh";
  const std::string to = e.lang == Lang::kEn ? ".zh" : ".en";
  const size_t at = s.rfind(from + ".") != std::string::npos ? s.rfind(from + ".") : s.rfind(from);
  return s.replace(at, from.size(), to);
}

std::string quoted_for_shell(const std::string& s) {
  const bool plain = !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
           c == '/' || c == '-';
  });
  if (plain) return s;
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

[[noreturn]] void refuse(const std::string& message) {
  throw Error(Status::kInvalidArgument, "write_lab: " + message);
}

}  // namespace

std::vector<std::string> lab_kinds() {
  std::set<std::string> kinds;
  for (const Entry& e : entries(embedded())) kinds.insert(e.kind);
  return {kinds.begin(), kinds.end()};
}

std::vector<std::string> lab_file_paths() {
  std::vector<std::string> paths;
  for (size_t k = 0; k < detail::kLabFileCount; ++k) paths.emplace_back(detail::kLabFiles[k].path);
  return paths;
}

std::vector<std::string> lab_file_problems() { return lab_file_problems(embedded()); }

std::vector<std::string> lab_file_problems(std::span<const detail::LabFile> files) {
  const std::vector<Entry> all = entries(files);
  std::set<std::string> sources;
  for (const Entry& e : all) sources.insert(e.source);
  std::vector<std::string> problems;
  for (const Entry& e : all) {
    if (!e.problem.empty()) {
      problems.push_back(e.problem);
    } else if (e.lang && !sources.contains(other_language(e))) {
      problems.push_back(e.source + " has no " + other_language(e));
    }
  }
  return problems;
}

std::vector<LabPlanItem> plan_lab(std::span<const detail::LabFile> files, std::string_view kind, Lang lang,
                                  bool exercise) {
  // The file chosen for each target: an exercise variant over the plain one
  // (when asked for), then the chosen language's over a file without a tag.
  const std::vector<Entry> all = entries(files);
  std::map<std::string, const Entry*> chosen;
  auto rank = [](const Entry& e) { return (e.exercise ? 2 : 0) + (e.lang ? 1 : 0); };
  for (const Entry& e : all) {
    if (e.kind != kind || (e.lang && *e.lang != lang) || (e.exercise && !exercise)) continue;
    auto [it, fresh] = chosen.emplace(e.target, &e);
    if (!fresh && rank(e) > rank(*it->second)) it->second = &e;
  }
  std::vector<LabPlanItem> plan;
  for (const auto& [target, e] : chosen) plan.push_back({target, e->source});
  return plan;
}

std::vector<std::string> write_lab(std::string_view kind, const fs::path& dir, Lang lang, bool exercise) {
  const std::vector<std::string> kinds = lab_kinds();
  if (std::find(kinds.begin(), kinds.end(), kind) == kinds.end()) {
    std::string list;
    for (const std::string& k : kinds) list += (list.empty() ? "" : ", ") + k;
    refuse("no kit named '" + std::string(kind) + "' (the kits: " + list + ")");
  }
  if (dir.empty()) refuse("the directory is empty; name a new or empty directory");
  std::error_code ec;
  const fs::file_status st = fs::symlink_status(dir, ec);
  if (fs::exists(st)) {
    if (!fs::is_directory(fs::status(dir, ec))) refuse("'" + dir.string() + "' exists and is not a directory");
    if (!fs::is_empty(dir, ec) || ec) {
      refuse("directory '" + dir.string() + "' exists and is not empty; the kit goes into a new or empty directory");
    }
  }

  const std::vector<Entry> all = entries(embedded());
  std::map<std::string, const Entry*> chosen;
  for (const LabPlanItem& item : plan_lab(embedded(), kind, lang, exercise)) {
    for (const Entry& e : all) {
      if (e.source == item.source) chosen.emplace(item.target, &e);
    }
  }

  // The directories to create, parents first: the missing ancestors of dir,
  // dir, and the kit's folders.
  std::vector<fs::path> missing;
  for (fs::path p = fs::absolute(dir, ec).lexically_normal(); !p.empty() && !fs::exists(p, ec);
       p = p.parent_path()) {
    missing.insert(missing.begin(), p);
    if (p == p.parent_path()) break;
  }
  std::set<fs::path> folders;
  for (const auto& [target, e] : chosen) {
    for (fs::path p = fs::path(target).parent_path(); !p.empty(); p = p.parent_path()) folders.insert(dir / p);
  }
  std::vector<fs::path> created;
  auto undo = [&created] {
    std::error_code ignored;
    for (auto it = created.rbegin(); it != created.rend(); ++it) fs::remove(*it, ignored);
  };
  std::vector<std::string> paths;
  std::vector<FileBytes> files;
  try {
    for (const fs::path& p : missing) {
      if (!fs::create_directory(p, ec) && ec) {
        throw Error(Status::kIoError, "write_lab: cannot create directory '" + p.string() + "': " + ec.message());
      }
      created.push_back(p);
    }
    for (const fs::path& p : folders) {  // a set: each parent comes before its children
      if (!fs::create_directory(p, ec) && ec) {
        throw Error(Status::kIoError, "write_lab: cannot create directory '" + p.string() + "': " + ec.message());
      }
      created.push_back(p);
    }
    for (const auto& [target, e] : chosen) {
      paths.push_back((dir / target).string());
      files.push_back({paths.back(), std::as_bytes(std::span(e->bytes.data(), e->bytes.size()))});
    }
    for (size_t k = 0; k < files.size(); ++k) files[k].path = paths[k];
    write_files_atomically(files, "write_lab");
  } catch (...) {
    undo();
    throw;
  }
  return paths;
}

std::string lab_report(std::string_view kind, const fs::path& dir, Lang lang,
                       const std::vector<std::string>& written) {
  const bool zh = lang == Lang::kZh;
  const bool c = kind == "c";
  std::string what = c ? (zh ? " C 实验" : "the C lab") : (zh ? " PyTorch 课程" : "the PyTorch lesson");
  std::string out = zh ? "已将" + what + "写入 " + dir.string() + "：\n"
                       : "Wrote " + what + " into " + dir.string() + ":\n";
  for (const std::string& p : written) out += "  " + fs::path(p).lexically_relative(dir).string() + "\n";
  out += zh ? "下一步：\n" : "Next:\n";
  const std::string cd = "cd " + quoted_for_shell(dir.string());
  out += "  " + cd + (c ? " && make clean && make test\n" : " && python main.py && python -m pytest tests\n");
  if (c) {
    out += zh ? "（在你写代码之前，四个测试都应当是 [FAIL]；要修改的文件是 framework/student.c，说明见 TASK.md。）\n"
              : "(Before you write any code all four tests FAIL; the file to edit is framework/student.c, "
                "TASK.md says what to write.)\n";
  }
  return out;
}

}  // namespace tokpos::frontend
