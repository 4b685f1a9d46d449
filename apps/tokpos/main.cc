// tokpos: the command-line tool. Subcommands:
//   demo   the seed lesson's diagnostics on one piece of text
//   table  an exact position table, in any published layout, as .npy
#include <CLI/CLI.hpp>
#include <cmath>
#include <iostream>
#include <limits>

#include "demo.h"
#include "table.h"
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

  tokpos::app::TableCommand table;
  CLI::App* table_cmd =
      app.add_subcommand("table", "Write an exact sinusoidal position table as a .npy file");
  table_cmd->add_option("--layout", table.layout, "interleaved|halves|fairseq|t2t|ggml")
      ->check(CLI::IsMember({"interleaved", "halves", "fairseq", "t2t", "ggml"}))
      ->capture_default_str();
  table_cmd->add_option("--dim", table.dim, "Width D")
      ->required()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  table_cmd->add_option("--context", table.context, "Rows L")
      ->required()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 26));
  table_cmd->add_option("--start", table.start, "First position P (rows are P .. P+L-1)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 52))
      ->capture_default_str();
  table_cmd->add_option("--base", table.base, "Base (t2t: max_timescale, ggml: max_period)")
      ->check(CLI::Range(std::numeric_limits<double>::min(), std::numeric_limits<double>::max()))
      ->capture_default_str();
  table_cmd->add_option("--min-timescale", table.min_timescale, "t2t only")
      ->check(CLI::Range(std::numeric_limits<double>::min(), std::numeric_limits<double>::max()))
      ->capture_default_str();
  table_cmd
      ->add_option("--padding-idx", table.padding_idx, "fairseq only: this position's row is zero (-1: none)")
      ->check(CLI::Range(int64_t{-1}, int64_t{1} << 52))
      ->capture_default_str();
  table_cmd->add_option("--dtype", table.dtype, "f32|bf16|f16 (bf16 stored as uint16 bits)")
      ->check(CLI::IsMember({"f32", "bf16", "f16"}))
      ->capture_default_str();
  table_cmd->add_option("--out", table.out, "Output FILE.npy")->required();
  table_cmd->add_option("--relative", table.relative, "Also report the relative-position fit at offset K")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 26));

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  try {
    if (*demo_cmd) tokpos::app::run_demo(demo, std::cout);
    if (*table_cmd) tokpos::app::run_table(table, std::cout);
  } catch (const tokpos::Error& e) {
    std::cerr << "tokpos: error: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "tokpos: internal error: " << e.what() << "\n";
    return 2;
  }
  return 0;
}
