// Gradients of the positional bias A^c with respect to W_Q, W_K and all parameters (Figure 3): per
// head, their spread over seeds and sequences per layer, and the reports (JSON, CSV, table, figure).
#include "drope/analyze/positional_bias.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "drope/core/cpu_budget.h"
#include "drope/core/error.h"
#include "drope/core/files.h"
#include "drope/eval/results.h"
#include "positional_bias_internal.h"

namespace drope::analyze {

namespace {

using json = nlohmann::json;

json spread_json(const Spread& s) { return {{"mean", s.mean}, {"std", s.std}, {"min", s.min}, {"max", s.max}}; }

}  // namespace

using detail::norm_of;

// ----- gradients of A^c ---------------------------------------------------------------------------

std::vector<HeadGrid> head_bias_gradients(DecoderLM& model, const torch::Tensor& ids,
                                          const std::vector<BiasWeights>& weights) {
  TORCH_CHECK(ids.dim() == 2 && ids.size(0) == 1, "head_bias_gradients: ids must be (1, T), got ", ids.sizes());
  torch::AutoGradMode grad_on(true);
  const auto& cfg = model->config();
  const int64_t L = cfg.num_layers, H = cfg.num_heads, T = ids.size(1);
  std::vector<torch::Tensor> probs;  // per layer (1, H, T, T)
  ForwardOptions opt;
  opt.attention_probs = &probs;
  model->hidden(ids, opt);
  // Every parameter; the layer's W_Q and W_K are looked up by position in this list.
  std::vector<torch::Tensor> params;
  std::vector<std::string> names;
  for (const auto& kv : model->named_parameters()) {
    names.push_back(kv.key());
    params.push_back(kv.value());
  }
  auto index_of = [&](const std::string& name) {
    auto it = std::find(names.begin(), names.end(), name);
    TORCH_INTERNAL_ASSERT(it != names.end(), "no parameter ", name);
    return size_t(it - names.begin());
  };
  std::vector<HeadGrid> out;
  for (size_t wi = 0; wi < weights.size(); ++wi) {
    const bool last_weights = wi + 1 == weights.size();
    HeadGrid grid(static_cast<size_t>(L), std::vector<HeadBiasGrad>(static_cast<size_t>(H)));
    for (int64_t l = 0; l < L; ++l) {
      const size_t iq = index_of(fmt::format("model.layers.{}.self_attn.q_proj.weight", l));
      const size_t ik = index_of(fmt::format("model.layers.{}.self_attn.k_proj.weight", l));
      auto c = bias_weights(weights[wi], T, probs[size_t(l)].scalar_type());
      auto A = positional_bias(probs[size_t(l)][0], c);  // (H)
      for (int64_t h = 0; h < H; ++h) {
        const bool retain = !(last_weights && l == L - 1 && h == H - 1);
        auto g = torch::autograd::grad({A[h]}, params, {}, retain, /*create_graph=*/false, /*allow_unused=*/true);
        auto& r = grid[size_t(l)][size_t(h)];
        r.bias = A[h].item<double>();
        r.grad_wq = norm_of({g[iq]});
        r.grad_wk = norm_of({g[ik]});
        r.grad_all = norm_of(g);
      }
    }
    out.push_back(std::move(grid));
  }
  return out;
}

Spread spread_of(const std::vector<double>& v) {
  Spread s;
  if (v.empty()) return s;
  double sum = 0;
  s.min = v[0];
  s.max = v[0];
  for (double x : v) {
    sum += x;
    s.min = std::min(s.min, x);
    s.max = std::max(s.max, x);
  }
  s.mean = sum / double(v.size());
  double var = 0;
  for (double x : v) var += (x - s.mean) * (x - s.mean);
  s.std = std::sqrt(var / double(v.size()));
  return s;
}

torch::Tensor sample_tokens(int64_t vocab, int64_t T, uint64_t seed, const std::string& text) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  if (text.empty()) return at::randint(vocab, {1, T}, gen, torch::TensorOptions().dtype(torch::kLong));
  TORCH_CHECK(int64_t(text.size()) >= T, "sample_tokens: text has ", text.size(), " tokens, need ", T);
  const int64_t start =
      at::randint(int64_t(text.size()) - T + 1, {1}, gen, torch::TensorOptions().dtype(torch::kLong)).item<int64_t>();
  auto ids = torch::empty({1, T}, torch::kLong);
  auto* out = ids.data_ptr<int64_t>();
  for (int64_t t = 0; t < T; ++t) out[t] = static_cast<unsigned char>(text[size_t(start + t)]);
  return ids;
}

std::string byte_tokens(const std::string& path, int64_t vocab, int64_t max_tokens) {
  if (vocab < 256) fail("{}: byte-level tokens need a vocabulary of at least 256, the model has {}", path, vocab);
  std::string bytes;
  if (max_tokens > 0) {
    bytes = read_file_prefix(path, uint64_t(max_tokens));
  } else {
    check_memory_estimate(double(InputFile(path).size()), fmt::format("{}: the text read whole", path),
                          "use a shorter text file");
    bytes = read_file(path);
  }
  if (bytes.empty()) fail("{}: the text file is empty", path);
  return bytes;
}

BiasGradReport bias_grad_study(DecoderLM& model, const std::string& name, const std::string& source,
                               const BiasGradOptions& options) {
  TORCH_CHECK(options.num_seqs > 0 && options.num_seeds > 0 && options.seq_len >= 2,
              "bias_grad_study: need sequences, seeds and T >= 2");
  const auto& cfg = model->config();
  const int64_t L = cfg.num_layers, H = cfg.num_heads;
  const std::vector<BiasWeights> kinds = {BiasWeights::kDiagonal, BiasWeights::kPreviousToken};
  // samples[kind][layer][quantity] → one value (mean over heads) per (seed, sequence).
  std::vector<std::vector<std::array<std::vector<double>, 4>>> samples(
      kinds.size(), std::vector<std::array<std::vector<double>, 4>>(size_t(L)));
  for (int64_t m = 0; m < options.num_seeds; ++m) {
    if (options.reinit) model->reset_parameters(uint64_t(m));
    for (int64_t n = 0; n < options.num_seqs; ++n) {
      auto ids = sample_tokens(cfg.vocab_size, options.seq_len, uint64_t(1000003 * m + n + 17), options.text);
      auto grids = head_bias_gradients(model, ids, kinds);
      for (size_t k = 0; k < kinds.size(); ++k)
        for (int64_t l = 0; l < L; ++l) {
          std::array<double, 4> mean{};
          for (const auto& r : grids[k][size_t(l)]) {
            mean[0] += r.bias / double(H);
            mean[1] += r.grad_wq / double(H);
            mean[2] += r.grad_wk / double(H);
            mean[3] += r.grad_all / double(H);
          }
          for (int q = 0; q < 4; ++q) samples[k][size_t(l)][size_t(q)].push_back(mean[size_t(q)]);
        }
    }
  }
  BiasGradReport rep;
  rep.model = name;
  rep.source = source;
  rep.config = cfg;
  rep.options = options;
  rep.options.text.clear();
  rep.from_text = !options.text.empty();
  for (size_t k = 0; k < kinds.size(); ++k) {
    BiasGradCurve curve;
    curve.weights = kinds[k];
    for (int64_t l = 0; l < L; ++l) {
      const auto& s = samples[k][size_t(l)];
      curve.layers.push_back({spread_of(s[0]), spread_of(s[1]), spread_of(s[2]), spread_of(s[3])});
    }
    rep.curves.push_back(std::move(curve));
  }
  return rep;
}

std::string bias_grad_json(const std::vector<BiasGradReport>& reports) {
  json models = json::array();
  for (const auto& r : reports) {
    json weights = json::object();
    for (const auto& c : r.curves) {
      json layers = json::array();
      for (size_t l = 0; l < c.layers.size(); ++l) {
        const auto& s = c.layers[l];
        layers.push_back({{"layer", l},
                          {"bias", spread_json(s.bias)},
                          {"grad_wq", spread_json(s.grad_wq)},
                          {"grad_wk", spread_json(s.grad_wk)},
                          {"grad_all", spread_json(s.grad_all)}});
      }
      weights[bias_weights_name(c.weights)] = layers;
    }
    models.push_back({{"name", r.model},
                      {"source", r.source},
                      {"num_layers", r.config.num_layers},
                      {"num_heads", r.config.num_heads},
                      {"positional", r.config.positional.type},
                      {"reinit_per_seed", r.options.reinit},
                      {"seq_len", r.options.seq_len},
                      {"num_seqs", r.options.num_seqs},
                      {"num_seeds", r.options.num_seeds},
                      {"input", r.from_text ? "text" : "random-tokens"},
                      {"config_yaml", model_config_to_yaml(r.config)},
                      {"weights", weights}});
  }
  json out = eval::new_results("bias-grad");
  out["description"] =
      "Attention positional bias A^c (docs/design.md#positional-bias) per layer: statistics over (sequence, seed) "
      "samples of the mean over heads; grad_* are norms of the gradient of A^c w.r.t. W_Q (q_proj.weight), "
      "W_K (k_proj.weight) and all parameters";
  out["models"] = models;
  return out.dump(2) + "\n";
}

std::string bias_grad_csv(const std::vector<BiasGradReport>& reports) {
  std::string out = "model,weights,layer";
  for (const char* q : {"bias", "grad_wq", "grad_wk", "grad_all"})
    for (const char* s : {"mean", "std", "min", "max"}) out += fmt::format(",{}_{}", q, s);
  out += "\n";
  for (const auto& r : reports)
    for (const auto& c : r.curves)
      for (size_t l = 0; l < c.layers.size(); ++l) {
        out += fmt::format("{},{},{}", r.model, bias_weights_name(c.weights), l);
        const auto& s = c.layers[l];
        for (const Spread* q : {&s.bias, &s.grad_wq, &s.grad_wk, &s.grad_all})
          out += fmt::format(",{:.6e},{:.6e},{:.6e},{:.6e}", q->mean, q->std, q->min, q->max);
        out += "\n";
      }
  return out;
}

std::string bias_grad_table(const std::vector<BiasGradReport>& reports) {
  if (reports.empty()) return "";
  const auto& o = reports[0].options;
  std::string out = fmt::format(
      "Positional-bias gradients: T = {}, {} sequences x {} seeds ({}); mean over heads, mean +- std over samples\n",
      o.seq_len, o.num_seqs, o.num_seeds, reports[0].from_text ? "text windows" : "random tokens");
  size_t name_w = 5;
  for (const auto& r : reports) name_w = std::max(name_w, r.model.size());
  for (size_t k = 0; k < reports[0].curves.size(); ++k) {
    out += fmt::format("\n{} head\n", bias_weights_name(reports[0].curves[k].weights));
    out += fmt::format("  {:<{}}  {:>5}  {:>11}  {:>11}  {:>11}  {:>23}\n", "model", name_w, "layer", "A^c",
                       "|dA/dW_Q|", "|dA/dW_K|", "|grad_theta A| +- std");
    for (const auto& r : reports)
      for (size_t l = 0; l < r.curves[k].layers.size(); ++l) {
        const auto& s = r.curves[k].layers[l];
        out += fmt::format("  {:<{}}  {:>5}  {:>11.3e}  {:>11.3e}  {:>11.3e}  {:>11.3e} +- {:<9.2e}\n", r.model, name_w,
                           l, s.bias.mean, s.grad_wq.mean, s.grad_wk.mean, s.grad_all.mean, s.grad_all.std);
      }
  }
  return out;
}

plot::Figure bias_grad_figure(const std::vector<BiasGradReport>& reports) {
  plot::Figure fig;
  if (reports.empty()) return fig;
  const auto& o = reports[0].options;
  fig.title =
      fmt::format("Positional-bias gradients at initialisation (T = {}, {} seqs \u00d7 {} seeds; band \u00b11 std)",
                  o.seq_len, o.num_seqs, o.num_seeds);
  const char* titles[] = {"Diagonal head bias", "Off-diagonal (previous-token) head bias"};
  for (size_t k = 0; k < reports[0].curves.size(); ++k) {
    plot::Panel p;
    p.title = titles[k < 2 ? k : 1];
    p.xlabel = "layer";
    p.ylabel = "mean \u2016\u2207\u03b8 A^c\u2016";
    p.log_y = true;
    p.integer_x = true;
    for (const auto& r : reports) {
      plot::Series s;
      s.label = r.model;
      for (size_t l = 0; l < r.curves[k].layers.size(); ++l) {
        const auto& g = r.curves[k].layers[l].grad_all;
        s.x.push_back(double(l));
        s.y.push_back(g.mean);
        s.lower.push_back(std::max(g.mean - g.std, g.min));
        s.upper.push_back(std::min(g.mean + g.std, g.max));
      }
      p.series.push_back(std::move(s));
    }
    fig.panels.push_back(std::move(p));
  }
  return fig;
}
}  // namespace drope::analyze
