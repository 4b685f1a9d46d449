// A training run (RUN.safetensors, "tokpos.run" metadata) read by
// frontend::load_training_run and shown by tokpos plot --weights RUN and
// tokpos serve --weights RUN: the reader's checks and errors, the four
// pictures, and the API's answers for a step. The run file is written here
// with write_safetensors (L 16, D 8, steps 0, 5, 10).
#include <gtest/gtest.h>

#include <cairo.h>
#include <unistd.h>

#include <array>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "expect_error.h"
#include "frontend/trained.h"
#include "plots.h"
#include "serve/server.h"
#include "serve_process.h"
#include "tokpos/diagnostics.h"
#include "tokpos/error.h"
#include "tokpos/safetensors.h"

namespace {

using json = nlohmann::json;
using tokpos::Status;
using tokpos::serve::ApiAnswer;
using tokpos::testing::expect_error;

constexpr int64_t L = 16, D = 8;

// The run's contents before they are written, so a test can spoil one part.
struct RunSpec {
  std::map<std::string, std::string> metadata;
  struct Tensor {
    std::vector<int64_t> shape;
    std::vector<float> values;
  };
  std::map<std::string, Tensor> tensors;
};

// Step s's table: fixed noise blended into a smooth table as s goes 0 -> 10.
float snapshot_value(int64_t s, int64_t p, int64_t d) {
  // A hash of the cell as noise in [-0.02, 0.02]: neighbouring rows unrelated.
  uint32_t h = static_cast<uint32_t>(p * D + d + 1) * 2654435761u;
  h ^= h >> 15;
  h *= 2246822519u;
  h ^= h >> 13;
  const double noise = 0.02 * (static_cast<double>(h) / 4294967296.0 * 2 - 1);
  const double smooth = std::cos(static_cast<double>(p) / static_cast<double>(d + 2));
  const double a = static_cast<double>(s) / 10.0;
  return static_cast<float>((1 - a) * noise + a * smooth);
}

RunSpec good_run() {
  RunSpec r;
  r.metadata = {
      {"tokpos.run", "1"},
      {"steps", "[0, 5, 10]"},
      {"config",
       R"({"layers": 2, "heads": 4, "dim": 8, "context": 16, "vocab": 260, "seed": 0, "steps": 10, "every": 5})"},
      {"beyond",
       R"({"learned": {"policy": "error", "message": "position 16 is past L = 16", "loss": null}, "sinusoidal": {"loss": 2.5, "loss_within": 2.0}})"}};
  for (const int64_t s : {0, 5, 10}) {
    RunSpec::Tensor t{{L, D}, {}};
    for (int64_t p = 0; p < L; ++p)
      for (int64_t d = 0; d < D; ++d) t.values.push_back(snapshot_value(s, p, d));
    r.tensors["positions.step_" + std::to_string(s)] = t;
  }
  RunSpec::Tensor sinus{{L, D}, {}};
  for (int64_t p = 0; p < L; ++p)
    for (int64_t d = 0; d < D; ++d) {
      const double w = std::pow(10000.0, -static_cast<double>(d / 2 * 2) / static_cast<double>(D));
      sinus.values.push_back(static_cast<float>(d % 2 == 0 ? std::sin(static_cast<double>(p) * w)
                                                           : std::cos(static_cast<double>(p) * w)));
    }
  r.tensors["positions.sinusoidal"] = sinus;
  r.tensors["loss.train.learned"] = {{3}, {5.5f, 3.25f, 2.5f}};
  r.tensors["loss.heldout.learned"] = {{3}, {5.6f, 3.5f, 2.75f}};
  r.tensors["loss.train.sinusoidal"] = {{3}, {5.5f, 3.0f, 2.25f}};
  r.tensors["loss.heldout.sinusoidal"] = {{3}, {5.6f, 3.25f, 2.5f}};
  return r;
}

void write_run(const std::string& path, const RunSpec& r) {
  std::vector<tokpos::TensorRef> refs;
  for (const auto& [name, t] : r.tensors) {
    refs.push_back({name, "F32", t.shape, t.values.data(), t.values.size() * sizeof(float)});
  }
  tokpos::write_safetensors(path, refs, r.metadata);
}

const std::vector<float>& table_of(const RunSpec& r, int64_t step) {
  return r.tensors.at("positions.step_" + std::to_string(step)).values;
}

// cos(row p, row q) in double, here, for the checks.
double cos_rows(const std::vector<float>& t, int64_t p, int64_t q) {
  double ab = 0, aa = 0, bb = 0;
  for (int64_t d = 0; d < D; ++d) {
    const double a = t[p * D + d], b = t[q * D + d];
    ab += a * b, aa += a * a, bb += b * b;
  }
  return ab / std::sqrt(aa * bb);
}

double mean_cos_at(const std::vector<float>& t, int64_t k) {
  double sum = 0;
  for (int64_t p = 0; p + k < L; ++p) sum += cos_rows(t, p, p + k);
  return sum / static_cast<double>(L - k);
}

class RunView : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "tokpos_run_view_" + std::to_string(::getpid());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    path_ = dir_ + "/run.safetensors";
    write_run(path_, spec_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // A copy of the good run with `spoil` applied, written as `name`.
  std::string spoiled(const std::string& name, const std::function<void(RunSpec&)>& spoil) {
    RunSpec r = good_run();
    spoil(r);
    const std::string p = dir_ + "/" + name + ".safetensors";
    write_run(p, r);
    return p;
  }

  RunSpec spec_ = good_run();
  std::string dir_, path_;
};

// ---- the reader ----------------------------------------------------------------

TEST_F(RunView, TheReaderReturnsWhatWasWritten) {
  EXPECT_TRUE(tokpos::frontend::is_training_run(path_));
  const auto run = tokpos::frontend::load_training_run(path_);
  EXPECT_EQ(run.file_name, "run.safetensors");
  EXPECT_EQ(run.max_context, L);
  EXPECT_EQ(run.dim, D);
  EXPECT_EQ(run.steps, (std::vector<int64_t>{0, 5, 10}));
  ASSERT_EQ(run.snapshots.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(run.snapshots[i].table, table_of(spec_, run.steps[i])) << i;
    EXPECT_EQ(run.snapshots[i].max_context, L);
    EXPECT_EQ(run.snapshots[i].preset, "run");
  }
  EXPECT_EQ(run.sinusoidal, spec_.tensors["positions.sinusoidal"].values);
  EXPECT_EQ(run.loss_heldout_learned, (std::vector<float>{5.6f, 3.5f, 2.75f}));
  EXPECT_EQ(run.loss_train_sinusoidal, (std::vector<float>{5.5f, 3.0f, 2.25f}));
  EXPECT_EQ(json::parse(run.config_json)["layers"], 2);
  EXPECT_EQ(json::parse(run.beyond_json)["sinusoidal"]["loss"], 2.5);
}

TEST_F(RunView, ACheckpointIsNotARun) {
  std::vector<float> t(L * D, 0.5f);
  const std::string ckpt = dir_ + "/gpt2.safetensors";
  tokpos::write_safetensors(ckpt, {{"wte.weight", "F32", {L, D}, t.data(), t.size() * 4},
                                   {"wpe.weight", "F32", {L, D}, t.data(), t.size() * 4}});
  EXPECT_FALSE(tokpos::frontend::is_training_run(ckpt));
  expect_error([&] { tokpos::frontend::load_training_run(ckpt); }, Status::kCorruptFile,
               {ckpt + ": metadata 'tokpos.run' is missing"});
}

TEST_F(RunView, ABadStepsListIsNamedWithItsEntry) {
  const auto with_steps = [&](const std::string& name, const std::string& steps) {
    return spoiled(name, [&](RunSpec& r) { r.metadata["steps"] = steps; });
  };
  std::string p = with_steps("descending", "[0, 10, 5]");
  expect_error([&] { tokpos::frontend::load_training_run(p); }, Status::kCorruptFile,
               {p + ": metadata 'steps': entry 2 = '5' does not follow 10: the steps must ascend"});
  p = with_steps("negative", "[-5, 0, 5]");
  expect_error([&] { tokpos::frontend::load_training_run(p); }, Status::kCorruptFile,
               {"metadata 'steps': entry 0 = '-5' is below 0"});
  p = with_steps("fraction", "[0, 2.5, 5]");
  expect_error([&] { tokpos::frontend::load_training_run(p); }, Status::kCorruptFile,
               {"entry 1 = '2.5' is not an integer"});
  p = with_steps("empty", "[]");
  expect_error([&] { tokpos::frontend::load_training_run(p); }, Status::kCorruptFile,
               {"metadata 'steps' = '[]' is not a non-empty JSON list"});
  p = with_steps("text", "zero, five");
  expect_error([&] { tokpos::frontend::load_training_run(p); }, Status::kCorruptFile,
               {"metadata 'steps' = 'zero, five' is not JSON"});
  p = spoiled("no-steps", [](RunSpec& r) { r.metadata.erase("steps"); });
  expect_error([&] { tokpos::frontend::load_training_run(p); }, Status::kCorruptFile,
               {"metadata 'steps' is missing"});
  p = spoiled("no-dim", [](RunSpec& r) { r.metadata["config"] = R"({"context": 16})"; });
  expect_error([&] { tokpos::frontend::load_training_run(p); }, Status::kCorruptFile,
               {"metadata 'config' needs \"dim\" as an integer >= 1"});
}

TEST_F(RunView, AMissingSnapshotOrAWrongShapeIsNamed) {
  std::string p = spoiled("missing", [](RunSpec& r) { r.tensors.erase("positions.step_5"); });
  expect_error([&] { tokpos::frontend::load_training_run(p); }, Status::kCorruptFile,
               {p + ": tensor 'positions.step_5' is missing: metadata 'steps' lists step 5"});
  p = spoiled("shape", [](RunSpec& r) { r.tensors["positions.step_10"].shape = {D, L}; });
  expect_error([&] { tokpos::frontend::load_training_run(p); }, Status::kCorruptFile,
               {"tensor 'positions.step_10' has shape (8, 16), not (16, 8)",
                "config's context and dim make the tables (L, D) = (16, 8)"});
  p = spoiled("sinusoidal", [](RunSpec& r) { r.tensors.erase("positions.sinusoidal"); });
  expect_error([&] { tokpos::frontend::load_training_run(p); }, Status::kCorruptFile,
               {"tensor 'positions.sinusoidal' is missing"});
  p = spoiled("loss", [](RunSpec& r) { r.tensors["loss.train.learned"] = {{2}, {1.0f, 2.0f}}; });
  expect_error([&] { tokpos::frontend::load_training_run(p); }, Status::kCorruptFile,
               {"tensor 'loss.train.learned' has shape (2,), not (3,)"});
}

TEST_F(RunView, ANonFiniteValueIsRefusedNamingWhere) {
  std::string p =
      spoiled("nan", [](RunSpec& r) { r.tensors["positions.step_5"].values[3 * D + 1] = std::nanf(""); });
  expect_error([&] { tokpos::frontend::load_training_run(p); }, Status::kInvalidArgument,
               {p + ": tensor 'positions.step_5'", "row 3 holds nan at column 1",
                "every value of a position table must be finite"});
  p = spoiled("inf", [](RunSpec& r) { r.tensors["loss.heldout.sinusoidal"].values[1] = INFINITY; });
  expect_error([&] { tokpos::frontend::load_training_run(p); }, Status::kInvalidArgument,
               {"tensor 'loss.heldout.sinusoidal': entry 1 (step 5) holds inf"});
}

// ---- tokpos plot ----------------------------------------------------------------

struct Image {
  cairo_surface_t* s = nullptr;
  explicit Image(const std::string& path) : s(cairo_image_surface_create_from_png(path.c_str())) {}
  ~Image() { cairo_surface_destroy(s); }
  bool ok() const { return cairo_surface_status(s) == CAIRO_STATUS_SUCCESS; }
  int width() const { return cairo_image_surface_get_width(s); }
  int height() const { return cairo_image_surface_get_height(s); }
  std::array<int, 3> at(double x, double y) const {
    const auto* row =
        cairo_image_surface_get_data(s) + static_cast<int>(y) * cairo_image_surface_get_stride(s);
    const uint32_t p = reinterpret_cast<const uint32_t*>(row)[static_cast<int>(x)];
    return {static_cast<int>((p >> 16) & 255), static_cast<int>((p >> 8) & 255), static_cast<int>(p & 255)};
  }
};

bool near(std::array<int, 3> c, tokpos::plot::Rgb want, int tol = 3) {
  return std::abs(c[0] - std::lround(want.r * 255)) <= tol &&
         std::abs(c[1] - std::lround(want.g * 255)) <= tol &&
         std::abs(c[2] - std::lround(want.b * 255)) <= tol;
}

TEST_F(RunView, TheDiagnosticsAreTheSnapshotsCosines) {
  const auto d = tokpos::plot::run_diagnostics(tokpos::frontend::load_training_run(path_));
  EXPECT_EQ(d.shown, (std::vector<size_t>{0, 1, 2}));
  EXPECT_EQ(d.offsets, (std::vector<int64_t>{1, 4}));  // 16 and 64 are not below L = 16
  ASSERT_EQ(d.learned.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    for (size_t s = 0; s < 3; ++s) {
      EXPECT_NEAR(d.learned[i][s],
                  mean_cos_at(table_of(spec_, int64_t{5} * static_cast<int64_t>(s)), d.offsets[i]), 1e-9)
          << i << ", " << s;
    }
    EXPECT_NEAR(d.sinusoidal[i], mean_cos_at(spec_.tensors["positions.sinusoidal"].values, d.offsets[i]),
                1e-9);
  }
  // The fixture's run grows smooth: noise at step 0, neighbours alike at step 10.
  EXPECT_LT(std::abs(d.learned[0][0]), 0.5);
  EXPECT_GT(d.learned[0][2], 0.9);
  // The rotation fit is the library's (tested against its own reference in
  // diagnostics_test), at k = 1 and 8, for each snapshot and the sinusoidal table.
  EXPECT_EQ(d.fit_offsets, (std::vector<int64_t>{1, 8}));
  ASSERT_EQ(d.fit_learned.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    for (size_t s = 0; s < 3; ++s) {
      EXPECT_EQ(d.fit_learned[i][s], tokpos::relative_position_fit(
                                         table_of(spec_, 5 * static_cast<int64_t>(s)), L, D, d.fit_offsets[i])
                                         .relative);
    }
  }
  EXPECT_LT(d.fit_sinusoidal[0], 1e-5);  // the sinusoidal table is a rotation, step to step
  EXPECT_GT(d.fit_learned[0][0], 0.5);   // noise is not
}

TEST_F(RunView, PlotDrawsTheFourPicturesWithTheSnapshotsCells) {
  tokpos::plot::PlotOptions o{.out = dir_ + "/out", .weights = path_, .lang = "en"};
  std::ostringstream log, warn;
  const auto files = tokpos::plot::make_plots(o, log, warn);
  EXPECT_EQ(warn.str(), "");
  ASSERT_EQ(files.size(), 4u);
  EXPECT_EQ(files[0].name, "run_heatmaps");
  EXPECT_EQ(files[1].name, "run_diagnostics");
  EXPECT_EQ(files[2].name, "run_fit");
  EXPECT_EQ(files[3].name, "run_loss");
  for (const auto& f : files) {
    const Image img(o.out + "/" + f.name + ".png");
    ASSERT_TRUE(img.ok()) << f.name;
    EXPECT_EQ(img.width(), tokpos::plot::kWidth);
    EXPECT_EQ(img.height(), tokpos::plot::kHeight);
    EXPECT_TRUE(std::filesystem::exists(o.out + "/" + f.name + ".svg")) << f.name;
  }
  EXPECT_NE(log.str().find("held-out loss at step 10: learned 2.7500, sinusoidal 2.5000"), std::string::npos)
      << log.str();
  // Each panel's cells are its snapshot's values, on that panel's own scale.
  const Image h(o.out + "/run_heatmaps.png");
  for (int i = 0; i < 3; ++i) {
    const auto& t = table_of(spec_, 5 * i);
    double vmax = 0;
    for (float v : t) vmax = std::max(vmax, static_cast<double>(std::abs(v)));
    const auto r = tokpos::plot::run_panel_rect(i, 3);
    for (int64_t p = 0; p < L; p += 3)
      for (int64_t d = 0; d < D; d += 2)
        EXPECT_TRUE(near(h.at(r.x + (d + 0.5) * r.w / D, r.y + (p + 0.5) * r.h / L),
                         tokpos::plot::diverging(t[p * D + d], vmax)))
            << "panel " << i << " p " << p << " d " << d;
  }
}

TEST_F(RunView, PlotSpeaksChineseWithTheSameNumbers) {
  std::ostringstream en, zh;
  tokpos::plot::make_plots({.out = dir_ + "/en", .weights = path_, .lang = "en"}, en);
  tokpos::plot::make_plots({.out = dir_ + "/zh", .weights = path_, .lang = "zh"}, zh);
  EXPECT_NE(zh.str().find("留出损失"), std::string::npos) << zh.str();
  EXPECT_EQ(zh.str().find("held-out"), std::string::npos) << zh.str();
  EXPECT_NE(zh.str().find("2.7500"), std::string::npos) << zh.str();
  // The pictures differ (their words do).
  const auto bytes = [](const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  EXPECT_NE(bytes(dir_ + "/en/run_loss.png"), bytes(dir_ + "/zh/run_loss.png"));
}

struct Ran {
  int rc;
  std::string out, err;
};
Ran sh(const std::string& cmd, const std::string& dir) {
  const int status = std::system((cmd + " >" + dir + "/stdout 2>" + dir + "/stderr").c_str());
  const auto read = [](const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, read(dir + "/stdout"), read(dir + "/stderr")};
}

TEST_F(RunView, TheCommandNeedsNoPresetForARunAndRefusesOne) {
  const Ran ok = sh(TOKPOS_CLI " plot --weights " + path_ + " --out " + dir_ + "/cli --lang zh", dir_);
  EXPECT_EQ(ok.rc, 0) << ok.err;
  for (const char* name : {"run_heatmaps", "run_diagnostics", "run_fit", "run_loss"}) {
    EXPECT_TRUE(std::filesystem::exists(dir_ + "/cli/" + name + ".png")) << name;
    EXPECT_NE(ok.out.find("wrote " + dir_ + "/cli/" + name + ".png"), std::string::npos) << ok.out;
  }
  const Ran preset = sh(TOKPOS_CLI " plot --weights " + path_ + " --preset gpt2 --out " + dir_ + "/x", dir_);
  EXPECT_NE(preset.rc, 0);
  EXPECT_NE(preset.err.find("is a training run (it has \"tokpos.run\" metadata): leave them out"),
            std::string::npos)
      << preset.err;
  const std::string bad = spoiled("bad", [](RunSpec& r) { r.tensors.erase("positions.step_10"); });
  const Ran missing = sh(TOKPOS_CLI " plot --weights " + bad + " --out " + dir_ + "/y", dir_);
  EXPECT_NE(missing.rc, 0);
  EXPECT_NE(missing.err.find("tensor 'positions.step_10' is missing"), std::string::npos) << missing.err;
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/x"));
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/y"));
}

// --lang labels a run's pictures only: beside a checkpoint or no file it is refused, not ignored.
TEST_F(RunView, LangIsRefusedWhereItWouldBeIgnored) {
  std::vector<float> t(L * D, 0.5f);
  const std::string ckpt = dir_ + "/gpt2.safetensors";
  tokpos::write_safetensors(ckpt, {{"wte.weight", "F32", {L, D}, t.data(), t.size() * 4},
                                   {"wpe.weight", "F32", {L, D}, t.data(), t.size() * 4}});
  std::ostringstream log;
  expect_error(
      [&] {
        tokpos::plot::make_plots({.out = dir_ + "/a", .weights = ckpt, .preset = "gpt2", .lang = "zh"}, log);
      },
      Status::kInvalidArgument, {"--lang labels a training run's pictures", "is a checkpoint"});
  expect_error([&] { tokpos::plot::make_plots({.out = dir_ + "/b", .lang = "zh"}, log); },
               Status::kInvalidArgument,
               {"--lang labels a training run's pictures, and no --weights is given"});
  expect_error([&] { tokpos::plot::make_plots({.out = dir_ + "/c", .weights = ckpt}, log); },
               Status::kInvalidArgument,
               {"--weights requires --preset gpt2|bert for a checkpoint", "has no \"tokpos.run\" metadata"});
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/a"));
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/b"));
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/c"));
  const Ran cli = sh(TOKPOS_CLI " plot --lang zh --out " + dir_ + "/d", dir_);
  EXPECT_NE(cli.rc, 0);
  EXPECT_NE(cli.err.find("--lang requires --weights"), std::string::npos) << cli.err;
}

// ---- tokpos serve -----------------------------------------------------------------

json ok(const ApiAnswer& a) {
  EXPECT_EQ(a.status, 200) << a.body.substr(0, 300);
  return json::parse(a.body);
}

TEST_F(RunView, TheApiAnswersForAStep) {
  const auto run = tokpos::frontend::load_training_run(path_);
  const json info = ok(tokpos::serve::api_run(&run))["run"];
  EXPECT_EQ(info["steps"], json::array({0, 5, 10}));
  EXPECT_EQ(info["context"], L);
  EXPECT_EQ(info["dim"], D);
  EXPECT_EQ(info["file"], "run.safetensors");
  EXPECT_EQ(info["losses"]["heldout_learned"].get<std::vector<float>>(),
            (std::vector<float>{5.6f, 3.5f, 2.75f}));
  EXPECT_EQ(info["config"]["every"], 5);
  EXPECT_EQ(info["beyond"]["learned"]["policy"], "error");
  for (size_t s = 0; s < 3; ++s) {
    EXPECT_NEAR(info["adjacent_mean"][s].get<double>(),
                mean_cos_at(table_of(spec_, 5 * static_cast<int64_t>(s)), 1), 1e-9);
  }
  EXPECT_EQ(json::parse(tokpos::serve::api_run(nullptr).body), json::parse(R"({"run": null})"));

  const json table = ok(tokpos::serve::api_run_table({{"step", "5"}}, &run));
  EXPECT_EQ(table["step"], 5);
  ASSERT_EQ(table["table"].size(), static_cast<size_t>(L));
  for (int64_t p = 0; p < L; ++p) {
    const auto row = table["table"][static_cast<size_t>(p)].get<std::vector<float>>();
    EXPECT_EQ(row, std::vector<float>(table_of(spec_, 5).begin() + p * D,
                                      table_of(spec_, 5).begin() + (p + 1) * D));
  }
  EXPECT_NEAR(table["adjacent_mean"].get<double>(), mean_cos_at(table_of(spec_, 5), 1), 1e-9);
  EXPECT_EQ(ok(tokpos::serve::api_run_table({}, &run))["step"], 10);  // the last step by default

  // positions=trained reads the step's snapshot; without step, the last one.
  const auto* last = &run.snapshots.back();
  const json sim = ok(tokpos::serve::api_similarity({{"positions", "trained"}, {"step", "0"}}, last, &run));
  EXPECT_EQ(sim["config"]["step"], 0);
  for (int64_t p = 0; p + 1 < L; ++p) {
    EXPECT_NEAR(sim["adjacent"][static_cast<size_t>(p)].get<double>(), cos_rows(table_of(spec_, 0), p, p + 1),
                1e-12)
        << p;
  }
  EXPECT_NEAR(
      ok(tokpos::serve::api_similarity({{"positions", "trained"}}, last, &run))["adjacent"][0].get<double>(),
      cos_rows(table_of(spec_, 10), 0, 1), 1e-12);
  const json embed =
      ok(tokpos::serve::api_embed({{"text", "Hi"}, {"positions", "trained"}, {"step", "5"}}, last, &run));
  EXPECT_EQ(embed["position_rows"][1].get<std::vector<float>>(),
            std::vector<float>(table_of(spec_, 5).begin() + D, table_of(spec_, 5).begin() + 2 * D));
  EXPECT_EQ(embed["config"]["weights"], "run.safetensors");
}

TEST_F(RunView, AStepThatIsNotTheRunsIsA400NamingStep) {
  const auto run = tokpos::frontend::load_training_run(path_);
  const auto* last = &run.snapshots.back();
  const auto error_of = [](const ApiAnswer& a) {
    EXPECT_EQ(a.status, 400) << a.body;
    const json j = json::parse(a.body);
    EXPECT_EQ(j["parameter"], "step") << a.body;
    return j["error"].get<std::string>();
  };
  std::string e = error_of(tokpos::serve::api_run_table({{"step", "7"}}, &run));
  EXPECT_NE(e.find("step = 7 is not a step of the training run run.safetensors: its 3 snapshots are at steps "
                   "0, 5, 10"),
            std::string::npos)
      << e;
  e = error_of(tokpos::serve::api_similarity({{"positions", "trained"}, {"step", "11"}}, last, &run));
  EXPECT_NE(e.find("11"), std::string::npos) << e;
  e = error_of(tokpos::serve::api_similarity({{"positions", "sinusoidal"}, {"step", "5"}}, last, &run));
  EXPECT_NE(e.find("positions = 'trained' only"), std::string::npos) << e;
  e = error_of(tokpos::serve::api_embed({{"text", "Hi"}, {"step", "5"}}));
  EXPECT_NE(e.find("needs a training run"), std::string::npos) << e;
  e = error_of(tokpos::serve::api_run_table({{"step", "5"}}, nullptr));
  EXPECT_NE(e.find("--weights RUN.safetensors"), std::string::npos) << e;
}

TEST_F(RunView, ServeWeightsRunStartsWithoutPresetAndABadRunStopsIt) {
  {
    serve_test::ServerProcess s({"--weights", path_});
    ASSERT_TRUE(s.wait_ready()) << s.out();
    httplib::Client cli("127.0.0.1", s.port());
    auto run = cli.Get("/api/run");
    ASSERT_TRUE(run);
    EXPECT_EQ(json::parse(run->body)["run"]["steps"], json::array({0, 5, 10}));
    auto trained = cli.Get("/api/trained");
    ASSERT_TRUE(trained);
    EXPECT_EQ(json::parse(trained->body)["trained"]["preset"], "run");
    auto table = cli.Get("/api/run/table?step=0");
    ASSERT_TRUE(table);
    EXPECT_EQ(json::parse(table->body)["table"][2].get<std::vector<float>>(),
              std::vector<float>(table_of(spec_, 0).begin() + 2 * D, table_of(spec_, 0).begin() + 3 * D));
    EXPECT_EQ(s.stop(SIGTERM), 0);
  }
  {
    serve_test::ServerProcess s({"--weights", path_, "--preset", "bert"});
    EXPECT_EQ(s.wait_exit(), 1);
    EXPECT_NE(s.err().find("is a training run"), std::string::npos) << s.err();
  }
  {
    const std::string bad = spoiled("bad", [](RunSpec& r) { r.metadata["steps"] = "[0, 5, 5]"; });
    serve_test::ServerProcess s({"--weights", bad});
    EXPECT_EQ(s.wait_exit(), 1);
    EXPECT_NE(
        s.err().find("tokpos serve: error: " + bad + ": metadata 'steps': entry 2 = '5' does not follow 5"),
        std::string::npos)
        << s.err();
  }
}

}  // namespace
