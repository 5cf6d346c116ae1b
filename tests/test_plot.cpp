// The cairo chart library: valid PNG/SVG files with drawn pixels, atomic writes, clear errors.
#include <cairo.h>

#include <cmath>
#include <filesystem>

#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "drope/core/files.h"
#include "drope/plot/plot.h"
#include "test_util.h"

namespace fs = std::filesystem;
using namespace drope;

namespace {

plot::Figure sample_figure() {
  plot::Figure fig;
  fig.title = "Test figure";
  for (int k = 0; k < 2; ++k) {
    plot::Panel p;
    p.title = k == 0 ? "log axis" : "linear axis";
    p.xlabel = "layer";
    p.ylabel = "value";
    p.log_y = k == 0;
    p.integer_x = true;
    for (int s = 0; s < 2; ++s) {
      plot::Series ser;
      ser.label = s == 0 ? "rope" : "nope";
      for (int i = 0; i < 6; ++i) {
        const double y = std::pow(10.0, -3.0 - s + 0.3 * i);
        ser.x.push_back(i);
        ser.y.push_back(y);
        ser.lower.push_back(y * 0.7);
        ser.upper.push_back(y * 1.4);
      }
      p.series.push_back(ser);
    }
    fig.panels.push_back(p);
  }
  return fig;
}

// Fraction of pixels of a PNG file that are not white.
double non_white_fraction(const std::string& path) {
  cairo_surface_t* s = cairo_image_surface_create_from_png(path.c_str());
  EXPECT_EQ(cairo_surface_status(s), CAIRO_STATUS_SUCCESS);
  const int w = cairo_image_surface_get_width(s), h = cairo_image_surface_get_height(s);
  const int stride = cairo_image_surface_get_stride(s);
  const unsigned char* data = cairo_image_surface_get_data(s);
  int64_t colored = 0;
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      const uint32_t px = *reinterpret_cast<const uint32_t*>(data + y * stride + 4 * x);
      if ((px & 0xffffff) != 0xffffff) ++colored;
    }
  cairo_surface_destroy(s);
  return w * h > 0 ? double(colored) / double(w * h) : 0.0;
}

}  // namespace

TEST(Plot, LineChartWritesValidPngAndSvg) {
  const auto dir = test::tmp_dir("plot_line");
  const auto png = dir + "/chart.png", svg = dir + "/chart.svg";
  plot::save(sample_figure(), png);
  plot::save(sample_figure(), svg);
  const std::string bytes = read_file(png);
  ASSERT_GT(bytes.size(), 5000u);
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  const double colored = non_white_fraction(png);
  EXPECT_GT(colored, 0.01);
  EXPECT_LT(colored, 0.6);
  const std::string text = read_file(svg);
  EXPECT_EQ(text.rfind("<?xml", 0), 0u);
  EXPECT_NE(text.find("<svg"), std::string::npos);
  // Only the two files: no temp files left behind.
  int n = 0;
  for (const auto& e : fs::directory_iterator(dir)) n += e.is_regular_file();
  EXPECT_EQ(n, 2);
}

TEST(Plot, HeatmapWritesValidPng) {
  const auto dir = test::tmp_dir("plot_heat");
  plot::Heatmap h;
  h.title = "causal attention";
  h.rows = h.cols = 12;
  for (int i = 0; i < 12; ++i)
    for (int j = 0; j < 12; ++j) h.values.push_back(j <= i ? 1.0 / (i + 1) : NAN);
  for (int i = 0; i < 12; ++i) h.row_labels.push_back(std::string(1, char('a' + i)));
  h.col_labels = h.row_labels;
  h.colorbar_label = "alpha";
  plot::save(h, dir + "/h.png");
  plot::save(h, dir + "/h.svg");
  EXPECT_EQ(read_file(dir + "/h.png").substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  EXPECT_GT(non_white_fraction(dir + "/h.png"), 0.1);
  EXPECT_NE(read_file(dir + "/h.svg").find("<svg"), std::string::npos);
}

TEST(Plot, TicksAreReadable) {
  auto lin = plot::ticks(0.0, 1.0, false);
  ASSERT_GE(lin.size(), 4u);
  EXPECT_DOUBLE_EQ(lin.front(), 0.0);
  EXPECT_NEAR(lin.back(), 1.0, 1e-12);
  auto lg = plot::ticks(1e-6, 1e-2, true);
  ASSERT_EQ(lg.size(), 5u);
  EXPECT_NEAR(lg[0], 1e-6, 1e-18);
  auto ints = plot::ticks(-0.3, 3.3, false, /*integer_only=*/true);
  EXPECT_EQ(ints, (std::vector<double>{0, 1, 2, 3}));
  // A short log range gets 2 and 5 multiples.
  auto short_log = plot::ticks(0.15, 1.2, true);
  EXPECT_EQ(short_log.size(), 3u);
}

TEST(Plot, TicksEndAtAnyMagnitude) {
  // Ranges narrower than the spacing of doubles there: a few distinct ticks, in order, and an end.
  for (const auto& [lo, hi, ints] :
       std::vector<std::tuple<double, double, bool>>{{1e17, 1e17 + 16, false},
                                                     {1e17, 1e17 + 64, true},
                                                     {1e300, std::nextafter(1e300, 2e300), false},
                                                     {-1.7e308, 1.7e308, false},
                                                     {0, 1e308, true},
                                                     {-5e-324, 5e-324, false}}) {
    const auto t = plot::ticks(lo, hi, false, ints);
    EXPECT_LE(t.size(), 64u) << lo << " " << hi;
    for (size_t i = 1; i < t.size(); ++i) EXPECT_LT(t[i - 1], t[i]) << lo << " " << hi;
  }
  // A figure whose data lie there renders.
  plot::Figure f;
  f.panels.emplace_back();
  f.panels[0].series.push_back({"big", {1e17, 1e17 + 16, 1e17 + 32}, {1e17, 1e17 + 16, 1e17 + 16}});
  EXPECT_FALSE(plot::render(f, "svg").empty());
}

TEST(Plot, BadOutputPathNamesThePathAndLeavesNoFile) {
  const auto dir = test::tmp_dir("plot_bad");
  write_file_atomic(dir + "/file", "x");
  const std::string under_file = dir + "/file/sub/chart.png";
  test::expect_error([&] { plot::save(sample_figure(), under_file); }, {under_file});
  const std::string bad_ext = dir + "/chart.jpg";
  test::expect_error([&] { plot::save(sample_figure(), bad_ext); }, {bad_ext, ".png or .svg"});
  plot::Figure ragged = sample_figure();
  ragged.panels[0].series[0].y.pop_back();
  const std::string ragged_path = dir + "/ragged.png";
  test::expect_error([&] { plot::save(ragged, ragged_path); }, {ragged_path, "rope"});
  int n = 0;
  for (const auto& e : fs::directory_iterator(dir)) n += e.is_regular_file();
  EXPECT_EQ(n, 1);  // only "file"
}
