// Attention maps of one layer and head (heatmaps with byte labels) and the attention a query pays to a
// needle span across layers (Figures 7-8).
#include "drope/analyze/positional_bias.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "drope/core/error.h"
#include "drope/eval/results.h"

namespace drope::analyze {

// ----- attention maps -----------------------------------------------------------------------------

void check_layer_head(const ModelConfig& cfg, int64_t layer, int64_t head) {
  if (layer < 0 || layer >= cfg.num_layers)
    fail("layer {} is out of range: the model has {} layers (valid 0..{})", layer, cfg.num_layers, cfg.num_layers - 1);
  if (head < 0 || head >= cfg.num_heads)
    fail("head {} is out of range: the model has {} heads per layer (valid 0..{})", head, cfg.num_heads,
         cfg.num_heads - 1);
}

torch::Tensor attention_map(DecoderLM& model, const torch::Tensor& ids, int64_t layer, int64_t head) {
  check_layer_head(model->config(), layer, head);
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> probs;
  ForwardOptions opt;
  opt.attention_probs = &probs;
  model->hidden(ids, opt);
  return probs[size_t(layer)][0][head].to(torch::kDouble).contiguous();  // (T, T)
}

NeedleAttention needle_attention(DecoderLM& model, const torch::Tensor& ids, int64_t needle_begin, int64_t needle_end,
                                 int64_t window, const std::string& label) {
  const int64_t T = ids.size(1);
  if (!(0 <= needle_begin && needle_begin < needle_end && needle_end <= T))
    fail("needle attention: needle tokens [{}, {}) outside the prompt of {} tokens", needle_begin, needle_end, T);
  if (window < 0) fail("needle attention: window must be >= 0, got {}", window);
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> probs;
  ForwardOptions opt;
  opt.attention_probs = &probs;
  model->hidden(ids, opt);
  NeedleAttention r;
  r.label = label;
  r.needle_begin = needle_begin;
  r.needle_end = needle_end;
  r.prompt_tokens = T;
  r.uniform_mass = double(needle_end - needle_begin) / double(T);
  const int64_t lo = std::max<int64_t>(0, needle_begin - window), hi = std::min<int64_t>(T, needle_end + window);
  for (int64_t j = lo; j < hi; ++j) r.key_offset.push_back(j - needle_begin);
  r.mean.assign(size_t(hi - lo), 0.0);
  for (const auto& p : probs) {
    auto last = p[0].select(1, T - 1).to(torch::kDouble).mean(0);  // (T): last query, mean over heads
    auto acc = last.accessor<double, 1>();
    std::vector<double> row;
    for (int64_t j = lo; j < hi; ++j) row.push_back(acc[j]);
    double mass = 0;
    for (int64_t j = needle_begin; j < needle_end; ++j) mass += acc[j];
    for (size_t k = 0; k < row.size(); ++k) r.mean[k] += row[k] / double(probs.size());
    r.per_layer.push_back(std::move(row));
    r.needle_mass.push_back(mass);
    r.mean_needle_mass += mass / double(probs.size());
  }
  return r;
}

std::string needle_attention_json(const std::vector<NeedleAttention>& runs) {
  nlohmann::json j = eval::new_results("needle-attention");
  j["runs"] = nlohmann::json::array();
  for (const auto& r : runs)
    j["runs"].push_back({{"label", r.label},
                         {"needle_begin", r.needle_begin},
                         {"needle_end", r.needle_end},
                         {"prompt_tokens", r.prompt_tokens},
                         {"key_offset", r.key_offset},
                         {"mean", r.mean},
                         {"per_layer", r.per_layer},
                         {"needle_mass", r.needle_mass},
                         {"mean_needle_mass", r.mean_needle_mass},
                         {"uniform_mass", r.uniform_mass}});
  return j.dump(2) + "\n";
}

std::string needle_attention_csv(const std::vector<NeedleAttention>& runs) {
  std::string out = "label,layer,needle_mass,uniform_mass\n";
  for (const auto& r : runs)
    for (size_t l = 0; l < r.needle_mass.size(); ++l)
      out += fmt::format("{},{},{:.6g},{:.6g}\n", r.label, l, r.needle_mass[l], r.uniform_mass);
  return out;
}

plot::Figure needle_attention_figure(const std::vector<NeedleAttention>& runs) {
  plot::Figure fig;
  fig.title = "Attention of the last query to the needle";
  plot::Panel around, mass;
  around.title = "around the needle (mean over layers and heads)";
  around.xlabel = "key position − needle start";
  around.ylabel = "attention";
  around.log_y = true;
  mass.title = "attention mass on the needle";
  mass.xlabel = "layer";
  mass.ylabel = "mass";
  mass.integer_x = true;
  for (const auto& r : runs) {
    plot::Series a;
    a.label = r.label;
    a.markers = false;
    for (size_t k = 0; k < r.key_offset.size(); ++k) {
      a.x.push_back(double(r.key_offset[k]));
      a.y.push_back(r.mean[k]);
    }
    around.series.push_back(a);
    plot::Series m;
    m.label = r.label;
    for (size_t l = 0; l < r.needle_mass.size(); ++l) {
      m.x.push_back(double(l));
      m.y.push_back(r.needle_mass[l]);
    }
    mass.series.push_back(m);
  }
  if (!runs.empty()) {
    plot::Series u;
    u.label = "uniform";
    u.dashed = true;
    u.markers = false;
    u.color = 7;
    u.x = {0.0, double(std::max<size_t>(1, runs[0].needle_mass.size()) - 1)};
    u.y = {runs[0].uniform_mass, runs[0].uniform_mass};
    mass.series.push_back(u);
    plot::Series span;
    span.label = "needle";
    span.dashed = true;
    span.markers = false;
    span.color = 7;
    double lo = 1e300, hi = 0;
    for (const auto& r : runs)
      for (double y : r.mean)
        if (y > 0) lo = std::min(lo, y), hi = std::max(hi, y);
    if (hi > 0) {
      const double w = double(runs[0].needle_end - runs[0].needle_begin);
      span.x = {0.0, 0.0, w, w};
      span.y = {lo, hi, hi, lo};
      around.series.push_back(span);
    }
  }
  fig.panels = {around, mass};
  return fig;
}

plot::Heatmap attention_heatmap(const torch::Tensor& map, const std::vector<std::string>& labels,
                                const std::string& title, bool log_color) {
  TORCH_CHECK(map.dim() == 2 && map.size(0) == map.size(1), "attention_heatmap: map must be (T, T)");
  const int64_t T = map.size(0);
  auto m = map.to(torch::kDouble).contiguous();
  plot::Heatmap h;
  h.title = title;
  h.xlabel = "key position j";
  h.ylabel = "query position i";
  h.colorbar_label = log_color ? "attention \u03b1_ij (log scale)" : "attention \u03b1_ij";
  h.rows = T;
  h.cols = T;
  h.log_color = log_color;
  const double* p = m.data_ptr<double>();
  h.values.assign(p, p + T * T);
  for (int64_t i = 0; i < T; ++i)
    for (int64_t j = i + 1; j < T; ++j) h.values[size_t(i * T + j)] = std::numeric_limits<double>::quiet_NaN();
  if (!log_color) h.v_min = 0.0;
  if (!labels.empty()) {
    h.row_labels = labels;
    h.col_labels = labels;
  }
  return h;
}

std::vector<std::string> byte_labels(const torch::Tensor& ids) {
  auto v = ids.reshape({-1}).to(torch::kLong).contiguous();
  std::vector<std::string> out;
  for (int64_t i = 0; i < v.numel(); ++i) {
    const int64_t t = v.data_ptr<int64_t>()[i];
    if (t == ' ') out.push_back("\u2423");
    else if (t == '\n') out.push_back("\\n");
    else if (t == '\t') out.push_back("\\t");
    else if (t > 32 && t < 127) out.push_back(std::string(1, char(t)));
    else out.push_back(fmt::format("#{}", t));
  }
  return out;
}
}  // namespace drope::analyze
