// The tokpos command line: every subcommand's flags, checks and defaults.
#include "cli.h"

#include <limits>

#include "tokpos/tokpos.h"

namespace tokpos::app {

void configure_cli(CLI::App& app, Commands& c) {
  app.set_version_flag("--version", std::string(tokpos_version()));
  app.require_subcommand(1);

  auto& demo = c.demo;
  c.demo_cmd =
      app.add_subcommand("demo", "Embed a text with learned and sinusoidal positions and compare them");
  c.demo_cmd->add_option("--text", demo.text, "Text to embed (byte tokenizer: id = byte + 4)")
      ->capture_default_str();
  c.demo_cmd->add_option("--dim", demo.dim, "Model width D")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
  c.demo_cmd->add_option("--vocab", demo.vocab_size, "Vocabulary size V")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24))
      ->capture_default_str();
  c.demo_cmd->add_option("--context", demo.max_context, "Max context L")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
  c.demo_cmd->add_option("--seed", demo.seed, "Seed of the Philox initialiser")->capture_default_str();
  c.demo_cmd->add_option("--base", demo.base, "Sinusoidal base")
      ->check(CLI::Range(std::numeric_limits<double>::min(), std::numeric_limits<double>::max()))
      ->capture_default_str();
  c.demo_cmd->add_flag("--json", demo.json, "Print one JSON object instead of the report");

  auto& table = c.table;
  c.table_cmd =
      app.add_subcommand("table", "Write an exact sinusoidal position table as a .npy file");
  c.table_cmd->add_option("--layout", table.layout, "interleaved|halves|fairseq|t2t|ggml")
      ->check(CLI::IsMember({"interleaved", "halves", "fairseq", "t2t", "ggml"}))
      ->capture_default_str();
  c.table_cmd->add_option("--dim", table.dim, "Width D")
      ->required()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  c.table_cmd->add_option("--context", table.context, "Rows L")
      ->required()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 26));
  c.table_cmd->add_option("--start", table.start, "First position P (rows are P .. P+L-1)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 52))
      ->capture_default_str();
  c.table_cmd->add_option("--base", table.base, "Base (t2t: max_timescale, ggml: max_period)")
      ->check(CLI::Range(std::numeric_limits<double>::min(), std::numeric_limits<double>::max()))
      ->capture_default_str();
  c.table_cmd->add_option("--min-timescale", table.min_timescale, "t2t only")
      ->check(CLI::Range(std::numeric_limits<double>::min(), std::numeric_limits<double>::max()))
      ->capture_default_str();
  c.table_cmd
      ->add_option("--padding-idx", table.padding_idx, "fairseq only: this position's row is zero (-1: none)")
      ->check(CLI::Range(int64_t{-1}, int64_t{1} << 52))
      ->capture_default_str();
  c.table_cmd->add_option("--dtype", table.dtype, "f32|bf16|f16 (bf16 stored as uint16 bits)")
      ->check(CLI::IsMember({"f32", "bf16", "f16"}))
      ->capture_default_str();
  c.table_cmd->add_option("--out", table.out, "Output FILE.npy")->required();
  c.table_cmd->add_option("--relative", table.relative, "Also report the relative-position fit at offset K")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 26));

  auto& embed = c.embed;
  c.embed_cmd =
      app.add_subcommand("embed", "Run a checkpoint's input stage (GPT-2 or BERT) on token ids");
  c.embed_cmd->add_option("--weights", embed.weights, "FILE.safetensors")->required();
  c.embed_cmd->add_option("--preset", embed.preset, "gpt2|bert")
      ->check(CLI::IsMember({"gpt2", "bert"}))
      ->capture_default_str();
  c.embed_cmd->add_option("--ids", embed.ids, "Token ids, e.g. 101,7592,2088,102 (batch rows separated by ';')")
      ->required();
  c.embed_cmd->add_option("--token-types", embed.token_types,
                        "bert: segment ids, same shape as --ids (default 0)");
  c.embed_cmd->add_option("--mask", embed.mask,
                        "gpt2: attention mask over past + current tokens, for left padding");
  c.embed_cmd->add_option("--past", embed.past, "gpt2: tokens already in the cache")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  c.embed_cmd
      ->add_option(
          "--map", embed.map,
          "ROLE=NAME: read a role (wte, wpe, word, position, token_type, ln_weight, ln_bias) from NAME")
      ->delimiter(',');
  c.embed_cmd->add_option("--eps", embed.eps, "bert: LayerNorm eps")->capture_default_str();
  c.embed_cmd->add_flag("--no-layer-norm", embed.no_layer_norm, "bert: stop at the sum before LayerNorm");
  c.embed_cmd->add_option("--out", embed.out, "Write the (B, T, D) output as FILE.npy");

  auto& plot = c.plot;
  c.plot_cmd = app.add_subcommand("plot", "Draw the diagnostics as PNG and SVG pictures");
  c.plot_cmd->add_option("--dim", plot.dim, "Width D (also draws D/2 for the wavelength bands)")
      ->check(CLI::Range(int64_t{2}, int64_t{4096}))->capture_default_str();
  c.plot_cmd->add_option("--context", plot.context, "Positions L")->check(CLI::Range(int64_t{2}, int64_t{2048}))->capture_default_str();
  c.plot_cmd->add_option("--base", plot.base, "Sinusoidal base")
      ->check(CLI::Range(std::numeric_limits<double>::min(), std::numeric_limits<double>::max()))->capture_default_str();
  c.plot_cmd->add_option("--layout", plot.layout, "interleaved|halves|fairseq|t2t|ggml")
      ->check(CLI::IsMember({"interleaved", "halves", "fairseq", "t2t", "ggml"}))->capture_default_str();
  c.plot_cmd->add_option("--out", plot.out, "Output directory (created if missing)")->capture_default_str();
  c.plot_cmd->add_option("--text", plot.text, "Text of the lookup example")->capture_default_str();
  c.plot_cmd->add_option("--seed", plot.seed, "Seed of the learned table")->capture_default_str();

}

}  // namespace tokpos::app
