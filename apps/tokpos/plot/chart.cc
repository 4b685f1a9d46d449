#include "chart.h"

#include <cairo-svg.h>
#include <fontconfig/fontconfig.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <span>

#include "format.h"
#include "tokpos/error.h"
#include "progress.h"
#include "tokpos/files.h"

namespace tokpos::plot {

Rgb diverging(double v, double vmax) {
  const double t = std::clamp(vmax > 0 ? v / vmax : 0.0, -1.0, 1.0);
  const Rgb end = t < 0 ? kBlue : kRed;
  const double a = std::abs(t);
  return {1.0 + (end.r - 1.0) * a, 1.0 + (end.g - 1.0) * a, 1.0 + (end.b - 1.0) * a};
}

bool font_installed(const char* family) {
  FcPattern* pattern = FcPatternCreate();
  FcPatternAddString(pattern, FC_FAMILY, reinterpret_cast<const FcChar8*>(family));
  FcObjectSet* objects = FcObjectSetBuild(FC_FAMILY, nullptr);
  FcFontSet* set = FcFontList(nullptr, pattern, objects);
  const bool found = set != nullptr && set->nfont > 0;
  if (set != nullptr) FcFontSetDestroy(set);
  FcObjectSetDestroy(objects);
  FcPatternDestroy(pattern);
  return found;
}

namespace {

const cairo_user_data_key_t kMissingKey{};

void select_font(cairo_t* cr, int font, double size, bool bold) {
  cairo_select_font_face(cr, kFonts[font].family, CAIRO_FONT_SLANT_NORMAL,
                         bold ? CAIRO_FONT_WEIGHT_BOLD : CAIRO_FONT_WEIGHT_NORMAL);
  cairo_set_font_size(cr, size);
}

// The glyph of the one character ch in the current font; 0 where it has none.
unsigned long glyph_of(cairo_t* cr, std::string_view ch) {
  cairo_glyph_t* glyphs = nullptr;
  int n = 0;
  const cairo_status_t st = cairo_scaled_font_text_to_glyphs(cairo_get_scaled_font(cr), 0, 0, ch.data(),
                                                             static_cast<int>(ch.size()), &glyphs, &n, nullptr,
                                                             nullptr, nullptr);
  const unsigned long index = st == CAIRO_STATUS_SUCCESS && n == 1 ? glyphs[0].index : 0;
  cairo_glyph_free(glyphs);
  return index;
}

}  // namespace

std::vector<TextRun> text_runs(cairo_t* cr, std::string_view s, double size, bool bold) {
  constexpr int kCount = static_cast<int>(std::size(kFonts));
  std::vector<TextRun> runs;
  cairo_save(cr);
  for (const Utf8Char& c : utf8_chars(s)) {
    // An invalid byte is drawn as U+FFFD (Cairo refuses invalid UTF-8).
    const std::string ch = c.valid ? std::string(s.substr(c.begin, c.size)) : std::string("\xEF\xBF\xBD");
    int font = -1;
    unsigned long glyph = 0;
    for (int f = 0; f < kCount && font < 0; ++f) {
      select_font(cr, f, size, bold);
      if ((glyph = glyph_of(cr, ch)) != 0) font = f;
    }
    if (runs.empty() || runs.back().font != font) runs.push_back({font, {}, {}});
    runs.back().text += ch;
    runs.back().glyphs.push_back(glyph);
  }
  cairo_restore(cr);
  return runs;
}

void collect_missing_glyphs(cairo_t* cr, std::set<char32_t>* missing) {
  cairo_set_user_data(cr, &kMissingKey, missing, nullptr);
}

std::string missing_glyphs_warning(const std::set<char32_t>& missing) {
  if (missing.empty()) return {};
  std::string chars;
  size_t n = 0;
  for (char32_t c : missing) {
    if (n++ == 8) {
      chars += " and " + std::to_string(missing.size() - 8) + " more";
      break;
    }
    char buf[16];
    std::snprintf(buf, sizeof buf, "%sU+%04X", n > 1 ? ", " : "", static_cast<unsigned>(c));
    chars += buf;
  }
  std::string fonts, absent;
  for (const FontChoice& f : kFonts) {
    const bool installed = font_installed(f.family);
    fonts += std::string(fonts.empty() ? "" : ", then ") + f.family + " (" + f.package +
             (installed ? "" : ", not installed") + ")";
    if (!installed) absent += std::string(" ") + f.package;
  }
  return "tokpos plot: warning: no font has a glyph for " + chars + ", drawn as empty boxes; text is drawn in " +
         fonts + (absent.empty() ? ", and neither has them" : "; install:  apt-get install" + absent);
}

void text(cairo_t* cr, double x, double y, const std::string& s, double size, Align align, bool bold, double angle,
          Rgb color) {
  const std::vector<TextRun> runs = text_runs(cr, s, size, bold);
  if (auto* missing = static_cast<std::set<char32_t>*>(cairo_get_user_data(cr, &kMissingKey)); missing != nullptr) {
    for (const TextRun& r : runs) {
      if (r.font >= 0) continue;
      for (const Utf8Char& c : utf8_chars(r.text)) missing->insert(c.code);
    }
  }
  cairo_save(cr);
  double advance = 0;
  for (const TextRun& r : runs) {
    select_font(cr, std::max(r.font, 0), size, bold);
    cairo_text_extents_t ext;
    cairo_text_extents(cr, r.text.c_str(), &ext);
    advance += ext.x_advance;
  }
  cairo_translate(cr, x, y);
  cairo_rotate(cr, angle);
  const double dx = align == Align::kLeft ? 0 : align == Align::kCenter ? -advance / 2 : -advance;
  cairo_move_to(cr, dx, size * 0.35);  // y is the text's vertical middle
  cairo_set_source_rgb(cr, color.r, color.g, color.b);
  for (const TextRun& r : runs) {  // each run continues where the last one ended
    select_font(cr, std::max(r.font, 0), size, bold);
    cairo_show_text(cr, r.text.c_str());
  }
  cairo_restore(cr);
}

void heatmap(cairo_t* cr, Rect r, const std::vector<float>& values, int rows, int cols, double vmax) {
  // One pixel per cell in an image, scaled up with nearest-neighbour
  // filtering: crisp cells in the PNG, one embedded image in the SVG.
  cairo_surface_t* img = cairo_image_surface_create(CAIRO_FORMAT_RGB24, cols, rows);
  unsigned char* data = cairo_image_surface_get_data(img);
  const int stride = cairo_image_surface_get_stride(img);
  cairo_surface_flush(img);
  for (int i = 0; i < rows; ++i) {
    auto* row = reinterpret_cast<uint32_t*>(data + i * stride);
    for (int j = 0; j < cols; ++j) {
      const Rgb c = diverging(values[static_cast<size_t>(i) * cols + j], vmax);
      row[j] = (static_cast<uint32_t>(std::lround(c.r * 255)) << 16) |
               (static_cast<uint32_t>(std::lround(c.g * 255)) << 8) | static_cast<uint32_t>(std::lround(c.b * 255));
    }
  }
  cairo_surface_mark_dirty(img);
  cairo_save(cr);
  cairo_rectangle(cr, r.x, r.y, r.w, r.h);
  cairo_clip(cr);
  cairo_translate(cr, r.x, r.y);
  cairo_scale(cr, r.w / cols, r.h / rows);
  cairo_set_source_surface(cr, img, 0, 0);
  cairo_pattern_set_filter(cairo_get_source(cr), CAIRO_FILTER_NEAREST);
  cairo_paint(cr);
  cairo_restore(cr);
  cairo_surface_destroy(img);
  cairo_set_source_rgb(cr, 0.2, 0.2, 0.2);
  cairo_set_line_width(cr, 1);
  cairo_rectangle(cr, r.x, r.y, r.w, r.h);
  cairo_stroke(cr);
}

void colorbar(cairo_t* cr, Rect r, double vmax, const std::string& label) {
  const int steps = 200;
  for (int s = 0; s < steps; ++s) {
    const double v = vmax - 2 * vmax * (s + 0.5) / steps;
    const Rgb c = diverging(v, vmax);
    cairo_set_source_rgb(cr, c.r, c.g, c.b);
    cairo_rectangle(cr, r.x, r.y + r.h * s / steps, r.w, r.h / steps + 0.5);
    cairo_fill(cr);
  }
  cairo_set_source_rgb(cr, 0.2, 0.2, 0.2);
  cairo_set_line_width(cr, 1);
  cairo_rectangle(cr, r.x, r.y, r.w, r.h);
  cairo_stroke(cr);
  for (double t : nice_ticks(-vmax, vmax, 5)) {
    const double y = r.y + r.h * (vmax - t) / (2 * vmax);
    cairo_move_to(cr, r.x + r.w, y);
    cairo_line_to(cr, r.x + r.w + 4, y);
    cairo_stroke(cr);
    text(cr, r.x + r.w + 7, y, tick_label(t), 12);
  }
  text(cr, r.x + r.w + 50, r.y + r.h / 2, label, 13, Align::kCenter, false, -M_PI / 2);
}

double Axes::px(double x) const { return area.x + area.w * (x - x0) / (x1 - x0); }
double Axes::py(double y) const {
  const double t = log_y ? (std::log10(y) - std::log10(y0)) / (std::log10(y1) - std::log10(y0)) : (y - y0) / (y1 - y0);
  return area.y + area.h * (1 - t);
}

void draw_axes(cairo_t* cr, const Axes& a, const std::string& xlabel, const std::string& ylabel,
               const std::vector<double>& xticks, const std::vector<double>& yticks) {
  cairo_set_line_width(cr, 1);
  for (double t : yticks) {  // light grid first
    cairo_set_source_rgb(cr, 0.9, 0.9, 0.9);
    cairo_move_to(cr, a.area.x, a.py(t));
    cairo_line_to(cr, a.area.x + a.area.w, a.py(t));
    cairo_stroke(cr);
    cairo_set_source_rgb(cr, 0.2, 0.2, 0.2);
    text(cr, a.area.x - 8, a.py(t), tick_label(t), 12, Align::kRight);
  }
  for (double t : xticks) {
    cairo_set_source_rgb(cr, 0.2, 0.2, 0.2);
    cairo_move_to(cr, a.px(t), a.area.y + a.area.h);
    cairo_line_to(cr, a.px(t), a.area.y + a.area.h + 5);
    cairo_stroke(cr);
    text(cr, a.px(t), a.area.y + a.area.h + 16, tick_label(t), 12, Align::kCenter);
  }
  cairo_set_source_rgb(cr, 0.2, 0.2, 0.2);
  cairo_rectangle(cr, a.area.x, a.area.y, a.area.w, a.area.h);
  cairo_stroke(cr);
  text(cr, a.area.x + a.area.w / 2, a.area.y + a.area.h + 38, xlabel, 14, Align::kCenter);
  text(cr, a.area.x - 62, a.area.y + a.area.h / 2, ylabel, 14, Align::kCenter, false, -M_PI / 2);
}

void heatmap_axes(cairo_t* cr, Rect r, int rows, int cols, const std::string& xlabel, const std::string& ylabel) {
  cairo_set_source_rgb(cr, 0.2, 0.2, 0.2);
  cairo_set_line_width(cr, 1);
  for (double t : nice_ticks(0, cols - 1, 6)) {
    const double x = r.x + r.w * (t + 0.5) / cols;
    cairo_move_to(cr, x, r.y + r.h);
    cairo_line_to(cr, x, r.y + r.h + 5);
    cairo_stroke(cr);
    text(cr, x, r.y + r.h + 16, tick_label(t), 12, Align::kCenter);
  }
  for (double t : nice_ticks(0, rows - 1, 6)) {
    const double y = r.y + r.h * (t + 0.5) / rows;
    cairo_move_to(cr, r.x, y);
    cairo_line_to(cr, r.x - 5, y);
    cairo_stroke(cr);
    text(cr, r.x - 8, y, tick_label(t), 12, Align::kRight);
  }
  text(cr, r.x + r.w / 2, r.y + r.h + 38, xlabel, 14, Align::kCenter);
  text(cr, r.x - 52, r.y + r.h / 2, ylabel, 14, Align::kCenter, false, -M_PI / 2);
}

std::vector<double> nice_ticks(double lo, double hi, int target) {
  if (!(hi > lo)) return {lo};
  const double raw = (hi - lo) / std::max(1, target);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0}) {
    if (m * mag >= raw) {
      step = m * mag;
      break;
    }
  }
  std::vector<double> out;
  for (double t = std::ceil(lo / step - 1e-9) * step; t <= hi + step * 1e-9; t += step) {
    out.push_back(std::abs(t) < step * 1e-9 ? 0.0 : t);
  }
  return out;
}

std::string tick_label(double v) {
  char buf[32];
  if (v != 0 && (std::abs(v) >= 1e5 || std::abs(v) < 1e-3)) {
    std::snprintf(buf, sizeof buf, "%.0e", v);
  } else {
    std::snprintf(buf, sizeof buf, "%g", v);
  }
  return buf;
}

namespace {
cairo_status_t append(void* closure, const unsigned char* data, unsigned int length) {
  auto* out = static_cast<std::vector<unsigned char>*>(closure);
  out->insert(out->end(), data, data + length);
  return CAIRO_STATUS_SUCCESS;
}

void check(cairo_status_t s, const std::string& what) {
  if (s != CAIRO_STATUS_SUCCESS) {
    throw Error(Status::kInternal, "tokpos plot: " + what + ": " + cairo_status_to_string(s));
  }
}
}  // namespace

Figure render_figure(const std::string& name, int w, int h, const std::function<void(cairo_t*)>& draw) {
  Figure f{name, {}, {}, {}};
  auto paint = [&](cairo_surface_t* surface) {
    cairo_t* cr = cairo_create(surface);
    collect_missing_glyphs(cr, &f.missing_glyphs);
    cairo_set_source_rgb(cr, 1, 1, 1);
    cairo_paint(cr);
    draw(cr);
    const cairo_status_t s = cairo_status(cr);
    cairo_destroy(cr);
    check(s, "drawing " + name);
  };
  cairo_surface_t* image = cairo_image_surface_create(CAIRO_FORMAT_ARGB32, w, h);
  try {
    paint(image);
    check(cairo_surface_write_to_png_stream(image, append, &f.png), "encoding " + name + ".png");
  } catch (...) {
    cairo_surface_destroy(image);
    throw;
  }
  cairo_surface_destroy(image);
  cairo_surface_t* vector = cairo_svg_surface_create_for_stream(append, &f.svg, w, h);
  try {
    paint(vector);
    cairo_surface_finish(vector);
    check(cairo_surface_status(vector), "encoding " + name + ".svg");
  } catch (...) {
    cairo_surface_destroy(vector);
    throw;
  }
  cairo_surface_destroy(vector);
  return f;
}

void write_figures(const std::string& dir, const std::vector<Figure>& figures) {
  std::vector<FileBytes> files;
  for (const Figure& f : figures) {
    files.push_back({dir + "/" + f.name + ".png", std::as_bytes(std::span(f.png))});
    files.push_back({dir + "/" + f.name + ".svg", std::as_bytes(std::span(f.svg))});
  }
  DeferSignals defer;  // the writes and renames finish; an interrupt acts after them
  write_files_atomically(files, "tokpos plot");
}

void save_figure(const std::string& dir, const std::string& name, int w, int h,
                 const std::function<void(cairo_t*)>& draw) {
  write_figures(dir, {render_figure(name, w, h, draw)});
}

}  // namespace tokpos::plot
