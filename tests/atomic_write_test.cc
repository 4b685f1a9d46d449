// The one mechanism behind every file tokpos writes (write_npy,
// write_safetensors, save_checkpoint, tokpos::write_file_atomically and the
// plot pictures): what it refuses to replace, how it follows symbolic links,
// the temporary file nobody can plant, concurrent writers, and file modes.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "io/atomic_file.h"
#include "tokpos/files.h"
#include "tokpos/npy.h"
#include "tokpos/error.h"

namespace {

namespace fs = std::filesystem;

// A fresh directory per test and process, so parallel test runs never meet.
std::string fresh_dir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "tokpos_aw_" + name + "_" + std::to_string(::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void write(const std::string& path, const std::string& text) {
  tokpos::write_file_atomically(path, std::as_bytes(std::span(text.data(), text.size())), "test");
}

// The status and message of the tokpos::Error that f throws (kOk and "" if none).
template <class F>
tokpos::Status status_of(F&& f, std::string* what) {
  try {
    f();
  } catch (const tokpos::Error& e) {
    *what = e.what();
    return e.status();
  }
  *what = "";
  return tokpos::Status::kOk;
}

std::vector<std::string> entries(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

mode_t mode_of(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
  return st.st_mode;
}

// Sets the umask for one scope and restores it after.
struct ScopedUmask {
  explicit ScopedUmask(mode_t m) : old(::umask(m)) {}
  ~ScopedUmask() { ::umask(old); }
  mode_t old;
};

TEST(AtomicWrite, RefusesFifosAndDirectoriesAndLeavesThemAlone) {
  const std::string dir = fresh_dir("fifo");
  const std::string fifo = dir + "/pipe";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0) << std::strerror(errno);
  std::string what;
  EXPECT_EQ(status_of([&] { write(fifo, "data"); }, &what), tokpos::Status::kIoError);
  EXPECT_NE(what.find("cannot write " + fifo + ": it is a FIFO, not a regular file"), std::string::npos) << what;
  EXPECT_TRUE(S_ISFIFO(mode_of(fifo)));
  const std::vector<float> v = {1, 2};
  EXPECT_EQ(status_of([&] { tokpos::write_npy(fifo, "<f4", {2}, v.data(), 8); }, &what), tokpos::Status::kIoError);
  EXPECT_NE(what.find("write_npy: cannot write " + fifo), std::string::npos) << what;
  EXPECT_TRUE(S_ISFIFO(mode_of(fifo)));
  // A directory is refused before anything is written.
  const std::string sub = dir + "/sub";
  fs::create_directories(sub);
  EXPECT_EQ(status_of([&] { write(sub, "data"); }, &what), tokpos::Status::kIoError);
  EXPECT_NE(what.find("cannot write " + sub + ": it is a directory, not a regular file"), std::string::npos) << what;
  EXPECT_TRUE(S_ISDIR(mode_of(sub)));
  EXPECT_EQ(status_of([&] { write(dir + "/", "data"); }, &what), tokpos::Status::kIoError);
  EXPECT_NE(what.find("directory"), std::string::npos) << what;
  EXPECT_EQ(entries(dir), (std::vector<std::string>{"pipe", "sub"})) << "a temporary file was left behind";
}

TEST(AtomicWrite, RefusesCharacterDevices) {
  if (::geteuid() != 0) GTEST_SKIP() << "creating a character device (mknod) needs root";
  const std::string dir = fresh_dir("device");
  const std::string null = dir + "/mynull";
  ASSERT_EQ(::mknod(null.c_str(), S_IFCHR | 0666, makedev(1, 3)), 0) << std::strerror(errno);
  std::string what;
  EXPECT_EQ(status_of([&] { write(null, "data"); }, &what), tokpos::Status::kIoError);
  EXPECT_NE(what.find("cannot write " + null + ": it is a character device, not a regular file"), std::string::npos)
      << what;
  EXPECT_TRUE(S_ISCHR(mode_of(null)));
  EXPECT_EQ(entries(dir), (std::vector<std::string>{"mynull"}));
}

// A link (or a chain of them) is followed: the file it points to is replaced
// in that file's own directory, and the links stay links.
TEST(AtomicWrite, SymlinksReplaceTheFileTheyPointTo) {
  const std::string dir = fresh_dir("symlink");
  fs::create_directories(dir + "/a");
  fs::create_directories(dir + "/b");
  const std::string real = dir + "/a/real.bin";
  write(real, "old");
  ASSERT_EQ(::chmod(real.c_str(), 0640), 0);
  fs::create_symlink("../a/real.bin", dir + "/b/link.bin");  // relative to the link's directory
  fs::create_symlink(dir + "/b/link.bin", dir + "/chain.bin");
  write(dir + "/chain.bin", "new through two links");
  EXPECT_TRUE(fs::is_symlink(fs::symlink_status(dir + "/chain.bin")));
  EXPECT_TRUE(fs::is_symlink(fs::symlink_status(dir + "/b/link.bin")));
  EXPECT_EQ(slurp(real), "new through two links");
  EXPECT_EQ(mode_of(real) & 07777, 0640u);
  write(dir + "/b/link.bin", "new through one link");
  EXPECT_EQ(slurp(real), "new through one link");
  EXPECT_EQ(entries(dir + "/a"), (std::vector<std::string>{"real.bin"})) << "a temporary file was left behind";
  EXPECT_EQ(entries(dir + "/b"), (std::vector<std::string>{"link.bin"}));
  EXPECT_EQ(entries(dir), (std::vector<std::string>{"a", "b", "chain.bin"}));
}

TEST(AtomicWrite, DanglingSymlinksAndLinksToOtherKindsAreRefused) {
  const std::string dir = fresh_dir("dangling");
  const std::string link = dir + "/dangling.npy";
  fs::create_symlink(dir + "/missing.npy", link);
  std::string what;
  const std::vector<float> v = {1, 2};
  EXPECT_EQ(status_of([&] { tokpos::write_npy(link, "<f4", {2}, v.data(), 8); }, &what), tokpos::Status::kIoError);
  EXPECT_NE(what.find("cannot write " + link + ": it is a symbolic link to " + dir + "/missing.npy"),
            std::string::npos)
      << what;
  EXPECT_NE(what.find("does not exist"), std::string::npos) << what;
  EXPECT_TRUE(fs::is_symlink(fs::symlink_status(link)));
  EXPECT_FALSE(fs::exists(dir + "/missing.npy"));
  // A link to a FIFO or a directory: refused like the thing itself, naming both.
  const std::string fifo = dir + "/pipe";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  fs::create_symlink(fifo, dir + "/to_pipe");
  EXPECT_EQ(status_of([&] { write(dir + "/to_pipe", "x"); }, &what), tokpos::Status::kIoError);
  EXPECT_NE(what.find("cannot write " + dir + "/to_pipe: it is a symbolic link to " + fifo + ", a FIFO"),
            std::string::npos)
      << what;
  fs::create_symlink(dir, dir + "/to_dir");
  EXPECT_EQ(status_of([&] { write(dir + "/to_dir", "x"); }, &what), tokpos::Status::kIoError);
  EXPECT_NE(what.find("a directory, not a regular file"), std::string::npos) << what;
  EXPECT_TRUE(S_ISFIFO(mode_of(fifo)));
  EXPECT_EQ(entries(dir), (std::vector<std::string>{"dangling.npy", "pipe", "to_dir", "to_pipe"}));
}

// The temporary file's name cannot be guessed, and it is created afresh
// (O_EXCL, never through a link): a link planted where the old, predictable
// name went (OUT.tmp.<pid>) is not followed, and the file it points to is not
// touched.
TEST(AtomicWrite, APlantedTemporaryNameIsNotFollowed) {
  const std::string dir = fresh_dir("plant");
  const std::string victim = dir + "/victim.txt";
  std::ofstream(victim) << "precious";
  const std::string out = dir + "/plant.npy";
  const std::string planted = out + ".tmp." + std::to_string(::getpid());
  fs::create_symlink(victim, planted);
  const std::vector<float> v = {1, 2, 3};
  tokpos::write_npy(out, "<f4", {3}, v.data(), 12);
  EXPECT_EQ(slurp(victim), "precious");
  EXPECT_EQ(tokpos::read_npy(out).shape, (std::vector<int64_t>{3}));
  EXPECT_TRUE(fs::is_symlink(fs::symlink_status(planted)));
  EXPECT_EQ(entries(dir).size(), 3u) << "a temporary file was left behind";
}

// Many threads writing one path: every write succeeds, the last rename wins,
// and the file is always exactly one complete version.
TEST(AtomicWrite, ConcurrentWritersToOnePathAllSucceed) {
  const std::string dir = fresh_dir("concurrent");
  const std::string path = dir + "/shared.bin";
  constexpr int kThreads = 8, kWrites = 20;
  auto version = [](int t, int i) {
    // Distinct lengths and contents, so a mix of two versions is no version.
    std::string s = "thread " + std::to_string(t) + " write " + std::to_string(i) + "\n";
    s.resize(4096 + 97 * t + 13 * i, static_cast<char>('a' + (t * kWrites + i) % 26));
    return s;
  };
  std::set<std::string> versions;
  for (int t = 0; t < kThreads; ++t)
    for (int i = 0; i < kWrites; ++i) versions.insert(version(t, i));
  std::atomic<int> failures{0};
  std::vector<std::string> messages(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < kWrites; ++i) {
        try {
          write(path, version(t, i));
        } catch (const tokpos::Error& e) {
          ++failures;
          messages[t] = e.what();
        }
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0) << [&] {
    std::string all;
    for (const auto& m : messages) all += m + "\n";
    return all;
  }();
  EXPECT_EQ(versions.count(slurp(path)), 1u) << "the file is not one complete version";
  EXPECT_EQ(entries(dir), (std::vector<std::string>{"shared.bin"})) << "a temporary file was left behind";
}

// Replacing a file keeps its permission bits, whatever the umask.
TEST(AtomicWrite, OverwritingKeepsTheFilesMode) {
  const std::string dir = fresh_dir("keepmode");
  const ScopedUmask mask(022);
  const std::string path = dir + "/f.bin";
  for (mode_t m : {0600u, 0640u, 0755u, 0444u, 0666u}) {
    write(path, "first");
    ASSERT_EQ(::chmod(path.c_str(), m), 0);
    write(path, "second");
    EXPECT_EQ(mode_of(path) & 07777, m) << std::oct << m;
    EXPECT_EQ(slurp(path), "second");
    const std::vector<float> v = {1, 2};
    tokpos::write_npy(path, "<f4", {2}, v.data(), 8);
    EXPECT_EQ(mode_of(path) & 07777, m) << std::oct << m;
  }
  EXPECT_EQ(entries(dir), (std::vector<std::string>{"f.bin"}));
}

// A new file gets 0666 masked by the umask, as open(2) and fopen would give it.
TEST(AtomicWrite, NewFilesGet0666MaskedByTheUmask) {
  const std::string dir = fresh_dir("newmode");
  int n = 0;
  for (mode_t mask : {000u, 002u, 022u, 027u, 077u}) {
    const ScopedUmask scoped(mask);
    const std::string path = dir + "/new" + std::to_string(n++) + ".bin";
    write(path, "fresh");
    EXPECT_EQ(mode_of(path) & 07777, 0666u & ~mask) << "umask " << std::oct << mask;
    EXPECT_TRUE(S_ISREG(mode_of(path)));
  }
}

// A write that fails half-way removes its temporary file and keeps the old
// file and its mode; so does one that fails before writing anything.
TEST(AtomicWrite, FailedWritesLeaveNoTemporaryFile) {
  const std::string dir = fresh_dir("failed");
  const std::string path = dir + "/keep.bin";
  write(path, "the old version");
  ASSERT_EQ(::chmod(path.c_str(), 0600), 0);
  tokpos::detail::inject_write_failure_for_testing(4);
  std::string what;
  EXPECT_EQ(status_of([&] { write(path, "the new version"); }, &what), tokpos::Status::kIoError);
  tokpos::detail::inject_write_failure_for_testing(-1);
  EXPECT_NE(what.find("cannot write " + path + ": " + std::strerror(EIO)), std::string::npos) << what;
  EXPECT_EQ(slurp(path), "the old version");
  EXPECT_EQ(mode_of(path) & 07777, 0600u);
  EXPECT_EQ(entries(dir), (std::vector<std::string>{"keep.bin"}));
  // A directory that does not exist: the message names the path and errno's text.
  EXPECT_EQ(status_of([&] { write(dir + "/no/such.bin", "x"); }, &what), tokpos::Status::kIoError);
  EXPECT_NE(what.find("cannot write " + dir + "/no/such.bin"), std::string::npos) << what;
  EXPECT_NE(what.find(std::strerror(ENOENT)), std::string::npos) << what;
  EXPECT_EQ(status_of([&] { write("", "x"); }, &what), tokpos::Status::kIoError);
  EXPECT_NE(what.find("cannot write ''"), std::string::npos) << what;
}

// Several files at once (tokpos plot's pictures): a path in the way or a
// write that fails part-way, at the last file, leaves every file as it was
// and no temporary; when all succeed, all are replaced.
TEST(AtomicWrite, SeveralFilesAreAllOrNothing) {
  const std::string dir = fresh_dir("batch");
  const std::vector<std::string> names = {"a.bin", "b.bin", "c.bin"};
  for (const auto& n : names) write(dir + "/" + n, "old " + n);
  const std::string small = "new", big(1000, 'x');
  auto batch = [&](const std::string& last) {
    const std::vector<tokpos::FileBytes> files = {
        {dir + "/a.bin", std::as_bytes(std::span(small.data(), small.size()))},
        {dir + "/b.bin", std::as_bytes(std::span(small.data(), small.size()))},
        {last, std::as_bytes(std::span(big.data(), big.size()))}};
    tokpos::write_files_atomically(files, "test");
  };
  auto unchanged = [&] {
    for (const auto& n : names) EXPECT_EQ(slurp(dir + "/" + n), "old " + n) << n;
  };
  std::string what;
  // The last file fails half-way (a full disk): the first two stay old.
  tokpos::detail::inject_write_failure_for_testing(100);
  EXPECT_EQ(status_of([&] { batch(dir + "/c.bin"); }, &what), tokpos::Status::kIoError);
  tokpos::detail::inject_write_failure_for_testing(-1);
  EXPECT_NE(what.find("cannot write " + dir + "/c.bin: " + std::strerror(EIO)), std::string::npos) << what;
  unchanged();
  EXPECT_EQ(entries(dir), names);
  // A FIFO, a dangling link, a directory where the last file goes: refused before anything is written.
  const std::string fifo = dir + "/fifo", dangling = dir + "/dangling", sub = dir + "/sub";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0) << std::strerror(errno);
  fs::create_symlink("gone", dangling);
  fs::create_directory(sub);
  for (const std::string& last : {fifo, dangling, sub}) {
    EXPECT_EQ(status_of([&] { batch(last); }, &what), tokpos::Status::kIoError) << last;
    EXPECT_NE(what.find("cannot write " + last + ": "), std::string::npos) << what;
    unchanged();
  }
  EXPECT_TRUE(fs::is_fifo(fs::symlink_status(fifo)));
  EXPECT_TRUE(fs::is_symlink(fs::symlink_status(dangling)));
  EXPECT_EQ(entries(dir), (std::vector<std::string>{"a.bin", "b.bin", "c.bin", "dangling", "fifo", "sub"}));
  // check_file_writable says the same without writing anything.
  EXPECT_EQ(status_of([&] { tokpos::check_file_writable(fifo, "test"); }, &what), tokpos::Status::kIoError);
  EXPECT_NE(what.find("cannot write " + fifo + ": it is a FIFO"), std::string::npos) << what;
  EXPECT_EQ(status_of([&] { tokpos::check_file_writable(dir + "/a.bin", "test"); }, &what), tokpos::Status::kOk);
  EXPECT_EQ(status_of([&] { tokpos::check_file_writable(dir + "/new.bin", "test"); }, &what), tokpos::Status::kOk);
  // All well: every file is replaced.
  batch(dir + "/c.bin");
  EXPECT_EQ(slurp(dir + "/a.bin"), small);
  EXPECT_EQ(slurp(dir + "/b.bin"), small);
  EXPECT_EQ(slurp(dir + "/c.bin"), big);
  EXPECT_EQ(entries(dir), (std::vector<std::string>{"a.bin", "b.bin", "c.bin", "dangling", "fifo", "sub"}));
}

}  // namespace
