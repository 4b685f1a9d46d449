#include "chart.h"

#include <cairo-svg.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <span>

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

void text(cairo_t* cr, double x, double y, const std::string& s, double size, Align align, bool bold, double angle,
          Rgb color) {
  cairo_save(cr);
  cairo_select_font_face(cr, "DejaVu Sans", CAIRO_FONT_SLANT_NORMAL,
                         bold ? CAIRO_FONT_WEIGHT_BOLD : CAIRO_FONT_WEIGHT_NORMAL);
  cairo_set_font_size(cr, size);
  cairo_text_extents_t ext;
  cairo_text_extents(cr, s.c_str(), &ext);
  cairo_translate(cr, x, y);
  cairo_rotate(cr, angle);
  const double dx = align == Align::kLeft ? 0 : align == Align::kCenter ? -ext.x_advance / 2 : -ext.x_advance;
  cairo_move_to(cr, dx, size * 0.35);  // y is the text's vertical middle
  cairo_set_source_rgb(cr, color.r, color.g, color.b);
  cairo_show_text(cr, s.c_str());
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
  auto paint = [&](cairo_surface_t* surface) {
    cairo_t* cr = cairo_create(surface);
    cairo_set_source_rgb(cr, 1, 1, 1);
    cairo_paint(cr);
    draw(cr);
    const cairo_status_t s = cairo_status(cr);
    cairo_destroy(cr);
    check(s, "drawing " + name);
  };
  Figure f{name, {}, {}};
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
  // Every path is checked before any picture is written: a directory, FIFO,
  // device or dangling link at one leaves all the pictures as they were.
  for (const Figure& f : figures) {
    for (const char* ext : {".png", ".svg"}) {
      const std::string path = dir + "/" + f.name + ext;
      try {
        check_file_writable(path, "tokpos plot");
      } catch (const Error& e) {
        throw Error(e.status(), std::string(e.what()) + " (no picture was written)");
      }
    }
  }
  DeferSignals defer;
  for (const Figure& f : figures) {
    write_file_atomically(dir + "/" + f.name + ".png", std::as_bytes(std::span(f.png)), "tokpos plot");
    write_file_atomically(dir + "/" + f.name + ".svg", std::as_bytes(std::span(f.svg)), "tokpos plot");
  }
}

void save_figure(const std::string& dir, const std::string& name, int w, int h,
                 const std::function<void(cairo_t*)>& draw) {
  write_figures(dir, {render_figure(name, w, h, draw)});
}

}  // namespace tokpos::plot
