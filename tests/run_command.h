// A command line run through the shell, as a user would type it, for the
// tests of the tokpos tool.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

struct Result {
  int status;  // the exit status, or -1 when the command did not exit normally
  std::string out;
};

// Runs a shell command line (sh -c) as given; stderr is folded into out.
inline Result run_shell(const std::string& line) {
  FILE* pipe = popen((line + " 2>&1").c_str(), "r");
  if (!pipe) return {-1, ""};
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) out.append(buf.data(), n);
  const int st = pclose(pipe);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

// Runs the tokpos tool (TOKPOS_CLI) with args through the shell.
inline Result run(const std::string& args) { return run_shell(std::string(TOKPOS_CLI) + " " + args); }
