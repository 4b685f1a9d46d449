// Progress of long commands on stderr, and keeping a run's writes together.
//
// Progress is shown only when stderr is a terminal, so pipes, logs and tests
// see nothing. TOKPOS_PROGRESS=1 shows it anyway, TOKPOS_PROGRESS=0 never.
// It looks like
//   plot: [=====>              ] 3/9 similarity_matrix
// redrawn in place, and erased when the work is done.
#pragma once

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace tokpos::plot {

inline bool progress_wanted() {
  if (const char* env = std::getenv("TOKPOS_PROGRESS"); env != nullptr && *env != '\0') {
    return std::strcmp(env, "0") != 0;
  }
  return ::isatty(STDERR_FILENO) == 1;
}

class Progress {
 public:
  Progress(std::string what, int total) : what_(std::move(what)), total_(total), on_(progress_wanted()) {}
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;
  ~Progress() { done(); }

  // Announces that step `label` starts; steps before it are done.
  void step(const std::string& label) {
    if (!on_) return;
    draw(done_steps_, label);
    ++done_steps_;
  }

  // Erases the bar (also on the way out of an error, so the message starts a clean line).
  void done() {
    if (!on_ || !shown_) return;
    std::fprintf(stderr, "\r\033[K");
    std::fflush(stderr);
    shown_ = false;
  }

 private:
  void draw(int finished, const std::string& label) {
    constexpr int kBarWidth = 20;
    const int filled = total_ > 0 ? finished * kBarWidth / total_ : kBarWidth;
    std::string bar(static_cast<size_t>(filled), '=');
    if (filled < kBarWidth) bar += '>';
    bar.resize(kBarWidth, ' ');
    std::fprintf(stderr, "\r\033[K%s: [%s] %d/%d %s", what_.c_str(), bar.c_str(), finished + 1, total_,
                 label.c_str());
    std::fflush(stderr);
    shown_ = true;
  }

  std::string what_;
  int total_;
  bool on_;
  int done_steps_ = 0;
  bool shown_ = false;
};

// While alive, SIGINT, SIGTERM and SIGHUP wait: a run that is writing its
// files finishes writing them (each one atomically) before the signal ends it,
// so an interrupted run leaves either the old files or the new ones, and no
// temporary file behind.
//
// How: a signal mask would not do, since sigprocmask and pthread_sigmask
// block a signal only in the calling thread, and the process-directed signal
// goes to any thread that does not block it (the library's workers exist by
// the time the files are written). Instead, for the window, each of the three
// signals whose disposition is the default gets a process-wide handler
// (SA_RESTART, so the write's system calls are not cut short) that only
// records the first signal. On leaving the window the previous dispositions
// come back first, then a recorded signal is raised again: it ends the
// process as it would have, after the write. Outside the window nothing is
// installed: Ctrl-C works as ever. An ignored signal (nohup) stays ignored.
// Windows nest; they are opened and closed by the main thread.
class DeferSignals {
 public:
  DeferSignals() {
    if (depth_++ > 0) return;
    pending_.store(0);
    struct sigaction sa {};
    sa.sa_handler = &DeferSignals::record;
    sa.sa_flags = SA_RESTART;
    sigfillset(&sa.sa_mask);
    for (int k = 0; k < kCount; ++k) {
      installed_[k] = false;
      if (sigaction(kSignals[k], nullptr, &old_[k]) != 0 || old_[k].sa_handler != SIG_DFL) continue;
      installed_[k] = sigaction(kSignals[k], &sa, nullptr) == 0;
    }
  }
  DeferSignals(const DeferSignals&) = delete;
  DeferSignals& operator=(const DeferSignals&) = delete;
  ~DeferSignals() {
    if (--depth_ > 0) return;
    for (int k = 0; k < kCount; ++k)
      if (installed_[k]) sigaction(kSignals[k], &old_[k], nullptr);
    if (const int sig = pending_.exchange(0); sig != 0) std::raise(sig);  // the default action: the process ends
  }

 private:
  static constexpr int kCount = 3;
  static constexpr int kSignals[kCount] = {SIGINT, SIGTERM, SIGHUP};
  static_assert(std::atomic<int>::is_always_lock_free, "the handler stores to it");

  // The handler: async-signal-safe, it only records the first signal.
  static void record(int sig) {
    int none = 0;
    pending_.compare_exchange_strong(none, sig);
  }

  static inline std::atomic<int> pending_{0};
  static inline int depth_ = 0;
  static inline struct sigaction old_[kCount] = {};
  static inline bool installed_[kCount] = {};
};

}  // namespace tokpos::plot
