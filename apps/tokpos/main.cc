// tokpos: the command-line tool. Subcommands:
//   demo   the seed lesson's diagnostics on one piece of text
//   table  an exact position table, in any published layout, as .npy
//   rope   RoPE inverse frequencies and cos/sin caches, any scaling, as .npy
//   embed  a real checkpoint's input stage (GPT-2, BERT) on given token ids
//   inspect  what a safetensors or GGUF file holds: metadata and tensors
//   plot   the diagnostics as pictures (PNG and SVG)
//   serve  an interactive page and a JSON API on a local port
//   lab    a lesson's kit: the C lab to do, the PyTorch lesson to run
#include <iostream>
#include <new>
#include <optional>
#include <string_view>

#include "cli.h"
#include "progress.h"
#include "tokpos/error.h"

namespace {

// The demo's report, with the progress bar on stderr drawn from its steps.
void run_demo(const tokpos::frontend::DemoOptions& options) {
  std::optional<tokpos::plot::Progress> bar;
  tokpos::frontend::run_demo(options, std::cout, [&bar](int step, int total, std::string_view label) {
    if (!bar) bar.emplace("demo", total);
    if (step < total) {
      bar->step(std::string(label));
    } else {
      bar->done();
    }
  });
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tokpos: token and position embeddings, the input stage of a transformer"};
  tokpos::app::Commands c;
  tokpos::app::configure_cli(app, c);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    if (*c.demo_cmd) run_demo(c.demo);
    if (*c.table_cmd) tokpos::app::run_table(c.table, std::cout);
    if (*c.rope_cmd) tokpos::app::run_rope(c.rope, std::cout);
    if (*c.embed_cmd) tokpos::app::run_embed(c.embed, std::cout);
    if (*c.inspect_cmd) tokpos::app::run_inspect(c.inspect, std::cout);
    if (*c.plot_cmd) tokpos::plot::make_plots(c.plot, std::cout);
    if (*c.lab_c_cmd) tokpos::app::run_lab("c", c.lab_c, std::cout);
    if (*c.lab_pytorch_cmd) tokpos::app::run_lab("pytorch", c.lab_pytorch, std::cout);
    if (*c.serve_cmd) return tokpos::serve::run_serve(c.serve, std::cout, std::cerr);
  } catch (const tokpos::Error& e) {
    std::cerr << "tokpos: error: " << e.what() << "\n";
    return 1;
  } catch (const std::bad_alloc& e) {  // the commands name the size where they can; this is the backstop
    std::cerr << "tokpos: error: out of memory (TOKPOS_OUT_OF_MEMORY): an allocation failed (" << e.what() << ")\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "tokpos: internal error: " << e.what() << "\n";
    return 2;
  }
  return 0;
}
