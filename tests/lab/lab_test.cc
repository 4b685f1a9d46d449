// The lab kits: the naming rule (plan_lab), the language rule (default_lang),
// write_lab's refusals, `tokpos lab`, and the C kit built and run as a
// learner would (`make clean && make test`) with the baseline, a correct
// student.c, the typical wrong ones of tests/lab/solutions and the hostile
// ones (exit, an endless loop, a process left running, fake verdicts).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "../run_command.h"
#include "frontend/lab.h"
#include "tokpos/error.h"

namespace {

namespace fs = std::filesystem;
namespace fe = tokpos::frontend;

// A fresh directory under the system's temporary one, removed at the end.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "tokpos-lab-XXXXXX").string();
    path_ = mkdtemp(pattern.data());
  }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string quoted(const fs::path& p) { return "'" + p.string() + "'"; }

// Every file under dir, relative to it, sorted.
std::set<std::string> files_under(const fs::path& dir) {
  std::set<std::string> found;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) found.insert(fs::relative(e.path(), dir).string());
  }
  return found;
}

// The outcome of each [TEST n] line of verify's output: n -> passed.
// (No std::regex: GCC 12 warns inside it under the sanitizers, and warnings are errors.)
std::map<int, bool> outcomes(const std::string& out) {
  std::map<int, bool> result;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    if (!line.starts_with("[TEST ")) continue;
    const size_t close = line.find(']');
    const bool pass = line.ends_with(" ... [PASS]");
    if (close == std::string::npos || !(pass || line.ends_with(" ... [FAIL]"))) continue;
    result[std::stoi(line.substr(6, close - 6))] = pass;
  }
  return result;
}

// Every line of out that is exactly `line`.
size_t lines_equal_to(const std::string& out, const std::string& line) {
  size_t count = 0;
  std::istringstream lines(out);
  for (std::string l; std::getline(lines, l);) count += l == line;
  return count;
}

// Every line of out that starts with `prefix`.
size_t lines_starting_with(const std::string& out, const std::string& prefix) {
  size_t count = 0;
  std::istringstream lines(out);
  for (std::string l; std::getline(lines, l);) count += l.starts_with(prefix);
  return count;
}

// `tokpos lab c DIR --lang L`, then student.c replaced by `solution` (none:
// the baseline), then `make clean && make test` as the kit says, with `env`
// (assignments, e.g. VERIFY_TIMEOUT_SECONDS=2) in its environment. A run that
// hangs is killed after 60 s.
Result run_kit(const fs::path& dir, const std::string& lang, const std::optional<std::string>& solution,
               const std::string& env = "") {
  const Result wrote = run("lab c " + quoted(dir) + " --lang " + lang);
  EXPECT_EQ(wrote.status, 0) << wrote.out;
  if (solution) {
    fs::copy_file(fs::path(TOKPOS_LAB_SOLUTIONS) / (*solution + ".c"), dir / "framework" / "student.c",
                  fs::copy_options::overwrite_existing);
  }
  // As a learner types it: no make variables or jobserver inherited from a make running the suite.
  return run_shell("unset MAKEFLAGS MFLAGS MAKELEVEL VERIFY_TIMEOUT_SECONDS; cd " + quoted(dir) +
                   " && make clean && env " + env + " timeout -s KILL 60 make test");
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

const std::vector<std::string> kKit = {"Makefile",
                                       "TASK.md",
                                       "framework/messages.h",
                                       "framework/student.c",
                                       "framework/student.h",
                                       "framework/verify.c",
                                       "framework/verify.h"};

TEST(LabKitC, WritesTheTreeAndSaysWhatToRunNext) {
  TempDir tmp;
  const fs::path dir = tmp.path() / "lab";
  const Result r = run("lab c " + quoted(dir) + " --lang en");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(files_under(dir), std::set<std::string>(kKit.begin(), kKit.end()));
  for (const std::string& f : kKit) EXPECT_NE(r.out.find("  " + f + "\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("cd " + dir.string() + " && make clean && make test"), std::string::npos) << r.out;
  // student.h declares exactly the two functions of the lab.
  const std::string header = read(dir / "framework" / "student.h");
  EXPECT_NE(header.find("float student_pe_sinusoidal(int pos, int dim, int hidden_dim);"), std::string::npos);
  EXPECT_NE(header.find("int student_embedding_forward(const int *token_ids, int seq_len,"), std::string::npos);
}

TEST(LabKitC, BaselineFailsAllFourTests) {
  TempDir tmp;
  const Result r = run_kit(tmp.path() / "lab", "en", std::nullopt);
  EXPECT_NE(r.status, 0) << r.out;
  EXPECT_EQ(outcomes(r.out), (std::map<int, bool>{{1, false}, {2, false}, {3, false}, {4, false}})) << r.out;
  EXPECT_EQ(r.out.find("All tests passed!"), std::string::npos) << r.out;
  // The baseline writes nothing: the FAIL says so, with the value expected
  // there (token 3's row plus the baseline's PE) and the one verify put
  // there, and points at the main loop.
  EXPECT_NE(r.out.find("    output[0 * 16 + 0] was not written: expected 0.5 (token row 0.5 + PE 0), got -12345, the "
                       "value verify put there\n    look at: student_embedding_forward: its main loop"),
            std::string::npos)
      << r.out;
}

TEST(LabKitC, CorrectSolutionPassesAllFourTestsInBothLanguages) {
  for (const char* lang : {"en", "zh"}) {
    TempDir tmp;
    const Result r = run_kit(tmp.path() / "lab", lang, "correct");
    EXPECT_EQ(r.status, 0) << r.out;
    EXPECT_EQ(outcomes(r.out), (std::map<int, bool>{{1, true}, {2, true}, {3, true}, {4, true}})) << r.out;
    EXPECT_EQ(lines_equal_to(r.out, "All tests passed!"), 1u) << r.out;
  }
}

// Each typical mistake fails the tests the troubleshooting table points to,
// and no other; verify names the first wrong value and where to look.
struct Mistake {
  std::string solution;
  std::set<int> failing;
  std::vector<std::string> said;  // what the output must contain
};

void PrintTo(const Mistake& m, std::ostream* os) { *os << m.solution; }

class LabKitCMistake : public ::testing::TestWithParam<Mistake> {};

TEST_P(LabKitCMistake, FailsOnlyTheTestsTheTablePointsTo) {
  const Mistake& m = GetParam();
  TempDir tmp;
  const Result r = run_kit(tmp.path() / "lab", "en", m.solution);
  EXPECT_NE(r.status, 0) << r.out;
  std::map<int, bool> expected;
  for (int n = 1; n <= 4; ++n) expected[n] = !m.failing.contains(n);
  EXPECT_EQ(outcomes(r.out), expected) << r.out;
  for (const std::string& s : m.said) EXPECT_NE(r.out.find(s), std::string::npos) << s << "\n" << r.out;
}

INSTANTIATE_TEST_SUITE_P(
    Typical, LabKitCMistake,
    ::testing::Values(
        Mistake{"sin_cos_swapped",
                {1, 2},
                {"student_pe_sinusoidal(0, 0, 8): expected 0, got 1", "look at: student_pe_sinusoidal"}},
        Mistake{"exponent_unpaired", {2}, {"student_pe_sinusoidal(1, 1, 64): expected 0.5403023"}},
        Mistake{"exponent_half", {2}, {"student_pe_sinusoidal(1, 2, 64): expected 0.6815614"}},
        Mistake{"no_position", {3}, {"look at: student_embedding_forward: add student_pe_sinusoidal"}},
        Mistake{"no_unk", {4}, {"for id -1 (unk_id 1)", "look at: student_embedding_forward: read row"}},
        Mistake{"forward_segfault", {3, 4}, {"stopped by signal SIGSEGV"}}),
    [](const auto& param_info) { return param_info.param.solution; });

// A student.c that exits, hangs, leaves a process running or prints verify's
// own lines: the tests it touches fail, make test fails, what it printed
// shows only after "    | ", and the run ends soon after the deadline.
struct Hostile {
  std::string name;
  std::string solution;
  std::string lang;
  std::string env;  // for make test
  std::set<int> failing;
  std::vector<std::string> said;  // what the output must contain
  double max_seconds;             // the whole run, kit writing and compiling included
};

void PrintTo(const Hostile& h, std::ostream* os) { *os << h.name; }

class LabKitCHostile : public ::testing::TestWithParam<Hostile> {};

TEST_P(LabKitCHostile, FailsAndEndsInTime) {
  const Hostile& h = GetParam();
  TempDir tmp;
  const auto start = std::chrono::steady_clock::now();
  const Result r = run_kit(tmp.path() / "lab", h.lang, h.solution, h.env);
  const double took = seconds_since(start);
  EXPECT_NE(r.status, 0) << r.out;
  std::map<int, bool> expected;
  for (int n = 1; n <= 4; ++n) expected[n] = !h.failing.contains(n);
  EXPECT_EQ(outcomes(r.out), expected) << r.out;
  // verify's four verdicts and its summary, and no other line that looks like one.
  EXPECT_EQ(lines_starting_with(r.out, "[TEST "), 4u) << r.out;
  EXPECT_EQ(lines_equal_to(r.out, "All tests passed!"), 0u) << r.out;
  for (const std::string& s : h.said) EXPECT_NE(r.out.find(s), std::string::npos) << s << "\n" << r.out;
  EXPECT_LT(took, h.max_seconds) << r.out;
}

const std::string kExitedEn = "the test's process ended with exit status 0 before the test finished";
const std::string kExitedZh = "测试进程在测试完成之前就结束了（退出状态 0）";

INSTANTIATE_TEST_SUITE_P(
    Hostile, LabKitCHostile,
    ::testing::Values(
        Hostile{"pe_exit_zero", "pe_exit_zero", "en", "", {1, 2, 3, 4}, {kExitedEn}, 20},
        Hostile{"forward_underscore_exit", "forward_underscore_exit", "en", "", {3, 4},
                {kExitedEn, "call exit() or _exit()?\n    look at: student_embedding_forward"}, 20},
        Hostile{"forward_underscore_exit_zh", "forward_underscore_exit", "zh", "", {3, 4}, {kExitedZh}, 20},
        // Ignores SIGALRM and loops in TEST 3 only: a 2 s deadline, the one cost of this run.
        Hostile{"alarm_ignored_loop", "alarm_ignored_loop", "en", "VERIFY_TIMEOUT_SECONDS=2", {3},
                {"the test did not finish within 2 s"}, 14},
        Hostile{"alarm_ignored_loop_zh", "alarm_ignored_loop", "zh", "VERIFY_TIMEOUT_SECONDS=2", {3},
                {"测试在 2 秒内没有结束"}, 14},
        // The forked process sleeps 60 s holding verify's pipes; verify needs no deadline to see it.
        Hostile{"fork_left_running", "fork_left_running", "en", "", {3, 4},
                {"the student code started a process (fork?) that was still running when the test ended"}, 20},
        Hostile{"fork_left_running_zh", "fork_left_running", "zh", "", {3, 4},
                {"学生代码启动的进程（fork？）在测试结束时仍在运行"}, 20},
        Hostile{"fake_verdicts", "fake_verdicts", "en", "", {1, 2, 3, 4},
                {"[TEST 1] PE(0, d) is 0 at every even d and 1 at every odd d (hidden_dim 8, 64, 512) ... [FAIL]\n"
                 "    student_pe_sinusoidal(0, 1, 8): expected 1, got 0\n"
                 "    look at: student_pe_sinusoidal: at pos 0 every even dim is sin(0) = 0 and every odd dim cos(0) = "
                 "1\n"
                 "    what the student code printed during this test:\n"
                 "    | debug: student_pe_sinusoidal was called\n"
                 "    | [TEST 1] fake ... [PASS]\n"
                 "    | [TEST 2] fake ... [PASS]\n"
                 "    | [TEST 3] fake ... [PASS]\n"
                 "    | ?[TEST 4] fake ... [PASS]\n"
                 "    | All tests passed!\n"
                 "[TEST 2] ",
                 "4 of 4 tests failed"},
                20},
        Hostile{"fake_verdicts_zh", "fake_verdicts", "zh", "", {1, 2, 3, 4},
                {"    学生代码在这个测试中打印的内容：\n    | debug: student_pe_sinusoidal was called\n",
                 "4 个测试中有 4 个失败"},
                20}),
    [](const auto& param_info) { return param_info.param.name; });

// Without VERIFY_TIMEOUT_SECONDS (as a learner runs it) a test has 10 s,
// whatever the student code does with SIGALRM.
TEST(LabKitC, TheDeadlineIsTenSecondsByDefault) {
  TempDir tmp;
  const auto start = std::chrono::steady_clock::now();
  const Result r = run_kit(tmp.path() / "lab", "en", "alarm_ignored_loop");
  const double took = seconds_since(start);
  EXPECT_NE(r.status, 0) << r.out;
  EXPECT_EQ(outcomes(r.out), (std::map<int, bool>{{1, true}, {2, true}, {3, false}, {4, true}})) << r.out;
  EXPECT_NE(r.out.find("the test did not finish within 10 s"), std::string::npos) << r.out;
  EXPECT_GE(took, 10.0) << r.out;
  EXPECT_LT(took, 22.0) << r.out;
}

TEST(LabKitC, ChineseAndEnglishDifferInTextOnly) {
  TempDir tmp;
  const Result en = run_kit(tmp.path() / "en", "en", std::nullopt);
  const Result zh = run_kit(tmp.path() / "zh", "zh", std::nullopt);
  EXPECT_EQ(outcomes(en.out), outcomes(zh.out)) << en.out << zh.out;
  EXPECT_EQ(outcomes(zh.out).size(), 4u) << zh.out;
  // The numbers of the first wrong value are the same bytes in both.
  EXPECT_NE(en.out.find("student_pe_sinusoidal(0, 1, 8): expected 1, got 0"), std::string::npos) << en.out;
  EXPECT_NE(zh.out.find("student_pe_sinusoidal(0, 1, 8)：期望 1，得到 0"), std::string::npos) << zh.out;
  EXPECT_NE(en.out.find("output[0 * 16 + 0] was not written: expected 0.5 (token row 0.5 + PE 0), got -12345"),
            std::string::npos)
      << en.out;
  EXPECT_NE(zh.out.find("output[0 * 16 + 0] 没有被写入：期望 0.5（token 行 0.5 + PE 0），得到 -12345"),
            std::string::npos)
      << zh.out;
  EXPECT_NE(en.out.find("4 of 4 tests failed"), std::string::npos) << en.out;
  EXPECT_NE(zh.out.find("4 个测试中有 4 个失败"), std::string::npos) << zh.out;
  EXPECT_NE(zh.out.find("优先检查"), std::string::npos) << zh.out;
  EXPECT_EQ(en.out.find("优先检查"), std::string::npos) << en.out;
  const std::string task_en = read(tmp.path() / "en" / "TASK.md");
  const std::string task_zh = read(tmp.path() / "zh" / "TASK.md");
  EXPECT_NE(task_en.find("## When a test fails"), std::string::npos);
  EXPECT_NE(task_zh.find("## 测试失败时"), std::string::npos);
  EXPECT_NE(task_zh.find("## 思考题"), std::string::npos);
  EXPECT_NE(read(tmp.path() / "zh" / "framework" / "student.c").find("需要写的内容"), std::string::npos);
  EXPECT_NE(read(tmp.path() / "en" / "framework" / "student.c").find("What to write"), std::string::npos);
  // The same verify.c in both; only messages.h differs.
  EXPECT_EQ(read(tmp.path() / "en" / "framework" / "verify.c"), read(tmp.path() / "zh" / "framework" / "verify.c"));
}

TEST(LabKitC, WithoutLangTheEnvironmentDecides) {
  TempDir tmp;
  const Result zh = run_shell("LC_ALL= LC_MESSAGES= LANG=zh_CN.UTF-8 " + std::string(TOKPOS_CLI) + " lab c " +
                              quoted(tmp.path() / "zh"));
  ASSERT_EQ(zh.status, 0) << zh.out;
  EXPECT_NE(zh.out.find("下一步"), std::string::npos) << zh.out;
  EXPECT_NE(read(tmp.path() / "zh" / "TASK.md").find("## 思考题"), std::string::npos);
  const Result en = run_shell("LC_ALL=C LANG=zh_CN.UTF-8 " + std::string(TOKPOS_CLI) + " lab c " +
                              quoted(tmp.path() / "en"));
  ASSERT_EQ(en.status, 0) << en.out;
  EXPECT_NE(en.out.find("Next:"), std::string::npos) << en.out;
  EXPECT_NE(read(tmp.path() / "en" / "TASK.md").find("## Questions to think about"), std::string::npos);
}

TEST(LabWrite, RefusesADirectoryThatIsNotEmptyAndWritesNothing) {
  TempDir tmp;
  const fs::path dir = tmp.path() / "taken";
  fs::create_directory(dir);
  std::ofstream(dir / "notes.txt") << "mine";
  try {
    fe::write_lab("c", dir, fe::Lang::kEn, false);
    FAIL() << "a non-empty directory was accepted";
  } catch (const tokpos::Error& e) {
    EXPECT_EQ(e.status(), tokpos::Status::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("'" + dir.string() + "' exists and is not empty"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(files_under(dir), std::set<std::string>{"notes.txt"});
  EXPECT_EQ(read(dir / "notes.txt"), "mine");
  // The CLI says the same and exits with 1.
  const Result r = run("lab c " + quoted(dir) + " --lang en");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("tokpos: error: write_lab: directory"), std::string::npos) << r.out;
  EXPECT_EQ(files_under(dir), std::set<std::string>{"notes.txt"});
  // A file where the directory would go is refused too.
  EXPECT_THROW(fe::write_lab("c", dir / "notes.txt", fe::Lang::kEn, false), tokpos::Error);
  EXPECT_EQ(read(dir / "notes.txt"), "mine");
  // A directory the OS will not create (its parent is a file): IO_ERROR, nothing left behind.
  try {
    fe::write_lab("c", dir / "notes.txt" / "kit", fe::Lang::kEn, false);
    FAIL() << "a directory under a file was accepted";
  } catch (const tokpos::Error& e) {
    EXPECT_EQ(e.status(), tokpos::Status::kIoError) << e.what();
    EXPECT_NE(std::string(e.what()).find("write_lab: cannot create directory"), std::string::npos) << e.what();
  }
  EXPECT_EQ(files_under(dir), std::set<std::string>{"notes.txt"});
  EXPECT_EQ(read(dir / "notes.txt"), "mine");
}

TEST(LabWrite, AnEmptyOrMissingDirectoryIsFilledAndParentsAreCreated) {
  TempDir tmp;
  const std::vector<std::string> in_empty = fe::write_lab("c", tmp.path(), fe::Lang::kZh, false);
  EXPECT_EQ(in_empty.size(), kKit.size());
  const fs::path deep = tmp.path() / "framework" / "a" / "b";  // under the kit just written: a parent is missing
  const std::vector<std::string> in_deep = fe::write_lab("c", deep, fe::Lang::kEn, false);
  ASSERT_EQ(in_deep.size(), kKit.size());
  for (size_t k = 0; k < kKit.size(); ++k) EXPECT_EQ(in_deep[k], (deep / kKit[k]).string());
}

TEST(LabWrite, RefusesAnUnknownKindAndLanguage) {
  TempDir tmp;
  try {
    fe::write_lab("fortran", tmp.path() / "x", fe::Lang::kEn, false);
    FAIL();
  } catch (const tokpos::Error& e) {
    EXPECT_NE(std::string(e.what()).find("no kit named 'fortran' (the kits: c"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(tmp.path() / "x"));
  try {
    (void)fe::parse_lang("fr");
    FAIL();
  } catch (const tokpos::Error& e) {
    EXPECT_NE(std::string(e.what()).find("'fr' is not one of en, zh"), std::string::npos) << e.what();
  }
  const Result r = run("lab c " + quoted(tmp.path() / "y") + " --lang fr");
  EXPECT_NE(r.status, 0);
  EXPECT_FALSE(fs::exists(tmp.path() / "y"));
}

// Sets the three variables for one check and restores them afterwards.
class LangEnv {
 public:
  LangEnv(const char* lc_all, const char* lc_messages, const char* lang) {
    set("LC_ALL", lc_all);
    set("LC_MESSAGES", lc_messages);
    set("LANG", lang);
  }
  ~LangEnv() {
    for (const auto& [name, value] : saved_) {
      if (value) {
        setenv(name.c_str(), value->c_str(), 1);
      } else {
        unsetenv(name.c_str());
      }
    }
  }

 private:
  void set(const char* name, const char* value) {
    const char* old = getenv(name);
    saved_.emplace_back(name, old ? std::optional<std::string>(old) : std::nullopt);
    if (value) {
      setenv(name, value, 1);
    } else {
      unsetenv(name);
    }
  }
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

TEST(LabLang, TheFirstSetVariableDecides) {
  struct Case {
    const char* lc_all;
    const char* lc_messages;
    const char* lang;
    fe::Lang expected;
  };
  const Case cases[] = {
      {nullptr, nullptr, nullptr, fe::Lang::kEn},
      {nullptr, nullptr, "zh_CN.UTF-8", fe::Lang::kZh},
      {nullptr, nullptr, "zh_TW", fe::Lang::kZh},
      {nullptr, nullptr, "en_US.UTF-8", fe::Lang::kEn},
      {"zh_CN.UTF-8", "en_US.UTF-8", "en_US.UTF-8", fe::Lang::kZh},
      {"C", nullptr, "zh_CN.UTF-8", fe::Lang::kEn},
      {"", "zh_CN.UTF-8", "en_US.UTF-8", fe::Lang::kZh},  // an empty one is not "set"
      {"", "", "zh_HK", fe::Lang::kZh},
      {nullptr, "en_GB", "zh_CN", fe::Lang::kEn},
      {nullptr, nullptr, "fr_FR.UTF-8", fe::Lang::kEn},
  };
  for (const Case& c : cases) {
    LangEnv env(c.lc_all, c.lc_messages, c.lang);
    EXPECT_EQ(fe::default_lang(), c.expected)
        << "LC_ALL=" << (c.lc_all ? c.lc_all : "(unset)") << " LC_MESSAGES=" << (c.lc_messages ? c.lc_messages : "(unset)")
        << " LANG=" << (c.lang ? c.lang : "(unset)");
  }
}

// The naming rule on a made-up kit.
TEST(LabFiles, TheNamingRuleChoosesByLanguageAndExercise) {
  const fe::detail::LabFile files[] = {
      {"k/README.en.md", "e"},           {"k/README.zh.md", "z"},
      {"k/main.py", "m"},                {"k/main.exercise.py", "x"},
      {"k/tests/t.en.py", "te"},         {"k/tests/t.zh.py", "tz"},
      {"k/tests/t.exercise.en.py", "xe"}, {"k/tests/t.exercise.zh.py", "xz"},
      {"k/Makefile", "mk"},              {"other/a.txt", "a"},
  };
  auto plan = [&](fe::Lang lang, bool exercise) {
    std::map<std::string, std::string> m;
    for (const fe::LabPlanItem& i : fe::plan_lab(files, "k", lang, exercise)) m[i.target] = i.source;
    return m;
  };
  using M = std::map<std::string, std::string>;
  EXPECT_EQ(plan(fe::Lang::kEn, false), (M{{"Makefile", "k/Makefile"},
                                           {"README.md", "k/README.en.md"},
                                           {"main.py", "k/main.py"},
                                           {"tests/t.py", "k/tests/t.en.py"}}));
  EXPECT_EQ(plan(fe::Lang::kZh, true), (M{{"Makefile", "k/Makefile"},
                                          {"README.md", "k/README.zh.md"},
                                          {"main.py", "k/main.exercise.py"},
                                          {"tests/t.py", "k/tests/t.exercise.zh.py"}}));
  EXPECT_TRUE(fe::lab_file_problems(files).empty());
  const fe::detail::LabFile broken[] = {{"k/TASK.en.md", ""}, {"k/b.zh.c", ""}, {"k/c.en.zh.h", ""}};
  const std::vector<std::string> problems = fe::lab_file_problems(broken);
  EXPECT_EQ(problems, (std::vector<std::string>{"k/TASK.en.md has no k/TASK.zh.md", "k/b.zh.c has no k/b.en.c",
                                                "k/c.en.zh.h has two language tags"}));
}

// Every NAME.en.EXT of lab/ has its NAME.zh.EXT and the reverse.
TEST(LabFiles, EveryLanguageFileHasItsPair) {
  const std::vector<std::string> paths = fe::lab_file_paths();
  EXPECT_FALSE(paths.empty());
  EXPECT_EQ(fe::lab_file_problems(), std::vector<std::string>{});
}

// `tokpos lab pytorch` writes whatever lab/pytorch holds, by the rule.
TEST(LabKitPytorch, WritesEveryFileOfTheKitByTheRule) {
  const std::vector<std::string> kinds = fe::lab_kinds();
  if (std::find(kinds.begin(), kinds.end(), "pytorch") == kinds.end()) GTEST_SKIP() << "this tree has no lab/pytorch";
  std::vector<fe::detail::LabFile> all;
  for (size_t k = 0; k < fe::detail::kLabFileCount; ++k) all.push_back(fe::detail::kLabFiles[k]);
  for (bool exercise : {false, true}) {
    TempDir tmp;
    const fs::path dir = tmp.path() / "lesson";
    const Result r = run("lab pytorch " + quoted(dir) + " --lang zh" + (exercise ? " --exercise" : ""));
    ASSERT_EQ(r.status, 0) << r.out;
    std::set<std::string> expected;
    for (const fe::LabPlanItem& i : fe::plan_lab(all, "pytorch", fe::Lang::kZh, exercise)) {
      expected.insert(i.target);
      for (const fe::detail::LabFile& f : all) {
        if (f.path == i.source) {
          EXPECT_EQ(read(dir / i.target), std::string(f.bytes)) << i.target;
        }
      }
    }
    EXPECT_EQ(files_under(dir), expected);
    EXPECT_NE(r.out.find("&& python main.py && python -m pytest tests"), std::string::npos) << r.out;
  }
}

}  // namespace
