// RoPE-scaling curves (Figure 6): γ_m = scaled / base frequency per rotary pair for PI, NTK, YaRN,
// dynamic variants and Llama 3, as CSV and a figure.
#include "drope/analyze/positional_bias.h"

#include <cmath>

#include <fmt/format.h>

#include "drope/model/rope_scaling.h"

namespace drope::analyze {

namespace {

std::string pretty_type(const std::string& t) {
  if (t == "pi") return "PI";
  if (t == "ntk") return "NTK";
  if (t == "yarn") return "YaRN";
  if (t == "dynamic-ntk") return "dynamic NTK";
  if (t == "dynamic-yarn") return "dynamic YaRN";
  if (t == "llama3") return "Llama 3";
  return t;
}

}  // namespace

// ----- RoPE scaling -------------------------------------------------------------------------------

std::vector<GammaCurve> scaling_gammas(double theta, int64_t head_dim, int64_t train_length,
                                       const std::vector<std::string>& types, const std::vector<double>& factors,
                                       const RopeScalingConfig& base) {
  const auto omega = rope_base_frequencies(theta, head_dim);
  std::vector<GammaCurve> out;
  for (double f : factors)
    for (const auto& t : types) {
      RopeScalingConfig sc = base;
      sc.type = parse_name<RopeScalingType>(t, "RoPE scaling type");
      sc.factor = f;
      // Dynamic methods are shown at the extended length s·L0.
      auto r = rope_frequencies(theta, head_dim, sc, train_length, int64_t(std::llround(f * double(train_length))));
      GammaCurve c;
      c.type = t;
      c.factor = f;
      c.attention_factor = r.attention_factor;
      for (size_t m = 0; m < omega.size(); ++m) c.gamma.push_back(r.inv_freq[m] / omega[m]);
      out.push_back(std::move(c));
    }
  return out;
}

std::string gamma_csv(const std::vector<GammaCurve>& curves) {
  std::string out = "type,factor,m,gamma,attention_factor\n";
  for (const auto& c : curves)
    for (size_t m = 0; m < c.gamma.size(); ++m)
      out += fmt::format("{},{:g},{},{:.9g},{:.9g}\n", c.type, c.factor, m, c.gamma[m], c.attention_factor);
  return out;
}

plot::Figure gamma_figure(const std::vector<GammaCurve>& curves, double theta, int64_t head_dim, int64_t train_length) {
  plot::Figure fig;
  fig.title =
      fmt::format("RoPE frequency scaling \u03b3_m = \u03c9'_m / \u03c9_m   (d = {}, \u03b8 = {:g}, L\u2080 = {})",
                  head_dim, theta, train_length);
  fig.panel_width = 400;
  std::vector<double> factors;
  std::vector<std::string> types;
  for (const auto& c : curves) {
    if (std::find(factors.begin(), factors.end(), c.factor) == factors.end()) factors.push_back(c.factor);
    if (std::find(types.begin(), types.end(), c.type) == types.end()) types.push_back(c.type);
  }
  for (double f : factors) {
    plot::Panel p;
    p.title = fmt::format("s = {:g}", f);
    p.xlabel = "frequency index m (high \u2192 low frequency)";
    p.ylabel = fig.panels.empty() ? "\u03b3_m" : "";
    p.y_min = 0.0;
    p.y_max = 1.08;
    p.integer_x = true;
    for (const auto& c : curves) {
      if (c.factor != f) continue;
      plot::Series s;
      s.label = c.type == "pi" ? fmt::format("PI (\u03b3 = 1/s = {:.3g})", 1.0 / f) : pretty_type(c.type);
      s.markers = false;
      s.color = int(std::find(types.begin(), types.end(), c.type) - types.begin());
      for (size_t m = 0; m < c.gamma.size(); ++m) {
        s.x.push_back(double(m));
        s.y.push_back(c.gamma[m]);
      }
      p.series.push_back(std::move(s));
    }
    fig.panels.push_back(std::move(p));
  }
  return fig;
}
}  // namespace drope::analyze
