// tokpos: the command-line tool. Subcommands:
//   demo   the seed lesson's diagnostics on one piece of text
//   table  an exact position table, in any published layout, as .npy
//   embed  a real checkpoint's input stage (GPT-2, BERT) on given token ids
//   plot   the diagnostics as pictures (PNG and SVG)
#include <CLI/CLI.hpp>
#include <cmath>
#include <iostream>
#include <limits>

#include "demo.h"
#include "embed.h"
#include "plots.h"
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

  tokpos::app::EmbedCommand embed;
  CLI::App* embed_cmd =
      app.add_subcommand("embed", "Run a checkpoint's input stage (GPT-2 or BERT) on token ids");
  embed_cmd->add_option("--weights", embed.weights, "FILE.safetensors")->required();
  embed_cmd->add_option("--preset", embed.preset, "gpt2|bert")
      ->check(CLI::IsMember({"gpt2", "bert"}))
      ->capture_default_str();
  embed_cmd->add_option("--ids", embed.ids, "Token ids, e.g. 101,7592,2088,102 (batch rows separated by ';')")
      ->required();
  embed_cmd->add_option("--token-types", embed.token_types,
                        "bert: segment ids, same shape as --ids (default 0)");
  embed_cmd->add_option("--mask", embed.mask,
                        "gpt2: attention mask over past + current tokens, for left padding");
  embed_cmd->add_option("--past", embed.past, "gpt2: tokens already in the cache")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  embed_cmd
      ->add_option(
          "--map", embed.map,
          "ROLE=NAME: read a role (wte, wpe, word, position, token_type, ln_weight, ln_bias) from NAME")
      ->delimiter(',');
  embed_cmd->add_option("--eps", embed.eps, "bert: LayerNorm eps")->capture_default_str();
  embed_cmd->add_flag("--no-layer-norm", embed.no_layer_norm, "bert: stop at the sum before LayerNorm");
  embed_cmd->add_option("--out", embed.out, "Write the (B, T, D) output as FILE.npy");

  tokpos::plot::PlotOptions plot;
  CLI::App* plot_cmd = app.add_subcommand("plot", "Draw the diagnostics as PNG and SVG pictures");
  plot_cmd->add_option("--dim", plot.dim, "Width D (also draws D/2 for the wavelength bands)")
      ->check(CLI::Range(int64_t{2}, int64_t{4096}))->capture_default_str();
  plot_cmd->add_option("--context", plot.context, "Positions L")->check(CLI::Range(int64_t{2}, int64_t{2048}))->capture_default_str();
  plot_cmd->add_option("--base", plot.base, "Sinusoidal base")
      ->check(CLI::Range(std::numeric_limits<double>::min(), std::numeric_limits<double>::max()))->capture_default_str();
  plot_cmd->add_option("--layout", plot.layout, "interleaved|halves|fairseq|t2t|ggml")
      ->check(CLI::IsMember({"interleaved", "halves", "fairseq", "t2t", "ggml"}))->capture_default_str();
  plot_cmd->add_option("--out", plot.out, "Output directory (created if missing)")->capture_default_str();
  plot_cmd->add_option("--text", plot.text, "Text of the lookup example")->capture_default_str();
  plot_cmd->add_option("--seed", plot.seed, "Seed of the learned table")->capture_default_str();

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  try {
    if (*demo_cmd) tokpos::app::run_demo(demo, std::cout);
    if (*table_cmd) tokpos::app::run_table(table, std::cout);
    if (*embed_cmd) tokpos::app::run_embed(embed, std::cout);
    if (*plot_cmd) tokpos::plot::make_plots(plot, std::cout);
  } catch (const tokpos::Error& e) {
    std::cerr << "tokpos: error: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "tokpos: internal error: " << e.what() << "\n";
    return 2;
  }
  return 0;
}
