// tokpos: the command-line tool. Subcommands:
//   demo   the seed lesson's diagnostics on one piece of text
#include <CLI/CLI.hpp>
#include <cmath>
#include <iostream>
#include <limits>

#include "demo.h"
#include "tokpos/error.h"
#include "tokpos/tokpos.h"

int main(int argc, char** argv) {
  CLI::App app{"tokpos: token and position embeddings, the input stage of a transformer"};
  app.set_version_flag("--version", std::string(tokpos_version()));
  app.require_subcommand(1);

  tokpos::app::DemoOptions demo;
  CLI::App* demo_cmd =
      app.add_subcommand("demo", "Embed a text with learned and sinusoidal positions and compare them");
  demo_cmd->add_option("--text", demo.text, "Text to embed (byte tokenizer: id = byte + 4)")
      ->capture_default_str();
  demo_cmd->add_option("--dim", demo.dim, "Model width D")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
  demo_cmd->add_option("--vocab", demo.vocab_size, "Vocabulary size V")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24))
      ->capture_default_str();
  demo_cmd->add_option("--context", demo.max_context, "Max context L")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
  demo_cmd->add_option("--seed", demo.seed, "Seed of the Philox initialiser")->capture_default_str();
  demo_cmd->add_option("--base", demo.base, "Sinusoidal base")
      ->check(CLI::Range(std::numeric_limits<double>::min(), std::numeric_limits<double>::max()))
      ->capture_default_str();
  demo_cmd->add_flag("--json", demo.json, "Print one JSON object instead of the report");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  try {
    if (*demo_cmd) tokpos::app::run_demo(demo, std::cout);
  } catch (const tokpos::Error& e) {
    std::cerr << "tokpos: error: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "tokpos: internal error: " << e.what() << "\n";
    return 2;
  }
  return 0;
}
