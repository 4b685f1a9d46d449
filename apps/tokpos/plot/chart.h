// A small charting layer over Cairo: heatmaps, axes with ticks, colour bars,
// lines, bars and text. Each figure is one draw function on a cairo_t, so the
// same code renders the PNG and the SVG.
#pragma once

#include <cairo.h>

#include <functional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace tokpos::plot {

struct Rect {
  double x, y, w, h;
};
struct Rgb {
  double r, g, b;
};

// Diverging map for signed data: blue (-1) -> white (0) -> red (+1), linear in each half.
Rgb diverging(double v, double vmax);
inline constexpr Rgb kBlue{0.13, 0.40, 0.67}, kRed{0.70, 0.09, 0.17}, kGrey{0.45, 0.45, 0.45};

// The fonts text is drawn in, in order of preference: each character takes
// the first one with a glyph for it. DejaVu Sans draws Latin text (and
// U+FFFD), Noto Sans CJK SC (Debian's fonts-noto-cjk) Chinese.
struct FontChoice {
  const char* family;
  const char* package;  // the Debian package that installs it
};
inline constexpr FontChoice kFonts[2] = {{"DejaVu Sans", "fonts-dejavu-core"}, {"Noto Sans CJK SC", "fonts-noto-cjk"}};

// Whether fontconfig knows a font of this family.
bool font_installed(const char* family);

// s cut into runs of characters drawn in one font: font is an index into
// kFonts, or -1 for characters no font has a glyph for (they would show as
// empty boxes). glyphs holds each run's glyph indices, in order.
struct TextRun {
  int font = 0;
  std::string text;
  std::vector<unsigned long> glyphs;
};
std::vector<TextRun> text_runs(cairo_t* cr, std::string_view s, double size, bool bold);

// The characters text() was asked to draw but no font of kFonts has a
// glyph for: text() adds them to the set attached to cr (render_figure
// attaches one per figure).
void collect_missing_glyphs(cairo_t* cr, std::set<char32_t>* missing);

// A warning naming the missing characters and the fonts and packages that
// draw them; empty when none is missing.
std::string missing_glyphs_warning(const std::set<char32_t>& missing);

enum class Align { kLeft, kCenter, kRight };
void text(cairo_t* cr, double x, double y, const std::string& s, double size, Align align = Align::kLeft,
          bool bold = false, double angle = 0, Rgb color = {0.1, 0.1, 0.1});

// rows x cols values drawn into r, row 0 at the top, each value one cell.
void heatmap(cairo_t* cr, Rect r, const std::vector<float>& values, int rows, int cols, double vmax);
// A vertical colour bar from -vmax to vmax with ticks.
void colorbar(cairo_t* cr, Rect r, double vmax, const std::string& label);

// Axes for a plot area: frame, ticks, tick labels, axis labels. The mapping
// from data to pixels is linear, or logarithmic in y.
struct Axes {
  Rect area;
  double x0, x1, y0, y1;
  bool log_y = false;
  double px(double x) const;
  double py(double y) const;
};
void draw_axes(cairo_t* cr, const Axes& a, const std::string& xlabel, const std::string& ylabel,
               const std::vector<double>& xticks, const std::vector<double>& yticks);
// Heatmap axes: integer ticks along rows (y) and columns (x) of a heatmap rect.
void heatmap_axes(cairo_t* cr, Rect r, int rows, int cols, const std::string& xlabel, const std::string& ylabel);

std::vector<double> nice_ticks(double lo, double hi, int target);
std::string tick_label(double v);

// One figure rendered in memory: the bytes of name.png and name.svg.
struct Figure {
  std::string name;
  std::vector<unsigned char> png, svg;
  std::set<char32_t> missing_glyphs;  // characters drawn that no font has (empty boxes)
};

// Renders draw(cr) into a w x h PNG and SVG in memory; writes nothing.
Figure render_figure(const std::string& name, int w, int h, const std::function<void(cairo_t*)>& draw);

// Writes every figure to dir/name.{png,svg}, all or nothing
// (tokpos::write_files_atomically): every path is checked first (a
// directory, FIFO, device, socket or dangling link in the way fails the run
// before any file is written), every file is written in full to a temporary,
// and only then are they renamed into place. While it writes,
// SIGINT/SIGTERM/SIGHUP wait until it is done. Throws tokpos::Error naming
// the file on failure; every picture keeps its old contents then.
void write_figures(const std::string& dir, const std::vector<Figure>& figures);

// render_figure, then write_figures for that one figure.
void save_figure(const std::string& dir, const std::string& name, int w, int h,
                 const std::function<void(cairo_t*)>& draw);

}  // namespace tokpos::plot
