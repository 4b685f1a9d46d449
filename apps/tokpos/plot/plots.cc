#include "plots.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>
#include <set>

#include "format.h"
#include "frontend/lang.h"
#include "frontend/messages.h"
#include "frontend/params.h"
#include "progress.h"
#include "tokpos/composer.h"
#include "tokpos/diagnostics.h"
#include "tokpos/error.h"
#include "tokpos/position_table.h"
#include "tokpos/positions.h"
#include "tokpos/rope.h"
#include "tokpos/tokenizer.h"

namespace tokpos::plot {
namespace {

void title(cairo_t* cr, const std::string& main, const std::string& sub) {
  text(cr, kWidth / 2.0, 24, main, 18, Align::kCenter, true);
  text(cr, kWidth / 2.0, 50, sub, 13, Align::kCenter, false, 0, kGrey);
}

double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, static_cast<double>(std::abs(x)));
  return m > 0 ? m : 1.0;
}

void ensure_directory(const std::string& dir) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) == 0) {
    if (!S_ISDIR(st.st_mode)) throw Error(Status::kInvalidArgument, "tokpos plot: --out '" + dir + "' is a file, not a directory");
    return;
  }
  // Create it and any missing parents.
  for (size_t pos = 1; pos <= dir.size(); ++pos) {
    if (pos == dir.size() || dir[pos] == '/') {
      const std::string part = dir.substr(0, pos);
      if (::mkdir(part.c_str(), 0755) != 0 && errno != EEXIST) {
        throw Error(Status::kIoError, "tokpos plot: cannot create --out directory '" + part + "': " + std::strerror(errno));
      }
    }
  }
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    throw Error(Status::kInvalidArgument, "tokpos plot: --out '" + dir + "' is not a directory");
  }
}

void table_figure(cairo_t* cr, const std::vector<float>& t, int64_t L, int64_t D, double vmax, const std::string& main,
                  const std::string& sub) {
  title(cr, main, sub);
  heatmap(cr, kTableRect, t, static_cast<int>(L), static_cast<int>(D), vmax);
  heatmap_axes(cr, kTableRect, static_cast<int>(L), static_cast<int>(D), "dimension i", "position p");
  colorbar(cr, {kTableRect.x + kTableRect.w + 20, kTableRect.y, 22, kTableRect.h}, vmax, "value");
}

struct Series {
  std::string label;
  std::vector<double> x, y;
};

// Line-and-marker series on log-y axes inside kSeriesRect, a legend to its right.
void series_figure(cairo_t* cr, const std::vector<Series>& series, double x0, double x1, double y0, double y1,
                   const std::vector<double>& xticks, const std::string& xlabel, const std::string& ylabel) {
  const Axes a{kSeriesRect, x0, x1, y0, y1, true};
  std::vector<double> decades;
  for (double v = y0; v <= y1 * 1.0001; v *= 10) decades.push_back(v);
  draw_axes(cr, a, xlabel, ylabel, xticks, decades);
  // The first series is drawn last, on top, where series coincide.
  for (size_t s = series.size(); s-- > 0;) {
    const Rgb c = kSeriesColors[s % 5];
    cairo_set_source_rgb(cr, c.r, c.g, c.b);
    cairo_set_line_width(cr, 1.5);
    for (size_t k = 0; k < series[s].x.size(); ++k) {
      const double x = a.px(series[s].x[k]), y = a.py(series[s].y[k]);
      if (k == 0) cairo_move_to(cr, x, y);
      else cairo_line_to(cr, x, y);
    }
    cairo_stroke(cr);
    for (size_t k = 0; k < series[s].x.size(); ++k) {
      cairo_arc(cr, a.px(series[s].x[k]), a.py(series[s].y[k]), 3.0, 0, 2 * M_PI);
      cairo_fill(cr);
    }
  }
  for (size_t s = 0; s < series.size(); ++s) {  // the legend, in order
    const Rgb c = kSeriesColors[s % 5];
    cairo_set_source_rgb(cr, c.r, c.g, c.b);
    const double ly = a.area.y + 20 + 26 * static_cast<double>(s), lx = a.area.x + a.area.w + 24;
    cairo_rectangle(cr, lx, ly - 2, 28, 4);
    cairo_fill(cr);
    cairo_arc(cr, lx + 14, ly, 4.0, 0, 2 * M_PI);
    cairo_fill(cr);
    text(cr, lx + 38, ly, series[s].label, 13);
  }
}

// Two curves of cosine similarity by offset k = 0 .. K, in red and blue, with a legend.
void offset_figure(cairo_t* cr, int64_t K, const std::vector<double>& red, const std::string& red_label,
                   const std::vector<double>& blue, const std::string& blue_label, const std::string& sub) {
  title(cr, "Cosine similarity of P[p] and P[p+k], mean over p", sub);
  double lo = 0;
  for (double v : red) lo = std::min(lo, v);
  for (double v : blue) lo = std::min(lo, v);
  Axes a{{100, 80, 800, 470}, 0, static_cast<double>(K), std::floor(lo * 5) / 5, 1.0};
  draw_axes(cr, a, "offset k", "cosine similarity", nice_ticks(0, static_cast<double>(K), 8), nice_ticks(a.y0, 1.0, 6));
  auto line = [&](const std::vector<double>& ys, Rgb c) {
    cairo_set_source_rgb(cr, c.r, c.g, c.b);
    cairo_set_line_width(cr, 2.5);
    for (size_t k = 0; k < ys.size(); ++k) {
      if (k == 0) cairo_move_to(cr, a.px(0), a.py(ys[0]));
      else cairo_line_to(cr, a.px(static_cast<double>(k)), a.py(ys[k]));
    }
    cairo_stroke(cr);
  };
  line(red, kRed);
  line(blue, kBlue);
  for (int i = 0; i < 2; ++i) {  // legend
    const Rgb c = i == 0 ? kRed : kBlue;
    const double y = a.area.y + 24 + 24 * i, x = a.area.x + a.area.w - 230;
    cairo_set_source_rgb(cr, c.r, c.g, c.b);
    cairo_rectangle(cr, x, y - 2, 28, 4);
    cairo_fill(cr);
    text(cr, x + 36, y, i == 0 ? red_label : blue_label, 13);
  }
}

// Two L x L similarity matrices side by side (kMatrixRect), one colour bar.
void matrix_figure(cairo_t* cr, int64_t L, const std::vector<float>& left, const std::string& left_name,
                   const std::vector<float>& right, const std::string& right_name) {
  title(cr, "Cosine similarity between every pair of positions", "cos(P[p], P[q]) for p, q < " + std::to_string(L));
  const std::string* names[2] = {&left_name, &right_name};
  const std::vector<float>* data[2] = {&left, &right};
  for (int i = 0; i < 2; ++i) {
    const Rect r = kMatrixRect[i];
    text(cr, r.x + r.w / 2, r.y - 16, *names[i], 15, Align::kCenter, true);
    heatmap(cr, r, *data[i], static_cast<int>(L), static_cast<int>(L), 1.0);
    heatmap_axes(cr, r, static_cast<int>(L), static_cast<int>(L), "position q", "position p");
  }
  colorbar(cr, {876, kMatrixRect[0].y, 18, kMatrixRect[0].h}, 1.0, "cosine");
}

// cos(P[p], P[q]) for every pair, row-major L x L.
std::vector<float> similarity_matrix(const std::vector<float>& t, int64_t L, int64_t D) {
  std::vector<float> m(static_cast<size_t>(L * L));
  for (int64_t p = 0; p < L; ++p)
    for (int64_t q = 0; q < L; ++q)
      m[p * L + q] = static_cast<float>(cosine(std::span(t).subspan(p * D, D), std::span(t).subspan(q * D, D)));
  return m;
}

// Refuses a file where the directory should be, up front.
void check_out(const std::string& out) {
  if (struct stat st {}; ::stat(out.c_str(), &st) == 0 && !S_ISDIR(st.st_mode)) {
    throw Error(Status::kInvalidArgument, "tokpos plot: --out '" + out + "' is a file, not a directory");
  }
}

// The figures of one plot command: each drawn when it is saved (the progress
// line names it), all written together by finish, so a failure leaves the
// previous pictures as they were.
class FigureSet {
 public:
  explicit FigureSet(Progress& progress) : progress_(progress) {}

  void save(const std::string& name, const std::string& caption, const std::function<void(cairo_t*)>& draw) {
    progress_.step(name);
    figures_.push_back(render_figure(name, kWidth, kHeight, draw));
    files_.push_back({name, caption});
  }

  // Makes the directory, writes every figure, warns about characters drawn as
  // boxes, lists the files and returns them.
  std::vector<PlotFile> finish(const PlotOptions& o, std::ostream& log, std::ostream& warn) {
    progress_.step("writing files");
    ensure_directory(o.out);
    write_figures(o.out, figures_);
    progress_.done();
    std::set<char32_t> missing;
    for (const Figure& f : figures_) missing.insert(f.missing_glyphs.begin(), f.missing_glyphs.end());
    if (!missing.empty()) warn << missing_glyphs_warning(missing) << "\n";
    for (const auto& f : files_) {
      log << "wrote " << o.out << "/" << f.name << ".png and .svg (" << kWidth << "x" << kHeight
          << "): " << f.caption << "\n";
    }
    return files_;
  }

 private:
  Progress& progress_;
  std::vector<Figure> figures_;
  std::vector<PlotFile> files_;
};

std::vector<PlotFile> make_trained_plots(const PlotOptions& o, std::ostream& log, std::ostream& warn) {
  check_out(o.out);
  Progress progress("plot", 5);
  progress.step("reading " + o.weights);
  const TrainedComparison c = compare_trained(o);
  const int64_t L = c.trained.max_context, D = c.trained.dim;
  const std::string who = c.trained.file_name + " (" + c.trained.preset + ")";
  const std::string sinus_name = "sinusoidal (" + o.layout + ")";
  FigureSet figs(progress);
  // A few large values would wash out the rest: the colour scale ends at the
  // 99th percentile of |value|, and what is larger saturates.
  std::vector<float> mags(c.trained.table.size());
  std::transform(c.trained.table.begin(), c.trained.table.end(), mags.begin(), [](float v) { return std::abs(v); });
  const auto at = mags.begin() + static_cast<std::ptrdiff_t>((mags.size() - 1) * 99 / 100);
  std::nth_element(mags.begin(), at, mags.end());
  const double vmax = *at > 0 ? static_cast<double>(*at) : max_abs(c.trained.table);
  figs.save(
      "trained_table", "the trained position table of " + who + ", one row per position", [&](cairo_t* cr) {
        table_figure(cr, c.trained.table, L, D, vmax, "Trained position table: " + who,
                     "L = " + std::to_string(L) + " positions x D = " + std::to_string(D) +
                         "; colours end at " + fmt("%.3g", vmax) + ", the 99th percentile of |value| (max " +
                         fmt("%.3g", max_abs(c.trained.table)) + ")");
      });
  figs.save("trained_similarity_matrix",
            "left: the trained table of " + who + ", right: a sinusoidal table of the same L and D",
            [&](cairo_t* cr) {
              matrix_figure(cr, L, c.matrix_trained, "trained: " + c.trained.file_name, c.matrix_sinusoidal,
                            sinus_name);
            });
  figs.save(
      "trained_similarity_by_offset",
      "mean adjacent cosine " + fmt("%.4f", c.by_offset_trained.size() > 1 ? c.by_offset_trained[1] : 1.0) +
          " (trained) against " +
          fmt("%.4f", c.by_offset_sinusoidal.size() > 1 ? c.by_offset_sinusoidal[1] : 1.0) + " (sinusoidal)",
      [&](cairo_t* cr) {
        offset_figure(cr, L - 1, c.by_offset_sinusoidal, sinus_name, c.by_offset_trained,
                      "trained: " + c.trained.file_name,
                      "the trained table of " + who + " beside a sinusoidal table of the same shape");
      });
  return figs.finish(o, log, warn);
}

// One line of a linear chart: solid with markers, or dashed without.
struct Line {
  std::string label;  // empty: not in the legend
  std::vector<double> x, y;
  Rgb color;
  bool dashed = false;
};

// Lines on linear axes inside kSeriesRect, the labelled ones in a legend to its right.
void line_chart(cairo_t* cr, const std::vector<Line>& lines, double x0, double x1, double y0, double y1,
                const std::string& xlabel, const std::string& ylabel) {
  const Axes a{kSeriesRect, x0, x1, y0, y1, false};
  // x is an optimizer step: whole numbers only.
  std::vector<double> xticks = nice_ticks(x0, x1, 8);
  std::erase_if(xticks, [](double t) { return t != std::floor(t); });
  draw_axes(cr, a, xlabel, ylabel, xticks, nice_ticks(y0, y1, 6));
  cairo_save(cr);
  cairo_rectangle(cr, a.area.x, a.area.y, a.area.w, a.area.h);
  cairo_clip(cr);
  for (const Line& l : lines) {
    cairo_set_source_rgb(cr, l.color.r, l.color.g, l.color.b);
    cairo_set_line_width(cr, 2);
    const double dash[2] = {7, 5};
    cairo_set_dash(cr, dash, l.dashed ? 2 : 0, 0);
    for (size_t k = 0; k < l.x.size(); ++k) {
      if (k == 0) cairo_move_to(cr, a.px(l.x[k]), a.py(l.y[k]));
      else cairo_line_to(cr, a.px(l.x[k]), a.py(l.y[k]));
    }
    cairo_stroke(cr);
    cairo_set_dash(cr, dash, 0, 0);
    if (!l.dashed && l.x.size() <= 80) {
      for (size_t k = 0; k < l.x.size(); ++k) {
        cairo_arc(cr, a.px(l.x[k]), a.py(l.y[k]), 3.0, 0, 2 * M_PI);
        cairo_fill(cr);
      }
    }
  }
  cairo_restore(cr);
  double ly = a.area.y + 20;
  for (const Line& l : lines) {
    if (l.label.empty()) continue;
    const double lx = a.area.x + a.area.w + 24;
    cairo_set_source_rgb(cr, l.color.r, l.color.g, l.color.b);
    cairo_set_line_width(cr, 3);
    const double dash[2] = {7, 5};
    cairo_set_dash(cr, dash, l.dashed ? 2 : 0, 0);
    cairo_move_to(cr, lx, ly);
    cairo_line_to(cr, lx + 28, ly);
    cairo_stroke(cr);
    cairo_set_dash(cr, dash, 0, 0);
    text(cr, lx + 38, ly, l.label, 13);
    ly += 26;
  }
}

// [lo, hi] of the values, widened a little (and to a non-empty range).
std::pair<double, double> padded_range(const std::vector<const std::vector<double>*>& series) {
  double lo = INFINITY, hi = -INFINITY;
  for (const auto* s : series)
    for (double v : *s) lo = std::min(lo, v), hi = std::max(hi, v);
  if (!(lo <= hi)) return {0, 1};
  const double pad = hi > lo ? 0.05 * (hi - lo) : std::max(0.05 * std::abs(hi), 0.05);
  return {lo - pad, hi + pad};
}

std::vector<PlotFile> make_run_plots(const PlotOptions& o, std::ostream& log, std::ostream& warn) {
  if (!o.preset.empty() || !o.map.empty()) {
    throw Error(Status::kInvalidArgument, "tokpos plot: --preset and --map read a checkpoint; '" + o.weights +
                                              "' is a training run (it has \"" + frontend::kRunMetadataKey +
                                              "\" metadata): leave them out");
  }
  const frontend::Lang lang = o.lang.empty() ? frontend::default_lang() : frontend::parse_lang(o.lang);
  const auto tr = [lang](std::string_view key, std::initializer_list<std::string_view> args = {}) {
    return frontend::tr(lang, key, args);
  };
  check_out(o.out);
  Progress progress("plot", 6);
  progress.step("reading " + o.weights);
  const frontend::TrainingRun run = frontend::load_training_run(o.weights);
  const RunDiagnostics diag = run_diagnostics(run);
  const int64_t L = run.max_context, D = run.dim;
  const size_t S = run.steps.size();
  std::vector<double> steps(run.steps.begin(), run.steps.end());
  const double x0 = S > 1 ? steps.front() : steps.front() - 1, x1 = S > 1 ? steps.back() : steps.back() + 1;
  const std::string last_step = std::to_string(run.steps.back());

  FigureSet figs(progress);

  std::string shown_steps;
  for (size_t i = 0; i < diag.shown.size(); ++i) shown_steps += (i ? ", " : "") + std::to_string(run.steps[diag.shown[i]]);
  figs.save("run_heatmaps", tr("run.caption.heatmaps", {shown_steps}), [&](cairo_t* cr) {
    // Each panel has its own colour scale: the structure, not the size, is what changes most.
    title(cr, tr("run.heatmaps.title", {run.file_name}),
          tr("run.heatmaps.sub", {std::to_string(L), std::to_string(D), std::to_string(diag.shown.size()),
                                  std::to_string(S)}));
    const int n = static_cast<int>(diag.shown.size());
    for (int i = 0; i < n; ++i) {
      const auto& t = run.snapshots[diag.shown[static_cast<size_t>(i)]].table;
      const Rect r = run_panel_rect(i, n);
      const double vmax = max_abs(t);
      text(cr, r.x + r.w / 2, r.y - 12,
           tr("run.panel", {std::to_string(run.steps[diag.shown[static_cast<size_t>(i)]]), fmt("%.3g", vmax)}), 13,
           Align::kCenter, true);
      heatmap(cr, r, t, static_cast<int>(L), static_cast<int>(D), vmax);
      heatmap_axes(cr, r, static_cast<int>(L), static_cast<int>(D), "", "");
    }
    text(cr, kWidth / 2.0, kHeight - 16, tr("run.axis.dimension"), 14, Align::kCenter);
    text(cr, 22, kHeight / 2.0, tr("run.axis.position"), 14, Align::kCenter, false, -M_PI / 2);
  });

  // A chart of lines against the step; unit_range keeps 0 and 1 on the y axis.
  const auto step_chart = [&](const std::string& name, const std::string& caption, const std::string& head,
                              const std::string& sub, const std::vector<Line>& lines,
                              const std::string& y_label, bool unit_range) {
    figs.save(name, caption, [&](cairo_t* cr) {
      title(cr, head, sub);
      std::vector<const std::vector<double>*> all;
      for (const auto& l : lines) all.push_back(&l.y);
      auto [lo, hi] = padded_range(all);
      if (unit_range) lo = std::min(lo, 0.0), hi = std::max(hi, 1.0);
      line_chart(cr, lines, x0, x1, lo, hi, tr("run.axis.step"), y_label);
    });
  };

  std::vector<Line> diag_lines;
  for (size_t i = 0; i < diag.offsets.size(); ++i) {
    const Rgb c = kSeriesColors[(i + 1) % 5];
    const std::string k = std::to_string(diag.offsets[i]);
    diag_lines.push_back({tr(diag.offsets[i] == 1 ? "run.diag.adjacent" : "run.diag.offset", {k}), steps,
                          diag.learned[i], c, false});
    diag_lines.push_back({"", {x0, x1}, {diag.sinusoidal[i], diag.sinusoidal[i]}, c, true});
  }
  const std::string adj_first = fmt("%.4f", diag.learned[0].front()), adj_last = fmt("%.4f", diag.learned[0].back());
  step_chart("run_diagnostics",
             tr("run.caption.diagnostics", {adj_first, std::to_string(run.steps.front()), adj_last, last_step,
                                            fmt("%.4f", diag.sinusoidal[0])}),
             tr("run.diag.title"), tr("run.diag.sub"), diag_lines, tr("run.axis.cosine"), true);

  std::vector<Line> fit_lines;
  for (size_t i = 0; i < diag.fit_offsets.size(); ++i) {
    const Rgb c = kSeriesColors[(i + 1) % 5];
    fit_lines.push_back({tr("run.fit.offset", {std::to_string(diag.fit_offsets[i])}), steps, diag.fit_learned[i], c, false});
    fit_lines.push_back({"", {x0, x1}, {diag.fit_sinusoidal[i], diag.fit_sinusoidal[i]}, c, true});
  }
  step_chart("run_fit",
             tr("run.caption.fit", {fmt("%.3g", diag.fit_learned[0].front()), std::to_string(run.steps.front()),
                                    fmt("%.3g", diag.fit_learned[0].back()), last_step,
                                    fmt("%.3g", diag.fit_sinusoidal[0])}),
             tr("run.fit.title"), tr("run.fit.sub"), fit_lines, tr("run.axis.residual"), true);

  const auto as_double = [](const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); };
  const std::vector<Line> loss_lines = {
      {tr("run.loss.train.learned"), steps, as_double(run.loss_train_learned), kRed, false},
      {tr("run.loss.heldout.learned"), steps, as_double(run.loss_heldout_learned), kRed, true},
      {tr("run.loss.train.sinusoidal"), steps, as_double(run.loss_train_sinusoidal), kBlue, false},
      {tr("run.loss.heldout.sinusoidal"), steps, as_double(run.loss_heldout_sinusoidal), kBlue, true}};
  const std::string held_learned = fmt("%.4f", run.loss_heldout_learned.back()),
                    held_sinus = fmt("%.4f", run.loss_heldout_sinusoidal.back());
  step_chart("run_loss", tr("run.caption.loss", {last_step, held_learned, held_sinus}), tr("run.loss.title"),
             tr("run.loss.sub", {last_step, held_learned, held_sinus}), loss_lines, tr("run.axis.loss"), false);
  return figs.finish(o, log, warn);
}

}  // namespace

std::vector<ByteGroup> byte_groups(std::string_view text, int64_t shown) {
  std::vector<ByteGroup> out;
  const auto n = static_cast<size_t>(std::clamp<int64_t>(shown, 0, static_cast<int64_t>(text.size())));
  for (const Utf8Char& c : utf8_chars(text)) {
    if (c.begin >= n) break;
    ByteGroup g;
    g.first = static_cast<int64_t>(c.begin);
    g.count = static_cast<int64_t>(std::min(c.size, n - c.begin));
    g.cut = c.begin + c.size > n;
    const bool control = c.code < 0x20 || (c.code >= 0x7F && c.code < 0xA0);
    if (!c.valid) g.label = "\xEF\xBF\xBD";  // U+FFFD: this byte is no character
    else if (!control) g.label = std::string(text.substr(c.begin, c.size));
    out.push_back(std::move(g));
  }
  return out;
}

TrainedComparison compare_trained(const PlotOptions& o) {
  const auto layout = frontend::parse_layout_param(o.layout);
  TrainedComparison c;
  c.trained = frontend::load_trained_positions(o.weights, o.preset, frontend::parse_name_map("tokpos plot", o.preset, o.map));
  const int64_t L = c.trained.max_context, D = c.trained.dim;
  if (L < frontend::kPlotContext.min || L > frontend::kPlotContext.max || D < frontend::kPlotDim.min ||
      D > frontend::kPlotDim.max) {
    throw Error(Status::kInvalidArgument,
                "tokpos plot: the position table of '" + c.trained.file_name + "' is " + std::to_string(L) + " x " +
                    std::to_string(D) + "; tokpos plot draws tables of " + std::to_string(frontend::kPlotContext.min) +
                    " to " + std::to_string(frontend::kPlotContext.max) + " positions and " +
                    std::to_string(frontend::kPlotDim.min) + " to " + std::to_string(frontend::kPlotDim.max) +
                    " dimensions");
  }
  // A NaN or infinity (a damaged file) was refused by the loader, naming the row and column.
  c.sinusoidal = position_table(L, D, 0, TableOptions{.layout = layout, .base = o.base});
  c.by_offset_trained = cosine_by_offset(c.trained.table, L, D, L - 1);
  c.by_offset_sinusoidal = cosine_by_offset(c.sinusoidal, L, D, L - 1);
  c.matrix_trained = similarity_matrix(c.trained.table, L, D);
  c.matrix_sinusoidal = similarity_matrix(c.sinusoidal, L, D);
  return c;
}

Rect run_panel_rect(int i, int n) {
  const int cols = std::clamp(n, 1, 3), rows = (std::max(n, 1) + cols - 1) / cols;
  const double gx = 80, gy = 100, gw = 840, gh = 500, cw = gw / cols, ch = gh / rows;
  return {gx + cw * (i % cols) + 10, gy + ch * (i / cols) + 24, cw - 50, ch - 60};
}

RunDiagnostics run_diagnostics(const frontend::TrainingRun& run) {
  const int64_t L = run.max_context, D = run.dim;
  if (L < frontend::kPlotContext.min || L > frontend::kPlotContext.max || D < frontend::kPlotDim.min ||
      D > frontend::kPlotDim.max) {
    throw Error(Status::kInvalidArgument,
                "tokpos plot: the position tables of '" + run.file_name + "' are " + std::to_string(L) + " x " +
                    std::to_string(D) + "; tokpos plot draws tables of " + std::to_string(frontend::kPlotContext.min) +
                    " to " + std::to_string(frontend::kPlotContext.max) + " positions and " +
                    std::to_string(frontend::kPlotDim.min) + " to " + std::to_string(frontend::kPlotDim.max) +
                    " dimensions");
  }
  RunDiagnostics d;
  const size_t S = run.steps.size(), n = std::min<size_t>(S, 6);
  for (size_t j = 0; j < n; ++j) d.shown.push_back(n == 1 ? 0 : (j * (S - 1) + (n - 1) / 2) / (n - 1));
  for (const int64_t k : {1, 4, 16, 64})
    if (k < L) d.offsets.push_back(k);
  const int64_t K = d.offsets.back();
  std::vector<std::vector<double>> by_offset;
  for (const auto& snap : run.snapshots) by_offset.push_back(cosine_by_offset(snap.table, L, D, K));
  const auto sinus = cosine_by_offset(run.sinusoidal, L, D, K);
  for (const int64_t k : d.offsets) {
    std::vector<double> series;
    for (const auto& b : by_offset) series.push_back(b[static_cast<size_t>(k)]);
    d.learned.push_back(std::move(series));
    d.sinusoidal.push_back(sinus[static_cast<size_t>(k)]);
  }
  for (const int64_t k : {1, 8}) {
    if (k >= L) continue;
    d.fit_offsets.push_back(k);
    std::vector<double> series;
    for (const auto& snap : run.snapshots) series.push_back(relative_position_fit(snap.table, L, D, k).relative);
    d.fit_learned.push_back(std::move(series));
    d.fit_sinusoidal.push_back(relative_position_fit(run.sinusoidal, L, D, k).relative);
  }
  return d;
}

std::vector<PlotFile> make_plots(const PlotOptions& o, std::ostream& log, std::ostream& warn) {
  if (!o.weights.empty()) {
    if (frontend::is_training_run(o.weights)) return make_run_plots(o, log, warn);
    if (o.preset.empty()) {
      throw Error(Status::kInvalidArgument,
                  "tokpos plot: --weights requires --preset gpt2|bert for a checkpoint: '" + o.weights + "' has no \"" +
                      frontend::kRunMetadataKey + "\" metadata, so it is not a training run");
    }
    if (!o.lang.empty()) {
      throw Error(Status::kInvalidArgument, "tokpos plot: --lang labels a training run's pictures; '" + o.weights +
                                                "' is a checkpoint, whose pictures are drawn in English: leave it out");
    }
    return make_trained_plots(o, log, warn);
  }
  if (!o.preset.empty() || !o.map.empty()) {
    throw Error(Status::kInvalidArgument, "tokpos plot: --preset and --map read a --weights file, and none is given");
  }
  if (!o.lang.empty()) {
    throw Error(Status::kInvalidArgument, "tokpos plot: --lang labels a training run's pictures, and no --weights is given");
  }
  // The rules the command line checks the flags by, for callers that pass options directly.
  const auto layout = frontend::parse_layout_param(o.layout);
  (void)frontend::parse(frontend::kPlotDim, std::to_string(o.dim));
  (void)frontend::parse(frontend::kPlotContext, std::to_string(o.context));
  const int64_t L = o.context, D = o.dim;
  // A file where the directory should be is refused here, up front; the directory itself
  // is made at the end, with the pictures, so a failed or interrupted run
  // leaves nothing behind.
  check_out(o.out);
  // Every picture is drawn in memory first and written only when all are
  // ready: until then the previous pictures stay as they were.
  Progress progress("plot", 12);
  progress.step("tables");
  const TableOptions topt{.layout = layout, .base = o.base};
  const auto sinus = position_table(L, D, 0, topt);  // validates base
  LearnedPositionalEmbedding learned({.max_context = L, .dim = D, .seed = o.seed});
  const std::vector<float> learned_t(learned.table().begin(), learned.table().end());

  FigureSet figs(progress);

  const std::string shape = "L = " + std::to_string(L) + " positions x D = " + std::to_string(D);
  figs.save(
      "position_table",
      "row 0 alternates sin 0 = 0 (white) and cos 0 = 1 (red); fast columns on the left, slow on the right",
      [&](cairo_t* cr) {
        table_figure(cr, sinus, L, D, 1.0,
                     "Sinusoidal position table (" + o.layout + ", base " + fmt("%g", o.base) + ")",
                     shape + ": each row is the vector added at one position");
      });
  const double lv = max_abs(learned_t);
  figs.save("learned_table",
            "a freshly initialised learned table is noise: no structure along positions until training",
            [&](cairo_t* cr) {
              table_figure(cr, learned_t, L, D, lv, "Learned position table at initialisation",
                           shape + ", drawn from N(0, 0.02^2) with seed " + std::to_string(o.seed));
            });

  const int64_t K = L - 1;
  progress.step("cosine by offset");
  const auto sim_s = cosine_by_offset(sinus, L, D, K), sim_l = cosine_by_offset(learned_t, L, D, K);
  figs.save(
      "similarity_by_offset",
      "sinusoidal rows stay similar to near neighbours and decay smoothly; learned rows start unrelated",
      [&](cairo_t* cr) {
        offset_figure(cr, K, sim_s, "sinusoidal (" + o.layout + ")", sim_l, "learned, at init",
                      "how much a position's vector still resembles the one k steps later");
      });

  progress.step("similarity matrices");
  const auto ms = similarity_matrix(sinus, L, D), ml = similarity_matrix(learned_t, L, D);
  figs.save("similarity_matrix",
            "the sinusoidal matrix has bands along the diagonal (similarity depends on p - q); the learned "
            "one only its diagonal",
            [&](cairo_t* cr) { matrix_figure(cr, L, ms, "sinusoidal", ml, "learned, at init"); });

  const int64_t D2 = std::max<int64_t>(2, D / 2);
  figs.save(
      "wavelength_bands",
      "halving D keeps the range of wavelengths but takes bigger steps between neighbouring pairs",
      [&](cairo_t* cr) {
        title(cr,
              "Wavelength of each sin/cos pair: D = " + std::to_string(D) + " and D = " + std::to_string(D2),
              "pair k repeats every 2 pi / w_k positions; log scale, one band per decade");
        const int64_t dims[2] = {D, D2};
        double top = 10;
        std::vector<double> waves[2];
        for (int i = 0; i < 2; ++i) {
          const int64_t n = num_frequency_pairs(layout, dims[i]);
          for (int64_t k = 0; k < n; ++k) {
            waves[i].push_back(2 * M_PI / frequency(k, dims[i], topt));
            top = std::max(top, waves[i].back());
          }
        }
        top = std::pow(10.0, std::ceil(std::log10(top)));
        for (int i = 0; i < 2; ++i) {
          const double n = static_cast<double>(std::max<size_t>(waves[i].size(), 1));
          Axes a{{90.0 + 445 * i, 90, 380, 450}, -0.5, n - 0.5, 1, top, true};
          std::vector<double> decades;
          for (double v = 1; v <= top * 1.0001; v *= 10) decades.push_back(v);
          draw_axes(cr, a, "pair k", i == 0 ? "wavelength (positions)" : "", nice_ticks(0, n - 1, 5),
                    decades);
          for (size_t k = 0; k < waves[i].size(); ++k) {
            const double x = a.px(static_cast<double>(k)), bw = std::max(1.0, 0.7 * a.area.w / n);
            const double shade = std::log10(waves[i][k]) / std::log10(top);
            cairo_set_source_rgb(cr, 0.95 - 0.8 * shade, 0.55 - 0.35 * shade, 0.25 + 0.45 * shade);
            cairo_rectangle(cr, x - bw / 2, a.py(waves[i][k]), bw, a.area.y + a.area.h - a.py(waves[i][k]));
            cairo_fill(cr);
          }
          text(cr, a.area.x + a.area.w / 2, a.area.y - 16,
               "D = " + std::to_string(dims[i]) + ": " + std::to_string(waves[i].size()) + " pairs, x" +
                   fmt("%.3f", waves[i].size() > 1 ? waves[i][1] / waves[i][0] : 1.0) + " per step",
               14, Align::kCenter, true);
        }
      });

  // The worked example: a few tokens, the rows they pick, the position rows, the sum.
  const std::string example = o.text.empty() ? std::string("Hello") : o.text;
  const auto ids_all = ByteTokenizer::encode(example);
  const int64_t T = std::min<int64_t>(static_cast<int64_t>(ids_all.size()), std::min<int64_t>(8, L));
  const std::vector<int64_t> ids(ids_all.begin(), ids_all.begin() + T);
  const int64_t show = std::min<int64_t>(D, 16);
  TokenEmbedding token({.vocab_size = ByteTokenizer::kVocabSize, .dim = D, .seed = o.seed});
  auto cut = [&](auto row_of) {  // T rows x `show` columns
    std::vector<float> m(static_cast<size_t>(T * show));
    for (int64_t t = 0; t < T; ++t)
      for (int64_t d = 0; d < show; ++d) m[t * show + d] = row_of(t)[d];
    return m;
  };
  const auto tok_rows = cut([&](int64_t t) { return token.table().data() + ids[t] * D; });
  const auto pos_rows = cut([&](int64_t t) { return sinus.data() + t * D; });
  std::vector<float> sum_rows(tok_rows.size());
  for (size_t k = 0; k < sum_rows.size(); ++k) sum_rows[k] = tok_rows[k] + pos_rows[k];
  figs.save(
      "lookup",
      "each id picks one row of the token table; the row for its position is added; the sum goes to "
      "attention",
      [&](cairo_t* cr) {
        // The characters of the T bytes shown (a character cut by the limit is left out).
        title(cr, "The lookup, step by step: \"" + utf8_label(example, static_cast<size_t>(T)) + "\"",
              "first " + std::to_string(show) + " of D = " + std::to_string(D) +
                  " columns; each panel has its own colour scale");
        const double y0 = 110, h = 420, rowh = h / static_cast<double>(T);
        for (int64_t t = 0; t < T; ++t) {  // each byte, as hex, and its id
          const auto byte = static_cast<unsigned char>(ids[t] - ByteTokenizer::kByteOffset);
          text(cr, 58, y0 + rowh * (static_cast<double>(t) + 0.5),
               byte_label(byte) + "  ->  id " + std::to_string(ids[t]), 14);
        }
        // Each character once, beside its bytes, tied to them by a bracket
        // when it has several; an invalid byte keeps its row alone.
        for (const ByteGroup& g : byte_groups(example, T)) {
          const double top = y0 + rowh * static_cast<double>(g.first),
                       bottom = top + rowh * static_cast<double>(g.count);
          if (!g.label.empty()) text(cr, 24, (top + bottom) / 2, g.label, 18, Align::kCenter);
          if (g.count > 1) {
            cairo_set_source_rgb(cr, 0.3, 0.3, 0.3);
            cairo_set_line_width(cr, 1.5);
            cairo_move_to(cr, 52, top + 6);
            cairo_line_to(cr, 46, top + 6);
            cairo_line_to(cr, 46, bottom - 6);
            cairo_line_to(cr, 52, bottom - 6);
            cairo_stroke(cr);
          }
        }
        const char* names[3] = {"token rows  table[id]", "position rows  P[t]", "sum  (input to attention)"};
        const std::vector<float>* panels[3] = {&tok_rows, &pos_rows, &sum_rows};
        for (int i = 0; i < 3; ++i) {
          const Rect r{190.0 + 260 * i, y0, 200, h};
          text(cr, r.x + r.w / 2, y0 - 22, names[i], 13, Align::kCenter, true);
          heatmap(cr, r, *panels[i], static_cast<int>(T), static_cast<int>(show), max_abs(*panels[i]));
          text(cr, r.x + r.w / 2, y0 + h + 20, "max |value| " + fmt("%.3g", max_abs(*panels[i])), 12,
               Align::kCenter, false, 0, kGrey);
          if (i < 2) text(cr, r.x + r.w + 30, y0 + h / 2, i == 0 ? "+" : "=", 34, Align::kCenter, true);
        }
        text(
            cr, kWidth / 2.0, 600,
            "token rows are small (N(0, 0.02^2)), so at initialisation the position signal dominates the sum",
            13, Align::kCenter, false, 0, kGrey);
      });

  // RoPE scalings for one Llama-3-like configuration: which pairs each scheme stretches.
  constexpr int64_t kRopeDim = 128, kOriginal = 8192;
  constexpr double kRopeBase = 500000, kFactor = 8;
  std::vector<Series> rope_series;
  {
    struct Scheme {
      const char* label;
      RopeScaling scaling;
      std::optional<int64_t> seq_len;
    };
    auto scaled = [&](RopeType type) {
      RopeScaling r;
      r.type = type;
      r.factor = kFactor;
      r.original_max_position_embeddings = kOriginal;
      r.max_position_embeddings = kOriginal;  // dynamic's pretrained length
      r.low_freq_factor = 1;                  // llama3's (Llama 3.1's values)
      r.high_freq_factor = 4;
      return r;
    };
    const Scheme schemes[5] = {{"default", {}, std::nullopt},
                               {"linear (factor 8)", scaled(RopeType::kLinear), std::nullopt},
                               {"dynamic NTK (seq_len 32768)", scaled(RopeType::kDynamic), 4 * kOriginal},
                               {"YaRN (beta 32, 1)", scaled(RopeType::kYarn), std::nullopt},
                               {"llama3 (low 1, high 4)", scaled(RopeType::kLlama3), std::nullopt}};
    for (const Scheme& sc : schemes) {
      const auto f = rope_frequencies(kRopeDim, kRopeBase, sc.scaling, sc.seq_len);
      Series s{sc.label, {}, {}};
      for (size_t k = 0; k < f.inv_freq.size(); ++k) {
        s.x.push_back(static_cast<double>(k));
        s.y.push_back(2 * M_PI / f.inv_freq[k]);
      }
      rope_series.push_back(std::move(s));
    }
  }
  figs.save(
      "rope_scalings",
      "high-frequency pairs keep their wavelength under YaRN and llama3; linear stretches every pair by 8",
      [&](cairo_t* cr) {
        title(cr, "RoPE wavelength per pair: dim 128, base 500000, factor 8, original context 8192",
              "2 pi / inv_freq[k], log scale; dynamic NTK at seq_len 32768 (4x the original)");
        double top = 1;
        for (const auto& s : rope_series)
          for (double v : s.y) top = std::max(top, v);
        series_figure(cr, rope_series, -1, static_cast<double>(kRopeDim / 2), 1,
                      std::pow(10.0, std::ceil(std::log10(top))),
                      nice_ticks(0, static_cast<double>(kRopeDim / 2 - 1), 8), "pair k",
                      "wavelength (positions)");
      });

  // ALiBi: the slope of each head, for a few head counts.
  std::vector<Series> alibi_series;
  for (const int64_t heads : kAlibiHeads) {
    const auto slopes = alibi_slopes(heads);
    Series s{std::to_string(heads) + " heads", {}, {}};
    for (size_t h = 0; h < slopes.size(); ++h) {
      s.x.push_back(static_cast<double>(h + 1));
      s.y.push_back(slopes[h]);
    }
    alibi_series.push_back(std::move(s));
  }
  figs.save("alibi_slopes",
            "a power-of-two head count n gives 2^(-8h/n) down to 2^-8; 12 heads take the 8 slopes of 8 heads "
            "and 4 of the 16 heads' in between",
            [&](cairo_t* cr) {
              title(cr, "ALiBi slope per head (max_bias 8)",
                    "head h adds -slope * distance to its attention scores; log scale");
              series_figure(cr, alibi_series, 0, 33, 1e-3, 1, nice_ticks(1, 32, 8), "head h", "slope");
            });

  return figs.finish(o, log, warn);
}

}  // namespace tokpos::plot
