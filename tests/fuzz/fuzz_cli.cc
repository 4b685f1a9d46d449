// Any argument vector (the input split at NUL bytes) through the CLI's flag
// parsing: it parses or reports a CLI11 error; it never crashes. Commands are
// not run (they would write files); their inputs are checked by the other targets.
#include <cstdint>
#include <string>
#include <vector>

#include "cli.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> args = {"tokpos"};
  std::string current;
  for (size_t i = 0; i < size && args.size() < 64; ++i) {
    if (data[i] == 0) {
      args.push_back(current);
      current.clear();
    } else {
      current.push_back(static_cast<char>(data[i]));
    }
  }
  if (!current.empty()) args.push_back(current);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  CLI::App app{"tokpos"};
  tokpos::app::Commands commands;
  tokpos::app::configure_cli(app, commands);
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::Error&) {
  }
  return 0;
}
