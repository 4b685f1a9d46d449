// The tokpos command line's structure, apart from running it, so that the
// flag parsing can be tested and fuzzed on its own.
#pragma once

#include <CLI/CLI.hpp>

#include "frontend/demo_report.h"
#include "embed.h"
#include "inspect.h"
#include "plots.h"
#include "rope_cmd.h"
#include "serve/server.h"
#include "table.h"

namespace tokpos::app {

// tokpos lab c|pytorch DIR [--lang zh|en] [--exercise]: writes a lesson's kit.
struct LabCommand {
  std::string dir;
  std::string lang;  // empty: frontend::default_lang()
  bool exercise = false;
};

struct Commands {
  frontend::DemoOptions demo;
  TableCommand table;
  RopeCommand rope;
  EmbedCommand embed;
  InspectCommand inspect;
  plot::PlotOptions plot;
  serve::ServeOptions serve;
  LabCommand lab_c;
  LabCommand lab_pytorch;
  CLI::App* demo_cmd = nullptr;
  CLI::App* table_cmd = nullptr;
  CLI::App* rope_cmd = nullptr;
  CLI::App* embed_cmd = nullptr;
  CLI::App* inspect_cmd = nullptr;
  CLI::App* plot_cmd = nullptr;
  CLI::App* serve_cmd = nullptr;
  CLI::App* lab_cmd = nullptr;
  CLI::App* lab_c_cmd = nullptr;
  CLI::App* lab_pytorch_cmd = nullptr;
};

// Adds every subcommand and flag to app, bound to the fields of c.
void configure_cli(CLI::App& app, Commands& c);

// Writes the kit of `kind` for `command` and prints what lab_report says.
void run_lab(const std::string& kind, const LabCommand& command, std::ostream& out);

}  // namespace tokpos::app
