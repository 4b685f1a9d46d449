// The lab kits of the two lessons (lab/c, lab/pytorch in the source tree),
// embedded in the program and written out by `tokpos lab KIND DIR` and
// `python -m tokpos lab KIND DIR`.
//
// Naming rule of the files inside lab/KIND/ (one rule, here):
//   NAME.en.EXT / NAME.zh.EXT   written as NAME.EXT for the chosen language
//                               (each needs the other: lab_file_problems says so)
//   NAME.exercise.EXT           written as NAME.EXT instead of NAME.EXT when
//                               `exercise` is set (also NAME.exercise.en.EXT ...)
//   anything else               written as is
#pragma once

#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "frontend/lab_files.h"
#include "frontend/lang.h"

namespace tokpos::frontend {

// The kits there are ("c", "pytorch", ...), from the embedded files.
std::vector<std::string> lab_kinds();

// Writes kit `kind` into `dir` for `lang` (and its exercise variants when
// `exercise`), creating dir and its subdirectories, and returns the paths
// written (dir / relative path), sorted. Refuses (Error(kInvalidArgument)),
// writing nothing, an unknown kind (naming the kinds there are) and a dir
// that exists and is not an empty directory (naming it). All or nothing: a
// failure while writing removes the directories it created and leaves no file
// (tokpos::write_files_atomically).
std::vector<std::string> write_lab(std::string_view kind, const std::filesystem::path& dir, Lang lang,
                                   bool exercise);

// What the front ends print after write_lab, in `lang`: the files written
// (relative to dir) and the next command to run.
std::string lab_report(std::string_view kind, const std::filesystem::path& dir, Lang lang,
                       const std::vector<std::string>& written);

// The embedded files that break the naming rule: a NAME.en.EXT without its
// NAME.zh.EXT or the reverse, two language tags in one name. Empty when all
// is well (a test checks it).
std::vector<std::string> lab_file_problems();

// The same rule on any list of files (for the tests of the rule).
std::vector<std::string> lab_file_problems(std::span<const detail::LabFile> files);

// One file of a kit as write_lab writes it: its path in the kit (target) and
// the file of lab/ it comes from (source, KIND/...).
struct LabPlanItem {
  std::string target;
  std::string source;
};

// The naming rule: the files of `kind` among `files` that write_lab writes
// for `lang` and `exercise`, sorted by target.
std::vector<LabPlanItem> plan_lab(std::span<const detail::LabFile> files, std::string_view kind, Lang lang,
                                  bool exercise);

// Every embedded file's path (KIND/...), as in lab/.
std::vector<std::string> lab_file_paths();

}  // namespace tokpos::frontend
