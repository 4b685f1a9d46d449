// The tokpos command line: every subcommand's flags, checks and defaults.
#include "cli.h"

#include <string>

#include "frontend/lab.h"
#include "frontend/params.h"
#include "tokpos/tokpos.h"

namespace tokpos::app {
namespace {

namespace fe = tokpos::frontend;

// A flag checked by its parameter's rule (frontend/params.h): the message is
// the rule's own, the one python -m tokpos and tokpos serve give too. CLI11
// converts the value only after the rule has accepted its text.
template <class Parse>
CLI::Validator by_rule(Parse parse, const std::string& description, const std::string& name) {
  return CLI::Validator(
      [parse](std::string& s) -> std::string {
        try {
          parse(s);
        } catch (const fe::ParamError& e) {
          return e.what();
        }
        return {};
      },
      description, name);
}

CLI::Validator rule(const fe::IntParam& p) {
  return by_rule([p](const std::string& s) { (void)fe::parse(p, s); }, fe::describe(p), p.name);
}

CLI::Validator rule(const fe::PositiveParam& p) {
  return by_rule([p](const std::string& s) { (void)fe::parse(p, s); }, fe::describe(p), p.name);
}

CLI::Validator seed_rule() {
  return by_rule([](const std::string& s) { (void)fe::parse_seed(s); }, fe::describe_seed(), fe::kSeed);
}

CLI::Validator layout_rule() {
  return by_rule([](const std::string& s) { (void)fe::parse_layout_param(s); },
                 "one of " + fe::join(fe::layout_names()), "layout");
}

CLI::Validator dtype_rule() {
  return by_rule([](const std::string& s) { (void)fe::parse_float_dtype(s); },
                 "one of " + fe::join(fe::float_dtype_names()), "dtype");
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
  CLI::Option* demo_dim = c.demo_cmd->add_option("--dim", demo.dim, "Model width D")
      ->check(rule(fe::kDim))
      ->capture_default_str();
  c.demo_cmd->add_option("--vocab", demo.vocab_size, "Vocabulary size V")
      ->check(rule(fe::kVocab))
      ->capture_default_str();
  CLI::Option* demo_context = c.demo_cmd->add_option("--context", demo.max_context, "Max context L")
      ->check(rule(fe::kContext))
      ->capture_default_str();
  c.demo_cmd->add_option("--seed", demo.seed, "Seed of the Philox initialiser, in [0, 2^64)")
      ->check(seed_rule())
      ->capture_default_str();
  c.demo_cmd->add_option("--base", demo.base, "Sinusoidal base")
      ->check(rule(fe::kBase))
      ->capture_default_str();
  c.demo_cmd->add_flag("--json", demo.json, "Print one JSON object instead of the report");
  c.demo_cmd
      ->add_option("--lang", demo.lang,
                   "Language of the report (default: zh when LC_ALL, LC_MESSAGES or LANG starts with zh, else en); "
                   "the numbers and --json are the same in both")
      ->check(CLI::IsMember({"zh", "en"}));
  c.demo_cmd->add_option("--weights", demo.weights,
                         "FILE.safetensors: show its trained position table beside a fresh learned and a "
                         "sinusoidal one of its (L, D) (needs --preset; excludes --dim and --context)");
  c.demo_cmd->add_option("--preset", demo.preset, "gpt2|bert: how to read --weights")
      ->check(CLI::IsMember({"gpt2", "bert"}));
  c.demo_cmd
      ->add_option("--map", demo.map,
                   "ROLE=NAME: read a role (wte, wpe, word, position, token_type, ln_weight, ln_bias) from NAME")
      ->delimiter(',');
  // --dim and --context say they were given, so that run_demo can refuse them beside --weights.
  c.demo_cmd->callback([&demo, demo_dim, demo_context] {
    demo.dim_given = demo_dim->count() > 0;
    demo.context_given = demo_context->count() > 0;
  });

  auto& table = c.table;
  c.table_cmd =
      app.add_subcommand("table", "Write an exact sinusoidal position table as a .npy file");
  c.table_cmd->add_option("--layout", table.layout, fe::join(fe::layout_names(), "|"))
      ->check(layout_rule())
      ->capture_default_str();
  c.table_cmd->add_option("--dim", table.dim, "Width D")->required()->check(rule(fe::kDim));
  c.table_cmd->add_option("--context", table.context, "Rows L")->required()->check(rule(fe::kContext));
  c.table_cmd->add_option("--start", table.start, "First position P (rows are P .. P+L-1)")
      ->check(rule(fe::kStart))
      ->capture_default_str();
  c.table_cmd->add_option("--base", table.base, "Base (t2t: max_timescale, ggml: max_period)")
      ->check(rule(fe::kBase))
      ->capture_default_str();
  c.table_cmd->add_option("--min-timescale", table.min_timescale, "t2t only")
      ->check(rule(fe::kMinTimescale))
      ->capture_default_str();
  c.table_cmd
      ->add_option("--padding-idx", table.padding_idx, "fairseq only: this position's row is zero (-1: none)")
      ->check(rule(fe::kPaddingIdx))
      ->capture_default_str();
  c.table_cmd
      ->add_option("--dtype", table.dtype, fe::join(fe::float_dtype_names(), "|") + " (bf16 stored as uint16 bits)")
      ->check(dtype_rule())
      ->capture_default_str();
  c.table_cmd->add_option("--out", table.out, "Output FILE.npy")->required();
  c.table_cmd->add_option("--relative", table.relative, "Also report the relative-position fit at offset K")
      ->check(rule(fe::kRelative));

  auto& rope = c.rope;
  c.rope_cmd = app.add_subcommand(
      "rope",
      "Write RoPE's cos and sin as X.npy, (2, T, D) float32 ([0] cos, [1] sin, times the attention factor), "
      "and inv_freq as X.inv_freq.npy, (D/2,) float64");
  c.rope_cmd->add_option("--dim", rope.dim, "Rotary dimension D (even; for proportional the head dimension)")
      ->required()
      ->check(rule(fe::kRotaryDim));
  c.rope_cmd->add_option("--base", rope.base, "rope_theta")->check(rule(fe::kBase))->capture_default_str();
  c.rope_cmd->add_option("--scaling", rope.scaling,
                         "transformers' rope_scaling JSON, e.g. "
                         "'{\"rope_type\":\"yarn\",\"factor\":4,\"original_max_position_embeddings\":4096}' "
                         "(default: none)");
  c.rope_cmd->add_option("--positions", rope.positions, "A:B, the positions A .. B-1 (0 <= A < B <= 2^31)")
      ->required();
  c.rope_cmd->add_option("--seq-len", rope.seq_len, "dynamic, longrope: the current sequence length")
      ->check(rule(fe::kSeqLen));
  c.rope_cmd->add_option("--layout", rope.layout, "half (rotate_half, GPT-NeoX) | interleaved (GPT-J, Meta)")
      ->check(CLI::IsMember({"half", "interleaved"}))
      ->capture_default_str();
  c.rope_cmd->add_option("--out", rope.out, "X.npy: cos and sin; inv_freq goes to X.inv_freq.npy")->required();

  auto& embed = c.embed;
  c.embed_cmd =
      app.add_subcommand("embed", "Run a checkpoint's input stage (GPT-2 or BERT) on token ids");
  c.embed_cmd->add_option("--weights", embed.weights, "FILE.safetensors or FILE.gguf")->required();
  c.embed_cmd->add_option("--preset", embed.preset, "gpt2|bert (a GGUF file names its own architecture)")
      ->check(CLI::IsMember({"gpt2", "bert"}))
      ->each([&embed](const std::string&) { embed.preset_given = true; })
      ->capture_default_str();
  c.embed_cmd->add_option("--ids", embed.ids, "Token ids, e.g. 101,7592,2088,102 (batch rows separated by ';')")
      ->required();
  c.embed_cmd->add_option("--token-types", embed.token_types,
                        "bert: segment ids, same shape as --ids (default 0)");
  c.embed_cmd->add_option("--mask", embed.mask,
                        "gpt2: attention mask over past + current tokens, for left padding");
  c.embed_cmd->add_option("--past", embed.past, "gpt2: tokens already in the cache")->check(rule(fe::kPast));
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

  auto& inspect = c.inspect;
  c.inspect_cmd = app.add_subcommand(
      "inspect", "List a safetensors or GGUF file's metadata and tensors (type, shape, bytes)");
  c.inspect_cmd->add_option("file", inspect.file, "FILE.safetensors or FILE.gguf")->required();
  c.inspect_cmd->add_flag("--json", inspect.json, "One JSON object instead of the table");

  auto& plot = c.plot;
  c.plot_cmd = app.add_subcommand("plot", "Draw the diagnostics as PNG and SVG pictures");
  auto* plot_dim = c.plot_cmd->add_option("--dim", plot.dim, "Width D (also draws D/2 for the wavelength bands)")
      ->check(rule(fe::kPlotDim))->capture_default_str();
  auto* plot_context = c.plot_cmd->add_option("--context", plot.context, "Positions L")
      ->check(rule(fe::kPlotContext))->capture_default_str();
  c.plot_cmd->add_option("--base", plot.base, "Sinusoidal base")
      ->check(rule(fe::kBase))->capture_default_str();
  c.plot_cmd->add_option("--layout", plot.layout, fe::join(fe::layout_names(), "|"))
      ->check(layout_rule())->capture_default_str();
  c.plot_cmd->add_option("--out", plot.out, "Output directory (created if missing)")->capture_default_str();
  auto* plot_text = c.plot_cmd->add_option("--text", plot.text, "Text of the lookup example")->capture_default_str();
  auto* plot_seed = c.plot_cmd->add_option("--seed", plot.seed, "Seed of the learned table, in [0, 2^64)")
      ->check(seed_rule())
      ->capture_default_str();
  // --weights draws the file's table (its L and D) against a sinusoidal one:
  // the flags of the fresh tables would be ignored, so they are refused.
  auto* plot_weights = c.plot_cmd->add_option(
      "--weights", plot.weights,
      "FILE.safetensors: draw its trained position table beside a sinusoidal one of the same shape (needs "
      "--preset), or RUN.safetensors, a training run (python -m tokpos train): its snapshots, diagnostics and "
      "losses");
  auto* plot_preset = c.plot_cmd->add_option("--preset", plot.preset, "gpt2|bert: how --weights names its tensors")
      ->check(CLI::IsMember({"gpt2", "bert"}));
  auto* plot_map = c.plot_cmd
                       ->add_option("--map", plot.map,
                                    "ROLE=NAME: read a role (wte, wpe, word, position, token_type, ln_weight, "
                                    "ln_bias) of --weights from NAME")
                       ->delimiter(',');
  // A checkpoint without --preset is refused by make_plots, which can tell it from a training run.
  plot_preset->needs(plot_weights);
  c.plot_cmd
      ->add_option("--lang", plot.lang,
                   "Language of the training run's pictures (default: zh when LC_ALL, LC_MESSAGES or LANG starts "
                   "with zh, else en)")
      ->check(CLI::IsMember({"zh", "en"}))
      ->needs(plot_weights);
  plot_map->needs(plot_weights);
  for (CLI::Option* fresh : {plot_dim, plot_context, plot_text, plot_seed}) fresh->excludes(plot_weights);

  auto& serve = c.serve;
  c.serve_cmd = app.add_subcommand("serve", "Serve an interactive page and a JSON API on a local port");
  c.serve_cmd->add_option("--host", serve.host, "Address to bind (anything but loopback is warned about)")
      ->capture_default_str();
  c.serve_cmd->add_option("--port", serve.port, "TCP port (0: any free port, printed when ready)")
      ->check(rule(fe::kPort))
      ->capture_default_str();
  c.serve_cmd->add_option("--threads", serve.threads, "Requests served at once (worker threads)")
      ->check(rule(fe::kThreads))
      ->capture_default_str();
  auto* serve_weights = c.serve_cmd->add_option(
      "--weights", serve.weights,
      "FILE.safetensors: its position table becomes the page's \"trained\" choice (needs --preset); or "
      "RUN.safetensors, a training run: its snapshots, with a slider over the steps");
  auto* serve_preset = c.serve_cmd->add_option("--preset", serve.preset, "gpt2|bert: the layout of --weights")
                           ->check(CLI::IsMember({"gpt2", "bert"}));
  c.serve_cmd
      ->add_option("--map", serve.map,
                   "ROLE=NAME: read a role (wpe, position, ...) of --weights from NAME")
      ->needs(serve_weights);
  // A checkpoint without --preset is refused by run_serve, which can tell it from a training run.
  serve_preset->needs(serve_weights);

  c.lab_cmd = app.add_subcommand("lab", "Write a lesson's kit: the C lab to do, or the PyTorch lesson to read and run");
  c.lab_cmd->require_subcommand(1);
  const std::string lang_help = "Language of the kit's texts (default: zh when LC_ALL, LC_MESSAGES or LANG starts "
                                "with zh, else en)";
  c.lab_c_cmd = c.lab_cmd->add_subcommand("c", "The C lab: TASK.md, a Makefile, framework/student.c to write");
  c.lab_c_cmd->add_option("DIR", c.lab_c.dir, "A new or empty directory")->required();
  c.lab_c_cmd->add_option("--lang", c.lab_c.lang, lang_help)->check(CLI::IsMember({"zh", "en"}));
  c.lab_pytorch_cmd = c.lab_cmd->add_subcommand("pytorch", "The PyTorch lesson: main.py, its tests, a README");
  c.lab_pytorch_cmd->add_option("DIR", c.lab_pytorch.dir, "A new or empty directory")->required();
  c.lab_pytorch_cmd->add_option("--lang", c.lab_pytorch.lang, lang_help)->check(CLI::IsMember({"zh", "en"}));
  c.lab_pytorch_cmd->add_flag("--exercise", c.lab_pytorch.exercise,
                              "The modules' bodies left to write (raise NotImplementedError)");
}

void run_lab(const std::string& kind, const LabCommand& command, std::ostream& out) {
  const fe::Lang lang = command.lang.empty() ? fe::default_lang() : fe::parse_lang(command.lang);
  const std::vector<std::string> written = fe::write_lab(kind, command.dir, lang, command.exercise);
  out << fe::lab_report(kind, command.dir, lang, written);
}

}  // namespace tokpos::app
