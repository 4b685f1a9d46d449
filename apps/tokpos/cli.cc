// The tokpos command line: every subcommand's flags, checks and defaults.
#include "cli.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>

#include "tokpos/tokpos.h"

namespace tokpos::app {
namespace {

// A seed: decimal digits only, in [0, 2^64). CLI11 alone would wrap -1 to
// 2^64 - 1 and saturate 2^64 and 1e23 to it, silently.
CLI::Validator seed_range() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        const bool digits = !s.empty() && s.find_first_not_of("0123456789") == std::string::npos;
        errno = 0;
        if (digits) (void)std::strtoull(s.c_str(), nullptr, 10);
        if (!digits || errno == ERANGE) {
          return "'" + s + "' is not an integer in [0, 2^64 - 1 = 18446744073709551615]";
        }
        return {};
      },
      "UINT64", "seed");
}

// A positive finite number, with a readable bound in the message (CLI::Range
// over the doubles printed the largest double in full, 309 digits).
CLI::Validator positive_finite() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(s.c_str(), &end);
        if (end == s.c_str() || *end != '\0') return "'" + s + "' is not a number";
        if (!(v > 0) || !std::isfinite(v)) return "'" + s + "' must be > 0 and finite";
        return {};
      },
      "POSITIVE", "positive_finite");
}

}  // namespace

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
  c.demo_cmd->add_option("--seed", demo.seed, "Seed of the Philox initialiser, in [0, 2^64)")
      ->check(seed_range())
      ->capture_default_str();
  c.demo_cmd->add_option("--base", demo.base, "Sinusoidal base (> 1, for the wavelength bands)")
      ->check(positive_finite())
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
      ->check(positive_finite())
      ->capture_default_str();
  c.table_cmd->add_option("--min-timescale", table.min_timescale, "t2t only")
      ->check(positive_finite())
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

  auto& rope = c.rope;
  c.rope_cmd = app.add_subcommand(
      "rope",
      "Write RoPE's cos and sin as X.npy, (2, T, D) float32 ([0] cos, [1] sin, times the attention factor), "
      "and inv_freq as X.inv_freq.npy, (D/2,) float64");
  c.rope_cmd->add_option("--dim", rope.dim, "Rotary dimension D (even)")
      ->required()
      ->check(CLI::Range(int64_t{2}, int64_t{1} << 20));
  c.rope_cmd->add_option("--base", rope.base, "rope_theta")->check(positive_finite())->capture_default_str();
  c.rope_cmd->add_option("--scaling", rope.scaling,
                         "transformers' rope_scaling JSON, e.g. "
                         "'{\"rope_type\":\"yarn\",\"factor\":4,\"original_max_position_embeddings\":4096}' "
                         "(default: none)");
  c.rope_cmd->add_option("--positions", rope.positions, "A:B, the positions A .. B-1 (0 <= A < B <= 2^31)")
      ->required();
  c.rope_cmd->add_option("--seq-len", rope.seq_len, "dynamic, longrope: the current sequence length")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 52));
  c.rope_cmd->add_option("--layout", rope.layout, "half (rotate_half, GPT-NeoX) | interleaved (GPT-J, Meta)")
      ->check(CLI::IsMember({"half", "interleaved"}))
      ->capture_default_str();
  c.rope_cmd->add_option("--out", rope.out, "X.npy: cos and sin; inv_freq goes to X.inv_freq.npy")->required();

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
  c.embed_cmd->add_option_function<double>(
      "--eps",
      [&embed](const double& eps) {
        embed.eps = eps;
        embed.eps_given = true;
      },
      "bert: LayerNorm eps (default 1e-12)");
  c.embed_cmd->add_flag("--no-layer-norm", embed.no_layer_norm, "bert: stop at the sum before LayerNorm");
  c.embed_cmd->add_option("--out", embed.out, "Write the (B, T, D) output as FILE.npy");

  auto& plot = c.plot;
  c.plot_cmd = app.add_subcommand("plot", "Draw the diagnostics as PNG and SVG pictures");
  c.plot_cmd->add_option("--dim", plot.dim, "Width D (also draws D/2 for the wavelength bands)")
      ->check(CLI::Range(int64_t{2}, int64_t{4096}))->capture_default_str();
  c.plot_cmd->add_option("--context", plot.context, "Positions L")->check(CLI::Range(int64_t{2}, int64_t{2048}))->capture_default_str();
  c.plot_cmd->add_option("--base", plot.base, "Sinusoidal base")
      ->check(positive_finite())->capture_default_str();
  c.plot_cmd->add_option("--layout", plot.layout, "interleaved|halves|fairseq|t2t|ggml")
      ->check(CLI::IsMember({"interleaved", "halves", "fairseq", "t2t", "ggml"}))->capture_default_str();
  c.plot_cmd->add_option("--out", plot.out, "Output directory (created if missing)")->capture_default_str();
  c.plot_cmd->add_option("--text", plot.text, "Text of the lookup example")->capture_default_str();
  c.plot_cmd->add_option("--seed", plot.seed, "Seed of the learned table, in [0, 2^64)")
      ->check(seed_range())
      ->capture_default_str();

  auto& serve = c.serve;
  c.serve_cmd = app.add_subcommand("serve", "Serve an interactive page and a JSON API on a local port");
  c.serve_cmd->add_option("--host", serve.host, "Address to bind (anything but loopback is warned about)")
      ->capture_default_str();
  c.serve_cmd->add_option("--port", serve.port, "TCP port (0: any free port, printed when ready)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  c.serve_cmd->add_option("--threads", serve.threads, "Requests served at once (worker threads)")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
}

}  // namespace tokpos::app
