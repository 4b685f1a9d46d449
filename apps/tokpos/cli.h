// The tokpos command line's structure, apart from running it, so that the
// flag parsing can be tested and fuzzed on its own.
#pragma once

#include <CLI/CLI.hpp>

#include "frontend/demo_report.h"
#include "embed.h"
#include "plots.h"
#include "rope_cmd.h"
#include "serve/server.h"
#include "table.h"

namespace tokpos::app {

struct Commands {
  frontend::DemoOptions demo;
  TableCommand table;
  RopeCommand rope;
  EmbedCommand embed;
  plot::PlotOptions plot;
  serve::ServeOptions serve;
  CLI::App* demo_cmd = nullptr;
  CLI::App* table_cmd = nullptr;
  CLI::App* rope_cmd = nullptr;
  CLI::App* embed_cmd = nullptr;
  CLI::App* plot_cmd = nullptr;
  CLI::App* serve_cmd = nullptr;
};

// Adds every subcommand and flag to app, bound to the fields of c.
void configure_cli(CLI::App& app, Commands& c);

}  // namespace tokpos::app
