// The pictures: every file is written, is a valid PNG of the expected size,
// and its pixels show what the data implies. Plus determinism and bad --out.
#include <cairo.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

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

#include "format.h"
#include "plots.h"
#include "tokpos/error.h"

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

}  // namespace
