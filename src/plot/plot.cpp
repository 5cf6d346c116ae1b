#include "drope/plot/plot.h"

#include <cairo-svg.h>
#include <cairo.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <memory>

#include <fmt/format.h>

#include "drope/core/error.h"
#include "drope/core/files.h"

namespace drope::plot {

namespace {

constexpr double kFont = 11.5;        // tick labels, legend
constexpr double kLabelFont = 12.0;   // axis labels
constexpr double kTitleFont = 13.0;   // panel titles
constexpr double kFigTitleFont = 14.5;
const char* const kFamily = "DejaVu Sans";

struct Rgb {
  double r, g, b;
};

Rgb rgb(uint32_t c) { return {((c >> 16) & 0xff) / 255.0, ((c >> 8) & 0xff) / 255.0, (c & 0xff) / 255.0}; }

void set_color(cairo_t* cr, uint32_t c, double alpha = 1.0) {
  auto k = rgb(c);
  cairo_set_source_rgba(cr, k.r, k.g, k.b, alpha);
}

// A tick label: mantissa text, optionally × 10^exponent (drawn as a superscript).
struct Label {
  std::string text;
  bool has_exp = false;
  int exp = 0;
};

// Text drawing with alignment on a cairo context.
class Pen {
 public:
  explicit Pen(cairo_t* cr) : cr_(cr) {}
  void font(double size, bool bold = false) {
    cairo_select_font_face(cr_, kFamily, CAIRO_FONT_SLANT_NORMAL,
                           bold ? CAIRO_FONT_WEIGHT_BOLD : CAIRO_FONT_WEIGHT_NORMAL);
    cairo_set_font_size(cr_, size);
    size_ = size;
    bold_ = bold;
  }
  double width(const std::string& s) const {
    cairo_text_extents_t e;
    cairo_text_extents(cr_, s.c_str(), &e);
    return e.x_advance;
  }
  // Draws `s` with (hx, vy) alignment: hx 0 = left, 0.5 = centre, 1 = right; vy 0 = top, 0.5 = middle,
  // 1 = bottom of the cap height. `angle` in radians (counter-clockwise is negative in cairo).
  void text(double x, double y, const std::string& s, double hx, double vy, double angle = 0.0) const {
    const double w = width(s), cap = size_ * 0.72;
    cairo_save(cr_);
    cairo_translate(cr_, x, y);
    cairo_rotate(cr_, angle);
    cairo_move_to(cr_, -hx * w, cap * (1.0 - vy));
    cairo_show_text(cr_, s.c_str());
    cairo_restore(cr_);
  }
  // Width of a tick label, superscript included.
  double label_width(const Label& l) {
    if (!l.has_exp) return width(l.text);
    const double base = size_;
    double w = width(head(l));
    font(base * 0.72, bold_);
    w += width(exponent(l)) + 1;
    font(base, bold_);
    return w;
  }
  // Draws a tick label ("m×10" + superscript exponent when it has one) aligned as text().
  void label(double x, double y, const Label& l, double hx, double vy) {
    if (!l.has_exp) return text(x, y, l.text, hx, vy);
    const double base = size_, w = label_width(l), cap = base * 0.72;
    const std::string head = this->head(l), exp = exponent(l);
    const double left = x - hx * w, base_y = y + cap * (1.0 - vy);
    cairo_move_to(cr_, left, base_y);
    cairo_show_text(cr_, head.c_str());
    const double hw = width(head);
    font(base * 0.72, bold_);
    cairo_move_to(cr_, left + hw + 1, base_y - cap * 0.55);
    cairo_show_text(cr_, exp.c_str());
    font(base, bold_);
  }

 private:
  static std::string head(const Label& l) { return l.text.empty() ? "10" : l.text + "\u00d710"; }
  static std::string exponent(const Label& l) {
    return l.exp < 0 ? "\u2212" + std::to_string(-l.exp) : std::to_string(l.exp);
  }

  cairo_t* cr_;
  double size_ = kFont;
  bool bold_ = false;
};

// Bytes of a cairo stream.
cairo_status_t append_bytes(void* closure, const unsigned char* data, unsigned int length) {
  static_cast<std::string*>(closure)->append(reinterpret_cast<const char*>(data), length);
  return CAIRO_STATUS_SUCCESS;
}

// Renders `draw` on a w × h (points) page as PNG or SVG bytes.
std::string render_page(double w, double h, double png_scale, const std::string& format,
                        const std::function<void(cairo_t*)>& draw) {
  std::string bytes;
  cairo_surface_t* surface = nullptr;
  if (format == "png") {
    if (!(png_scale > 0)) fail("png_scale must be positive, got {}", png_scale);
    surface =
        cairo_image_surface_create(CAIRO_FORMAT_ARGB32, int(std::ceil(w * png_scale)), int(std::ceil(h * png_scale)));
  } else if (format == "svg") {
    surface = cairo_svg_surface_create_for_stream(append_bytes, &bytes, w, h);
  } else {
    fail("unknown figure format '{}' (expected png or svg)", format);
  }
  std::unique_ptr<cairo_surface_t, decltype(&cairo_surface_destroy)> sguard(surface, cairo_surface_destroy);
  if (cairo_surface_status(surface) != CAIRO_STATUS_SUCCESS)
    fail("cannot create a {:.0f}x{:.0f} {} surface: {}", w, h, format,
         cairo_status_to_string(cairo_surface_status(surface)));
  cairo_t* cr = cairo_create(surface);
  std::unique_ptr<cairo_t, decltype(&cairo_destroy)> cguard(cr, cairo_destroy);
  if (format == "png") cairo_scale(cr, png_scale, png_scale);
  cairo_set_source_rgb(cr, 1, 1, 1);
  cairo_paint(cr);
  draw(cr);
  if (cairo_status(cr) != CAIRO_STATUS_SUCCESS) fail("drawing failed: {}", cairo_status_to_string(cairo_status(cr)));
  cguard.reset();
  if (format == "png") {
    cairo_surface_flush(surface);
    auto st = cairo_surface_write_to_png_stream(surface, append_bytes, &bytes);
    if (st != CAIRO_STATUS_SUCCESS) fail("PNG encoding failed: {}", cairo_status_to_string(st));
  } else {
    cairo_surface_finish(surface);
    if (cairo_surface_status(surface) != CAIRO_STATUS_SUCCESS)
      fail("SVG encoding failed: {}", cairo_status_to_string(cairo_surface_status(surface)));
  }
  return bytes;
}

// "png" or "svg" from the extension of `path`.
std::string format_of(const std::string& path) {
  auto dot = path.find_last_of('.');
  std::string ext = dot == std::string::npos ? "" : path.substr(dot + 1);
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  if (ext != "png" && ext != "svg") fail("{}: unsupported figure format (expected a .png or .svg file name)", path);
  return ext;
}

template <typename Fig>
void save_any(const Fig& fig, const std::string& path) {
  const std::string format = format_of(path);
  std::string bytes;
  try {
    bytes = render(fig, format);
  } catch (const Error& e) {
    fail("{}: {}", path, e.what());
  }
  write_file_atomic(path, bytes);
}

// ----- axes ---------------------------------------------------------------------------------------

double nice_step(double span, int target) {
  const double raw = span / std::max(target, 1);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0})
    if (m * mag >= raw * 0.999) return m * mag;
  return 10 * mag;
}

// Decimal places that show every multiple of `step` exactly.
int decimals_for(double step) {
  for (int d = 0; d < 10; ++d) {
    const double s = step * std::pow(10.0, d);
    if (std::abs(s - std::round(s)) < 1e-6 * std::max(1.0, s)) return d;
  }
  return 10;
}

Label linear_label(double v, double step, double max_abs) {
  if (std::abs(v) < step * 1e-9) return {"0"};
  if (max_abs >= 1e5 || max_abs < 1e-3) {  // scientific: m × 10^e with e from the axis magnitude
    const int e = int(std::floor(std::log10(max_abs)));
    const double m = v / std::pow(10.0, e);
    const int d = decimals_for(step / std::pow(10.0, e));
    return {fmt::format("{:.{}f}", m, d), true, e};
  }
  return {fmt::format("{:.{}f}", v, decimals_for(step))};
}

Label log_label(double v, bool superscript) {
  const int e = int(std::floor(std::log10(v) + 1e-9));
  const double m = v / std::pow(10.0, e);
  if (!superscript) return {fmt::format("{:g}", v)};
  if (std::abs(m - 1.0) < 1e-9) return {"", true, e};
  return {fmt::format("{:g}", m), true, e};
}

// A mapping from data to one pixel axis.
struct Axis {
  double lo = 0, hi = 1;      // data range (log10 of it on log axes)
  double p0 = 0, p1 = 1;      // pixel range
  bool log = false;
  double map(double v) const {
    const double t = ((log ? std::log10(v) : v) - lo) / (hi - lo);
    return p0 + t * (p1 - p0);
  }
  bool valid(double v) const { return std::isfinite(v) && (!log || v > 0); }
};

struct Range {
  double lo = INFINITY, hi = -INFINITY;
  void add(double v) {
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  bool empty() const { return !(lo <= hi); }
};

void dash(cairo_t* cr, bool on) {
  if (on) {
    const double d[] = {6.0, 4.0};
    cairo_set_dash(cr, d, 2, 0);
  } else {
    cairo_set_dash(cr, nullptr, 0, 0);
  }
}

struct TickSet {
  std::vector<double> major;
  std::vector<double> minor;  // log axes: 2..9 × 10^k
  std::vector<Label> labels;
};

// Major ticks with labels, and minor ticks on log axes, for the range of `a`.
TickSet y_ticks(const Axis& a) {
  TickSet t;
  if (!a.log) {
    t.major = ticks(a.lo, a.hi, false);
    const double step = t.major.size() > 1 ? t.major[1] - t.major[0] : 1.0;
    const double max_abs = std::max(std::abs(a.lo), std::abs(a.hi));
    for (double v : t.major) t.labels.push_back(linear_label(v, step, max_abs));
    return t;
  }
  const double lo = std::pow(10.0, a.lo), hi = std::pow(10.0, a.hi);
  t.major = ticks(lo, hi, true);
  bool superscript = false;
  for (double v : t.major) superscript |= v < 0.01 || v >= 1e4;
  for (double v : t.major) t.labels.push_back(log_label(v, superscript));
  if (a.hi - a.lo < 1.0) return t;  // less than a decade: the major ticks are dense enough
  for (int e = int(std::floor(a.lo)); e <= int(std::ceil(a.hi)); ++e)
    for (int m = 2; m <= 9; ++m) {
      const double v = m * std::pow(10.0, e);
      if (v >= lo && v <= hi) t.minor.push_back(v);
    }
  return t;
}

// The data extent of a panel's series, lines and bands (points a log y axis cannot show are skipped);
// fails on series whose x, y and band lengths differ.
std::pair<Range, Range> data_ranges(const Panel& panel) {
  Range xr, yr;
  for (const auto& s : panel.series) {
    if (s.x.size() != s.y.size()) fail("series '{}': x has {} points but y has {}", s.label, s.x.size(), s.y.size());
    const bool band = !s.lower.empty() || !s.upper.empty();
    if (band && (s.lower.size() != s.x.size() || s.upper.size() != s.x.size()))
      fail("series '{}': band lower/upper must have {} points each", s.label, s.x.size());
    for (size_t i = 0; i < s.x.size(); ++i) {
      if (!std::isfinite(s.x[i])) continue;
      auto take = [&](double v) {
        if (std::isfinite(v) && (!panel.log_y || v > 0)) {
          yr.add(v);
          xr.add(s.x[i]);
        }
      };
      take(s.y[i]);
      if (band) {
        take(s.lower[i]);
        take(s.upper[i]);
      }
    }
  }
  if (xr.empty()) xr = {0, 1};
  if (yr.empty()) yr = panel.log_y ? Range{0.1, 1} : Range{0, 1};
  return {xr, yr};
}

// Everything a panel's drawing steps share: the axes, their ticks and the plot area (px, py, pw, ph).
struct PanelFrame {
  Axis xa, ya;
  TickSet yt;
  std::vector<double> xt;
  double xstep = 1.0;
  double px = 0, py = 0, pw = 0, ph = 0;
};

// The data side of the axes: the ranges padded (x a little more for integer x), y from 0 when the data
// start near it, the panel's y_min / y_max when given; and their ticks.
void fit_axes(const Panel& panel, const Range& xr, const Range& yr, PanelFrame& f) {
  Axis &xa = f.xa, &ya = f.ya;
  ya.log = panel.log_y;
  {
    double span = xr.hi - xr.lo;
    double pad = span > 0 ? span * 0.04 : 0.5;
    if (panel.integer_x) pad = std::max(pad, 0.3);
    xa.lo = xr.lo - pad;
    xa.hi = xr.hi + pad;
  }
  {
    double lo = panel.log_y ? std::log10(yr.lo) : yr.lo, hi = panel.log_y ? std::log10(yr.hi) : yr.hi;
    double span = hi - lo;
    double pad = span > 0 ? span * 0.06 : (panel.log_y ? 0.5 : std::max(std::abs(lo) * 0.1, 0.5));
    ya.lo = lo - pad;
    ya.hi = hi + pad;
    if (!panel.log_y && yr.lo >= 0 && ya.lo < 0 && yr.lo <= span * 0.25) ya.lo = 0 - (span > 0 ? 0 : pad);
    if (std::isfinite(panel.y_min)) ya.lo = panel.log_y ? std::log10(panel.y_min) : panel.y_min;
    if (std::isfinite(panel.y_max)) ya.hi = panel.log_y ? std::log10(panel.y_max) : panel.y_max;
    if (!(ya.hi > ya.lo)) fail("panel '{}': empty y range", panel.title);
  }
  f.yt = y_ticks(ya);
  f.xt = ticks(xa.lo, xa.hi, false, panel.integer_x);
  f.xstep = f.xt.size() > 1 ? f.xt[1] - f.xt[0] : 1.0;
}

// The plot area inside the box (bx, by, bw, bh), margins from the text that has to fit; sets the
// pixel side of the axes.
void layout_panel(Pen& pen, const Panel& panel, double bx, double by, double bw, double bh, PanelFrame& f) {
  pen.font(kFont);
  double ylab_w = 0;
  for (const auto& l : f.yt.labels) ylab_w = std::max(ylab_w, pen.label_width(l));
  const double tick_h = kFont;
  const double left = 10 + (panel.ylabel.empty() ? 0 : kLabelFont * 1.3 + 6) + ylab_w + 8;
  const double bottom = 8 + tick_h + 8 + (panel.xlabel.empty() ? 0 : kLabelFont * 1.3 + 4) + 6;
  const double top = panel.title.empty() ? 14 : kTitleFont * 1.3 + 14;
  const double right = 18;
  f.px = bx + left, f.py = by + top, f.pw = bw - left - right, f.ph = bh - top - bottom;
  if (f.pw < 40 || f.ph < 40) fail("panel '{}' is too small for its labels", panel.title);
  f.xa.p0 = f.px;
  f.xa.p1 = f.px + f.pw;
  f.ya.p0 = f.py + f.ph;
  f.ya.p1 = f.py;
}

// Light grid lines: y minor ticks (when the log range is short), then y and x major ticks.
void draw_grid(cairo_t* cr, const PanelFrame& f) {
  const double px = f.px, py = f.py, pw = f.pw, ph = f.ph;
  cairo_set_line_width(cr, 1.0);
  set_color(cr, 0xf0f0f0);
  const bool minor_grid = f.ya.hi - f.ya.lo <= 3.5;
  for (double v : minor_grid ? f.yt.minor : std::vector<double>{}) {
    cairo_move_to(cr, px, f.ya.map(v));
    cairo_line_to(cr, px + pw, f.ya.map(v));
  }
  cairo_stroke(cr);
  set_color(cr, 0xdddddd);
  for (double v : f.yt.major) {
    cairo_move_to(cr, px, f.ya.map(v));
    cairo_line_to(cr, px + pw, f.ya.map(v));
  }
  for (double v : f.xt) {
    cairo_move_to(cr, f.xa.map(v), py);
    cairo_line_to(cr, f.xa.map(v), py + ph);
  }
  cairo_stroke(cr);
}

uint32_t series_color(const Series& s, size_t index) { return palette_color(s.color >= 0 ? s.color : int(index)); }

// Shaded bands (lower..upper), one polygon per run of valid points.
void draw_bands(cairo_t* cr, const Panel& panel, const Axis& xa, const Axis& ya) {
  for (size_t si = 0; si < panel.series.size(); ++si) {
    const auto& s = panel.series[si];
    if (s.lower.empty()) continue;
    const uint32_t c = series_color(s, si);
    size_t i = 0;
    while (i < s.x.size()) {
      size_t j = i;
      while (j < s.x.size() && xa.valid(s.x[j]) && ya.valid(s.lower[j]) && ya.valid(s.upper[j])) ++j;
      if (j > i) {
        cairo_move_to(cr, xa.map(s.x[i]), ya.map(s.upper[i]));
        for (size_t k = i + 1; k < j; ++k) cairo_line_to(cr, xa.map(s.x[k]), ya.map(s.upper[k]));
        for (size_t k = j; k-- > i;) cairo_line_to(cr, xa.map(s.x[k]), ya.map(s.lower[k]));
        cairo_close_path(cr);
        set_color(cr, c, 0.18);
        cairo_fill(cr);
      }
      i = j + 1;
    }
  }
}

// Series lines (broken at invalid points, dashed when asked) and their markers.
void draw_lines(cairo_t* cr, const Panel& panel, const Axis& xa, const Axis& ya) {
  cairo_set_line_join(cr, CAIRO_LINE_JOIN_ROUND);
  cairo_set_line_cap(cr, CAIRO_LINE_CAP_ROUND);
  for (size_t si = 0; si < panel.series.size(); ++si) {
    const auto& s = panel.series[si];
    const uint32_t c = series_color(s, si);
    set_color(cr, c);
    cairo_set_line_width(cr, 2.0);
    dash(cr, s.dashed);
    bool pen_down = false;
    for (size_t i = 0; i < s.x.size(); ++i) {
      if (!xa.valid(s.x[i]) || !ya.valid(s.y[i])) {
        pen_down = false;
        continue;
      }
      if (pen_down) cairo_line_to(cr, xa.map(s.x[i]), ya.map(s.y[i]));
      else cairo_move_to(cr, xa.map(s.x[i]), ya.map(s.y[i]));
      pen_down = true;
    }
    cairo_stroke(cr);
    dash(cr, false);
    if (!s.markers) continue;
    for (size_t i = 0; i < s.x.size(); ++i) {
      if (!xa.valid(s.x[i]) || !ya.valid(s.y[i])) continue;
      cairo_arc(cr, xa.map(s.x[i]), ya.map(s.y[i]), 3.4, 0, 2 * M_PI);
      set_color(cr, c);
      cairo_fill_preserve(cr);
      cairo_set_source_rgb(cr, 1, 1, 1);
      cairo_set_line_width(cr, 1.0);
      cairo_stroke(cr);
    }
  }
}

// Bands and lines, clipped to the plot area.
void draw_series(cairo_t* cr, const Panel& panel, const PanelFrame& f) {
  cairo_save(cr);
  cairo_rectangle(cr, f.px, f.py, f.pw, f.ph);
  cairo_clip(cr);
  draw_bands(cr, panel, f.xa, f.ya);
  draw_lines(cr, panel, f.xa, f.ya);
  cairo_restore(cr);
}

// The frame and the tick marks (y major, y minor, x).
void draw_frame(cairo_t* cr, const PanelFrame& f) {
  const double px = f.px, py = f.py, pw = f.pw, ph = f.ph;
  set_color(cr, 0x444444);
  cairo_set_line_width(cr, 1.0);
  cairo_rectangle(cr, px, py, pw, ph);
  cairo_stroke(cr);
  for (double v : f.yt.major) {
    cairo_move_to(cr, px - 4, f.ya.map(v));
    cairo_line_to(cr, px, f.ya.map(v));
  }
  for (double v : f.yt.minor) {
    cairo_move_to(cr, px - 2, f.ya.map(v));
    cairo_line_to(cr, px, f.ya.map(v));
  }
  for (double v : f.xt) {
    cairo_move_to(cr, f.xa.map(v), py + ph);
    cairo_line_to(cr, f.xa.map(v), py + ph + 4);
  }
  cairo_stroke(cr);
}

// Tick labels, axis labels and the panel title (box (bx, by, -, bh) as given to draw_panel).
void draw_labels(cairo_t* cr, Pen& pen, const Panel& panel, const PanelFrame& f, double bx, double by, double bh) {
  const double px = f.px, py = f.py, pw = f.pw, ph = f.ph;
  set_color(cr, 0x222222);
  pen.font(kFont);
  for (size_t i = 0; i < f.yt.major.size(); ++i) pen.label(px - 7, f.ya.map(f.yt.major[i]), f.yt.labels[i], 1.0, 0.5);
  const double xmax_abs = std::max(std::abs(f.xa.lo), std::abs(f.xa.hi));
  for (double v : f.xt) pen.label(f.xa.map(v), py + ph + 8, linear_label(v, f.xstep, xmax_abs), 0.5, 0.0);

  pen.font(kLabelFont);
  if (!panel.xlabel.empty()) pen.text(px + pw / 2, by + bh - 8, panel.xlabel, 0.5, 1.0);
  if (!panel.ylabel.empty()) pen.text(bx + 10, py + ph / 2, panel.ylabel, 0.5, 0.0, -M_PI / 2);
  if (!panel.title.empty()) {
    pen.font(kTitleFont, true);
    pen.text(px + pw / 2, by + 10, panel.title, 0.5, 0.0);
  }
}

// The top-left corner of a boxw × boxh legend: the plot corner (top right, top left, bottom right,
// bottom left, first wins ties) whose box covers the fewest data points.
std::pair<double, double> legend_corner(const Panel& panel, const PanelFrame& f, double boxw, double boxh) {
  const double px = f.px, py = f.py, pw = f.pw, ph = f.ph;
  const std::array<std::pair<double, double>, 4> corners = {{{px + pw - boxw - 8, py + 8},
                                                             {px + 8, py + 8},
                                                             {px + pw - boxw - 8, py + ph - boxh - 8},
                                                             {px + 8, py + ph - boxh - 8}}};
  int best = 0;
  double best_cost = INFINITY;
  for (int k = 0; k < 4; ++k) {
    const double lx = corners[k].first, ly = corners[k].second;  // no structured binding: a lambda uses them (clang)
    double cost = 0;
    for (const auto& s : panel.series)
      for (size_t i = 0; i < s.x.size(); ++i) {
        auto inside = [&](double v) {
          if (!f.xa.valid(s.x[i]) || !f.ya.valid(v)) return;
          const double X = f.xa.map(s.x[i]), Y = f.ya.map(v);
          if (X >= lx - 4 && X <= lx + boxw + 4 && Y >= ly - 4 && Y <= ly + boxh + 4) cost += 1;
        };
        inside(s.y[i]);
        if (!s.lower.empty()) {
          inside(s.lower[i]);
          inside(s.upper[i]);
        }
      }
    if (cost < best_cost - 1e-9) {
      best_cost = cost;
      best = k;
    }
  }
  return corners[best];
}

// The legend of the labelled series, in the corner that hides the fewest points.
void draw_legend(cairo_t* cr, Pen& pen, const Panel& panel, const PanelFrame& f) {
  std::vector<const Series*> entries;
  std::vector<uint32_t> colors;
  for (size_t si = 0; si < panel.series.size(); ++si)
    if (!panel.series[si].label.empty()) {
      entries.push_back(&panel.series[si]);
      colors.push_back(series_color(panel.series[si], si));
    }
  if (entries.empty()) return;
  pen.font(kFont);
  double lw = 0;
  for (const auto* s : entries) lw = std::max(lw, pen.width(s->label));
  const double row = kFont * 1.45, sample = 26;
  const double boxw = lw + sample + 20, boxh = row * entries.size() + 10;
  const auto [lx, ly] = legend_corner(panel, f, boxw, boxh);
  cairo_rectangle(cr, lx, ly, boxw, boxh);
  cairo_set_source_rgba(cr, 1, 1, 1, 0.9);
  cairo_fill_preserve(cr);
  set_color(cr, 0xcccccc);
  cairo_set_line_width(cr, 1.0);
  cairo_stroke(cr);
  for (size_t e = 0; e < entries.size(); ++e) {
    const double cy = ly + 5 + row * (e + 0.5);
    set_color(cr, colors[e]);
    cairo_set_line_width(cr, 2.0);
    dash(cr, entries[e]->dashed);
    cairo_move_to(cr, lx + 8, cy);
    cairo_line_to(cr, lx + 8 + sample, cy);
    cairo_stroke(cr);
    dash(cr, false);
    if (entries[e]->markers) {
      cairo_arc(cr, lx + 8 + sample / 2, cy, 3.4, 0, 2 * M_PI);
      cairo_fill(cr);
    }
    set_color(cr, 0x222222);
    pen.text(lx + 14 + sample, cy, entries[e]->label, 0.0, 0.5);
  }
}

// Draws one panel into the box (x, y, w, h).
void draw_panel(cairo_t* cr, const Panel& panel, double bx, double by, double bw, double bh) {
  Pen pen(cr);
  PanelFrame f;
  const auto [xr, yr] = data_ranges(panel);
  fit_axes(panel, xr, yr, f);
  layout_panel(pen, panel, bx, by, bw, bh, f);
  draw_grid(cr, f);
  draw_series(cr, panel, f);
  draw_frame(cr, f);
  draw_labels(cr, pen, panel, f, bx, by, bh);
  draw_legend(cr, pen, panel, f);
}

// ----- heatmap ------------------------------------------------------------------------------------

// Viridis, 9 anchors.
uint32_t viridis(double t) {
  static const std::array<uint32_t, 9> a = {0x440154, 0x472d7b, 0x3b528b, 0x2c728e, 0x21918c,
                                            0x28ae80, 0x5ec962, 0xaddc30, 0xfde725};
  t = std::clamp(t, 0.0, 1.0) * (a.size() - 1);
  const size_t i = std::min(size_t(t), a.size() - 2);
  const double f = t - double(i);
  auto c0 = rgb(a[i]), c1 = rgb(a[i + 1]);
  auto mix = [&](double x, double y) { return uint32_t(std::lround((x + (y - x) * f) * 255)); };
  return (mix(c0.r, c1.r) << 16) | (mix(c0.g, c1.g) << 8) | mix(c0.b, c1.b);
}

// Labels along one heatmap axis: every given label when each fits its cell, else thinned indices.
struct AxisLabels {
  std::vector<std::pair<size_t, std::string>> items;  // (cell index, text)
  double max_width = 0;
  bool rotated = false;  // column labels drawn vertically
};

AxisLabels axis_labels(cairo_t* cr, const std::vector<std::string>& given, int64_t n, double cell, bool columns) {
  Pen pen(cr);
  pen.font(kFont * 0.9);
  const double line = kFont * 1.05;
  AxisLabels out;
  if (!given.empty()) {
    for (const auto& g : given) out.max_width = std::max(out.max_width, pen.width(g));
    out.rotated = columns && out.max_width > cell * 0.9;
    if (cell >= line || (columns && !out.rotated)) {
      for (size_t i = 0; i < given.size(); ++i) out.items.emplace_back(i, given[i]);
      return out;
    }
  }
  out = {};
  const double need = columns ? pen.width(std::to_string(n - 1)) + 8 : line;
  size_t every = 1;
  while (double(every) * cell < need && every < size_t(n))
    every = every < 2 ? 2 : every < 5 ? 5 : every < 10 ? 10 : every * 2;
  for (size_t i = 0; i < size_t(n); i += every) {
    out.items.emplace_back(i, std::to_string(i));
    out.max_width = std::max(out.max_width, pen.width(out.items.back().second));
  }
  return out;
}

void draw_heatmap(cairo_t* cr, const Heatmap& m, double W, double H, double left, double top, const Axis& cbar,
                  const AxisLabels& rows, const AxisLabels& cols) {
  Pen pen(cr);
  const double size = m.size, cw = size / double(m.cols), ch = size / double(m.rows);
  auto color_at = [&](int64_t r, int64_t c, uint32_t& rgb_out) {
    const double v = m.values[size_t(r * m.cols + c)];
    if (!std::isfinite(v) || (m.log_color && v <= 0)) return false;  // blank: the white page shows
    rgb_out = viridis(((cbar.log ? std::log10(v) : v) - cbar.lo) / (cbar.hi - cbar.lo));
    return true;
  };
  if (cairo_surface_get_type(cairo_get_target(cr)) == CAIRO_SURFACE_TYPE_SVG) {
    // Vector cells (viewers would blur a scaled image): runs of equal colour per row, a hair wider than
    // the cell so that anti-aliasing leaves no seams.
    for (int64_t r = 0; r < m.rows; ++r)
      for (int64_t c = 0; c < m.cols;) {
        uint32_t k = 0, k2 = 0;
        if (!color_at(r, c, k)) {
          ++c;
          continue;
        }
        int64_t e = c + 1;
        while (e < m.cols && color_at(r, e, k2) && k2 == k) ++e;
        set_color(cr, k);
        cairo_rectangle(cr, left + cw * double(c), top + ch * double(r), cw * double(e - c) + 0.3, ch + 0.3);
        cairo_fill(cr);
        c = e;
      }
  } else {
    // An image of one pixel per cell, scaled with nearest-neighbour filtering (crisp, no seams).
    cairo_surface_t* img = cairo_image_surface_create(CAIRO_FORMAT_ARGB32, int(m.cols), int(m.rows));
    std::unique_ptr<cairo_surface_t, decltype(&cairo_surface_destroy)> guard(img, cairo_surface_destroy);
    if (cairo_surface_status(img) != CAIRO_STATUS_SUCCESS) fail("heatmap of {}x{} cells is too large", m.rows, m.cols);
    cairo_surface_flush(img);
    unsigned char* data = cairo_image_surface_get_data(img);
    const int stride = cairo_image_surface_get_stride(img);
    for (int64_t r = 0; r < m.rows; ++r) {
      auto* px = reinterpret_cast<uint32_t*>(data + r * stride);
      for (int64_t c = 0; c < m.cols; ++c) {
        uint32_t k = 0;
        px[c] = color_at(r, c, k) ? 0xff000000u | k : 0x00000000u;
      }
    }
    cairo_surface_mark_dirty(img);
    cairo_save(cr);
    cairo_translate(cr, left, top);
    cairo_scale(cr, cw, ch);
    cairo_set_source_surface(cr, img, 0, 0);
    cairo_pattern_set_filter(cairo_get_source(cr), CAIRO_FILTER_NEAREST);
    cairo_rectangle(cr, 0, 0, double(m.cols), double(m.rows));
    cairo_fill(cr);
    cairo_restore(cr);
  }
  set_color(cr, 0x444444);
  cairo_set_line_width(cr, 1.0);
  cairo_rectangle(cr, left, top, size, size);
  cairo_stroke(cr);

  // Row and column labels.
  pen.font(kFont * 0.9);
  set_color(cr, 0x222222);
  for (const auto& [i, text] : rows.items) pen.text(left - 5, top + ch * (double(i) + 0.5), text, 1.0, 0.5);
  for (const auto& [i, text] : cols.items) {
    const double x = left + cw * (double(i) + 0.5);
    if (cols.rotated) pen.text(x, top + size + 5, text, 1.0, 0.5, -M_PI / 2);
    else pen.text(x, top + size + 5, text, 0.5, 0.0);
  }

  // Colour bar.
  const double bx = left + size + 18, bw = 16;
  for (int k = 0; k < 256; ++k) {
    const double y0 = top + size * (1.0 - (k + 1) / 256.0);
    set_color(cr, viridis(k / 255.0));
    cairo_rectangle(cr, bx, y0, bw, size / 256.0 + 0.6);
    cairo_fill(cr);
  }
  set_color(cr, 0x444444);
  cairo_rectangle(cr, bx, top, bw, size);
  cairo_stroke(cr);
  TickSet ct = y_ticks(cbar);
  pen.font(kFont);
  for (size_t i = 0; i < ct.major.size(); ++i) {
    const double y = cbar.map(ct.major[i]);
    set_color(cr, 0x444444);
    cairo_move_to(cr, bx + bw, y);
    cairo_line_to(cr, bx + bw + 4, y);
    cairo_stroke(cr);
    set_color(cr, 0x222222);
    pen.label(bx + bw + 7, y, ct.labels[i], 0.0, 0.5);
  }
  pen.font(kLabelFont);
  if (!m.colorbar_label.empty()) pen.text(W - 10, top + size / 2, m.colorbar_label, 0.5, 1.0, -M_PI / 2);
  if (!m.ylabel.empty()) pen.text(12, top + size / 2, m.ylabel, 0.5, 0.0, -M_PI / 2);
  if (!m.xlabel.empty()) pen.text(left + size / 2, H - 10, m.xlabel, 0.5, 1.0);
  if (!m.title.empty()) {
    pen.font(kTitleFont, true);
    pen.text(left + size / 2, 12, m.title, 0.5, 0.0);
  }
}

}  // namespace

uint32_t palette_color(int index) {
  static const std::array<uint32_t, 10> tableau = {0x4e79a7, 0xe15759, 0x59a14f, 0xf28e2b, 0x76b7b2,
                                                   0xb07aa1, 0xedc948, 0xff9da7, 0x9c755f, 0xbab0ac};
  return tableau[size_t(((index % 10) + 10) % 10)];
}

std::vector<double> ticks(double lo, double hi, bool log_axis, bool integer_only) {
  std::vector<double> out;
  if (!(hi > lo) || !std::isfinite(lo) || !std::isfinite(hi)) return out;
  if (log_axis) {
    if (!(lo > 0)) return out;
    const int e0 = int(std::ceil(std::log10(lo) - 1e-9)), e1 = int(std::floor(std::log10(hi) + 1e-9));
    const int decades = e1 - e0 + 1;
    if (decades >= 2) {
      const int every = decades > 16 ? 4 : decades > 8 ? 2 : 1;
      for (int e = e0; e <= e1; ++e)
        if ((e - e0) % every == 0) out.push_back(std::pow(10.0, e));
      return out;
    }
    for (int e = int(std::floor(std::log10(lo))); e <= int(std::ceil(std::log10(hi))); ++e)
      for (double m : {1.0, 2.0, 5.0}) {
        const double v = m * std::pow(10.0, e);
        if (v >= lo * (1 - 1e-9) && v <= hi * (1 + 1e-9)) out.push_back(v);
      }
    if (out.size() >= 3) return out;
    out.clear();
    for (int e = int(std::floor(std::log10(lo))); e <= int(std::ceil(std::log10(hi))); ++e)
      for (int m = 1; m <= 9; ++m) {
        const double v = m * std::pow(10.0, e);
        if (v >= lo * (1 - 1e-9) && v <= hi * (1 + 1e-9)) out.push_back(v);
      }
    if (out.size() >= 3 && out.size() <= 10) return out;
    return ticks(lo, hi, false, false);  // a narrow range: plain ticks read better
  }
  double step = nice_step(hi - lo, 5);
  if (integer_only) step = std::max(1.0, std::round(step));
  const double first = std::ceil(lo / step - 1e-9) * step;
  // By index, not by adding up: where `step` is below the spacing of doubles near `first`, v += step would
  // never advance. A nice step gives about 5 ticks; kMaxTicks only bounds what rounding can add.
  constexpr double kMaxTicks = 64;
  const double count = std::min(std::floor((hi - first) / step + 1e-9) + 1, kMaxTicks);
  for (double i = 0; i < count; ++i) {
    const double v = first + i * step;
    if (!out.empty() && !(v > out.back())) continue;  // equal doubles at huge magnitudes
    out.push_back(std::abs(v) < step * 1e-9 ? 0.0 : v);
  }
  return out;
}

std::string render(const Figure& fig, const std::string& format) {
  if (fig.panels.empty()) fail("figure '{}' has no panels", fig.title);
  const double title_h = fig.title.empty() ? 0 : kFigTitleFont * 1.3 + 12;
  const double W = fig.panel_width * double(fig.panels.size()), H = fig.height + title_h;
  return render_page(W, H, fig.png_scale, format, [&](cairo_t* cr) {
    if (!fig.title.empty()) {
      Pen pen(cr);
      pen.font(kFigTitleFont, true);
      set_color(cr, 0x111111);
      pen.text(W / 2, 12, fig.title, 0.5, 0.0);
    }
    for (size_t i = 0; i < fig.panels.size(); ++i)
      draw_panel(cr, fig.panels[i], fig.panel_width * double(i), title_h, fig.panel_width, fig.height);
  });
}

std::string render(const Heatmap& m, const std::string& format) {
  if (m.rows <= 0 || m.cols <= 0) fail("heatmap '{}' has no cells", m.title);
  if (m.values.size() != size_t(m.rows * m.cols))
    fail("heatmap '{}': {} values for {}x{} cells", m.title, m.values.size(), m.rows, m.cols);
  if (!m.row_labels.empty() && m.row_labels.size() != size_t(m.rows))
    fail("heatmap '{}': {} row labels for {} rows", m.title, m.row_labels.size(), m.rows);
  if (!m.col_labels.empty() && m.col_labels.size() != size_t(m.cols))
    fail("heatmap '{}': {} column labels for {} columns", m.title, m.col_labels.size(), m.cols);
  // Colour range.
  Range vr;
  for (double v : m.values)
    if (std::isfinite(v) && (!m.log_color || v > 0)) vr.add(v);
  if (vr.empty()) vr = m.log_color ? Range{0.1, 1} : Range{0, 1};
  if (std::isfinite(m.v_min)) vr.lo = m.v_min;
  if (std::isfinite(m.v_max)) vr.hi = m.v_max;
  if (m.log_color && !(vr.lo > 0)) fail("heatmap '{}': log colours need a positive range", m.title);
  Axis cbar;
  cbar.log = m.log_color;
  cbar.lo = m.log_color ? std::log10(vr.lo) : vr.lo;
  cbar.hi = m.log_color ? std::log10(vr.hi) : vr.hi;
  if (!(cbar.hi > cbar.lo)) cbar.hi = cbar.lo + (m.log_color ? 1.0 : std::max(std::abs(cbar.lo) * 0.1, 1e-12));

  // Margins from the labels.
  AxisLabels rows, cols;
  double cbar_w = 0;
  {
    cairo_surface_t* surf = cairo_image_surface_create(CAIRO_FORMAT_ARGB32, 1, 1);
    cairo_t* cr = cairo_create(surf);
    rows = axis_labels(cr, m.row_labels, m.rows, m.size / double(m.rows), false);
    cols = axis_labels(cr, m.col_labels, m.cols, m.size / double(m.cols), true);
    Pen pen(cr);
    pen.font(kFont);
    for (const auto& l : y_ticks(cbar).labels) cbar_w = std::max(cbar_w, pen.label_width(l));
    cairo_destroy(cr);
    cairo_surface_destroy(surf);
  }
  const double left = 12 + (m.ylabel.empty() ? 0 : kLabelFont * 1.3 + 6) + rows.max_width + 8;
  const double top = m.title.empty() ? 14 : kTitleFont * 1.3 + 18;
  const double bottom =
      8 + (cols.rotated ? cols.max_width : kFont) + 8 + (m.xlabel.empty() ? 0 : kLabelFont * 1.3 + 4) + 6;
  const double right = 18 + 16 + 7 + cbar_w + (m.colorbar_label.empty() ? 0 : kLabelFont * 1.3 + 12) + 8;
  const double W = left + m.size + right, H = top + m.size + bottom;
  cbar.p0 = top + m.size;
  cbar.p1 = top;
  return render_page(W, H, m.png_scale, format,
                     [&](cairo_t* cr) { draw_heatmap(cr, m, W, H, left, top, cbar, rows, cols); });
}

Series guide_line(const std::string& label, std::vector<double> x, std::vector<double> y) {
  Series s;
  s.label = label;
  s.x = std::move(x);
  s.y = std::move(y);
  s.dashed = true;
  s.markers = false;
  s.color = 7;
  return s;
}

void save(const Figure& fig, const std::string& path) { save_any(fig, path); }
void save(const Heatmap& map, const std::string& path) { save_any(map, path); }

}  // namespace drope::plot
