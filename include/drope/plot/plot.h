// A small charting library on cairo (no LibTorch): line charts with several panels side by side, and
// heatmaps with a colour bar. Figures are plain aggregates that any layer may fill in; save() renders
// them to PNG or SVG (chosen by the file extension) and writes the file atomically.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace drope::plot {

// One line of a line chart. Points whose y is not finite (or not positive on a log axis) break the line.
struct Series {
  std::string label;           // legend entry; empty = not in the legend
  std::vector<double> x, y;    // equally long
  std::vector<double> lower;   // optional shaded band [lower, upper] per point (both empty or same size as x)
  std::vector<double> upper;
  bool markers = true;         // draw a dot at every point
  bool dashed = false;         // dashed line (reference curves)
  int color = -1;              // palette index; -1 = the series' position in its panel
};

// A reference line: dashed, grey, no markers (a training length, a uniform level).
Series guide_line(const std::string& label, std::vector<double> x, std::vector<double> y);

// One set of axes.
struct Panel {
  std::string title;
  std::string xlabel, ylabel;
  bool log_y = false;          // log-10 y axis
  bool integer_x = false;      // x ticks only at integers (layers, indices)
  double y_min = std::numeric_limits<double>::quiet_NaN();  // fixed y range; NaN = from the data
  double y_max = std::numeric_limits<double>::quiet_NaN();
  std::vector<Series> series;
};

// Panels laid out side by side under an optional figure title.
struct Figure {
  std::string title;
  std::vector<Panel> panels;
  double panel_width = 440;    // points (SVG) / pixels at scale 1 (PNG)
  double height = 360;
  double png_scale = 2.0;      // PNG pixels per point (2 = crisp on high-DPI screens)
};

// A matrix drawn as coloured cells with a colour bar. NaN cells (e.g. above a causal diagonal) are blank.
struct Heatmap {
  std::string title;
  std::string xlabel, ylabel, colorbar_label;
  int64_t rows = 0, cols = 0;
  std::vector<double> values;            // rows × cols, row-major; row 0 at the top
  std::vector<std::string> row_labels;   // optional, one per row (thinned when there are many)
  std::vector<std::string> col_labels;   // optional, one per column
  bool log_color = false;                // colour by log10(value) (positive values only)
  double v_min = std::numeric_limits<double>::quiet_NaN();  // colour range; NaN = from the data
  double v_max = std::numeric_limits<double>::quiet_NaN();
  double size = 460;                     // side of the square cell area in points
  double png_scale = 2.0;
};

// Renders to `path` (.png or .svg) atomically. Throws drope::Error naming the path on a bad extension,
// invalid data or a failed write; no partial file is left.
void save(const Figure& fig, const std::string& path);
void save(const Heatmap& map, const std::string& path);

// The same renderings as bytes, format "png" or "svg".
std::string render(const Figure& fig, const std::string& format);
std::string render(const Heatmap& map, const std::string& format);

// Tick positions for an axis over [lo, hi]: "nice" steps (1, 2, 2.5, 5 × 10^k) on linear axes; on log
// axes powers of ten, or 1-2-5 / 1..9 multiples over ranges shorter than two decades. Exposed for tests.
std::vector<double> ticks(double lo, double hi, bool log_axis, bool integer_only = false);

// Colours of the default palette (Tableau 10), as 0xRRGGBB.
uint32_t palette_color(int index);

}  // namespace drope::plot
