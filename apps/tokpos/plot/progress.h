// Progress of long commands on stderr, and keeping a run's writes together.
//
// Progress is shown only when stderr is a terminal, so pipes, logs and tests
// see nothing. TOKPOS_PROGRESS=1 shows it anyway, TOKPOS_PROGRESS=0 never.
// It looks like
//   plot: [=====>              ] 3/9 similarity_matrix
// redrawn in place, and erased when the work is done.
#pragma once

#include <unistd.h>

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
class DeferSignals {
 public:
  DeferSignals() {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGHUP);
    sigprocmask(SIG_BLOCK, &set, &old_);
  }
  DeferSignals(const DeferSignals&) = delete;
  DeferSignals& operator=(const DeferSignals&) = delete;
  ~DeferSignals() { sigprocmask(SIG_SETMASK, &old_, nullptr); }

 private:
  sigset_t old_;
};

}  // namespace tokpos::plot
