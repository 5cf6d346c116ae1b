#include "drope/analyze/positional_bias.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "drope/core/error.h"
#include "drope/core/files.h"
#include "drope/eval/results.h"
#include "drope/model/rope_scaling.h"

namespace drope::analyze {

namespace {

using json = nlohmann::json;

// The parameters named `<prefix>.<layer>.self_attn.<suffix>` for every layer, in layer order.
std::vector<torch::Tensor> attention_weights(DecoderLM& model, const std::string& suffix) {
  std::vector<torch::Tensor> out;
  for (int64_t l = 0; l < model->config().num_layers; ++l)
    out.push_back(model->named_parameters()[fmt::format("model.layers.{}.self_attn.{}", l, suffix)]);
  return out;
}

double norm_of(const std::vector<torch::Tensor>& grads) {
  double s = 0;
  for (const auto& g : grads)
    if (g.defined()) s += g.to(torch::kDouble).pow(2).sum().item<double>();
  return std::sqrt(s);
}

json spread_json(const Spread& s) { return {{"mean", s.mean}, {"std", s.std}, {"min", s.min}, {"max", s.max}}; }

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

// ----- A^c -----------------------------------------------------------------------------------------

const char* bias_weights_name(BiasWeights w) {
  return w == BiasWeights::kDiagonal ? "diagonal" : "previous-token";
}

torch::Tensor bias_weights(BiasWeights w, int64_t T, torch::ScalarType dtype) {
  TORCH_CHECK(T >= 1, "bias_weights: T must be >= 1, got ", T);
  auto i = torch::arange(1, T + 1, torch::kDouble).view({T, 1});  // (T, 1) query index, 1-based
  auto j = torch::arange(1, T + 1, torch::kDouble).view({1, T});  // (1, T) key index, 1-based
  auto others = torch::where(i > 1, -1.0 / (i - 1).clamp_min(1), torch::zeros_like(i));  // (T, 1) −1/(i−1)
  auto target = w == BiasWeights::kDiagonal ? j == i : j == i - 1;                      // (T, T) the "1" cell
  auto c = torch::where(j <= i, others.expand({T, T}), torch::zeros({T, T}, torch::kDouble));
  c = torch::where(target & (i > 1), torch::ones({T, T}, torch::kDouble), c);  // (T, T)
  return c.to(dtype);
}

torch::Tensor positional_bias(const torch::Tensor& probs, const torch::Tensor& c) {
  const int64_t T = probs.size(-1);
  TORCH_CHECK(probs.size(-2) == T && c.size(0) == T && c.size(1) == T, "positional_bias: probs ", probs.sizes(),
              " and weights ", c.sizes(), " must end in (T, T)");
  return (probs * c.to(probs.scalar_type())).sum({-2, -1}) / double(T);
}

torch::Tensor layer_bias(DecoderLM& model, const torch::Tensor& ids, BiasWeights w, int64_t layer) {
  check_layer_head(model->config(), layer, 0);
  std::vector<torch::Tensor> probs;
  ForwardOptions opt;
  opt.attention_probs = &probs;
  model->hidden(ids, opt);
  return positional_bias(probs[size_t(layer)][0], bias_weights(w, ids.size(1), probs[size_t(layer)].scalar_type()));
}

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

torch::Tensor sample_tokens(int64_t vocab, int64_t T, uint64_t seed, const std::vector<int64_t>& text) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  if (text.empty()) return at::randint(vocab, {1, T}, gen, torch::TensorOptions().dtype(torch::kLong));
  TORCH_CHECK(int64_t(text.size()) >= T, "sample_tokens: text has ", text.size(), " tokens, need ", T);
  const int64_t start =
      at::randint(int64_t(text.size()) - T + 1, {1}, gen, torch::TensorOptions().dtype(torch::kLong)).item<int64_t>();
  return torch::tensor(std::vector<int64_t>(text.begin() + start, text.begin() + start + T), torch::kLong).view({1, T});
}

std::vector<int64_t> byte_tokens(const std::string& path, int64_t vocab) {
  if (vocab < 256) fail("{}: byte-level tokens need a vocabulary of at least 256, the model has {}", path, vocab);
  const std::string bytes = read_file(path);
  if (bytes.empty()) fail("{}: the text file is empty", path);
  std::vector<int64_t> out(bytes.size());
  for (size_t i = 0; i < bytes.size(); ++i) out[i] = int64_t(static_cast<unsigned char>(bytes[i]));
  return out;
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
        layers.push_back({{"layer", l}, {"bias", spread_json(s.bias)}, {"grad_wq", spread_json(s.grad_wq)},
                          {"grad_wk", spread_json(s.grad_wk)}, {"grad_all", spread_json(s.grad_all)}});
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
      "Attention positional bias A^c (SPEC §6) per layer: statistics over (sequence, seed) samples of the mean "
      "over heads; grad_* are norms of the gradient of A^c w.r.t. W_Q (q_proj.weight), W_K (k_proj.weight) and "
      "all parameters";
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
    out += fmt::format("  {:<{}}  {:>5}  {:>11}  {:>11}  {:>11}  {:>23}\n", "model", name_w, "layer", "A^c", "|dA/dW_Q|",
                       "|dA/dW_K|", "|grad_theta A| +- std");
    for (const auto& r : reports)
      for (size_t l = 0; l < r.curves[k].layers.size(); ++l) {
        const auto& s = r.curves[k].layers[l];
        out += fmt::format("  {:<{}}  {:>5}  {:>11.3e}  {:>11.3e}  {:>11.3e}  {:>11.3e} +- {:<9.2e}\n", r.model, name_w, l,
                           s.bias.mean, s.grad_wq.mean, s.grad_wk.mean, s.grad_all.mean, s.grad_all.std);
      }
  }
  return out;
}

plot::Figure bias_grad_figure(const std::vector<BiasGradReport>& reports) {
  plot::Figure fig;
  if (reports.empty()) return fig;
  const auto& o = reports[0].options;
  fig.title = fmt::format("Positional-bias gradients at initialisation (T = {}, {} seqs \u00d7 {} seeds; band \u00b11 std)",
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

// ----- Proposition 3.1 ----------------------------------------------------------------------------

ConstantSequenceReport constant_sequence_check(DecoderLM& model, int64_t token, int64_t T) {
  const auto& cfg = model->config();
  if (token < 0 || token >= cfg.vocab_size)
    fail("token {} is outside the vocabulary [0, {})", token, cfg.vocab_size);
  if (T < 2) fail("sequence length must be at least 2, got {}", T);
  torch::AutoGradMode grad_on(true);
  ConstantSequenceReport r;
  r.token = token;
  r.seq_len = T;
  auto ids = torch::full({1, T}, token, torch::kLong);
  std::vector<torch::Tensor> probs;  // per layer (1, H, T, T)
  ForwardOptions opt;
  opt.attention_probs = &probs;
  auto h = model->hidden(ids, opt);  // (1, T, C)
  const auto dtype = probs.at(0).scalar_type();
  auto rows = torch::arange(1, T + 1, torch::TensorOptions().dtype(dtype)).view({T, 1});
  auto causal = torch::ones({T, T}, torch::kBool).tril();
  auto uniform = torch::where(causal, 1.0 / rows, torch::zeros({T, T}, dtype));  // (T, T) α_ij = 1/i
  auto c = bias_weights(BiasWeights::kDiagonal, T, dtype);
  auto A = torch::zeros({}, dtype);
  for (const auto& p : probs) {
    const double dev = (p[0].detach() - uniform).abs().max().item<double>();
    r.attention_deviation.push_back(dev);
    r.max_attention_deviation = std::max(r.max_attention_deviation, dev);
    A = A + positional_bias(p[0], c).sum();
  }
  r.bias = A.item<double>();
  r.output_spread = (h[0] - h[0][0]).abs().max().item<double>();
  auto wq = attention_weights(model, "q_proj.weight"), wk = attention_weights(model, "k_proj.weight");
  std::vector<torch::Tensor> qk = wq;
  qk.insert(qk.end(), wk.begin(), wk.end());
  auto split_norms = [&](const std::vector<torch::Tensor>& g, double& nq, double& nk) {
    nq = norm_of(std::vector<torch::Tensor>(g.begin(), g.begin() + long(wq.size())));
    nk = norm_of(std::vector<torch::Tensor>(g.begin() + long(wq.size()), g.end()));
  };
  auto gA = torch::autograd::grad({A}, qk, {}, /*retain_graph=*/true, false, /*allow_unused=*/true);
  split_norms(gA, r.bias_grad_wq, r.bias_grad_wk);
  auto logits = torch::matmul(h, model->lm_head_weight().t());  // (1, T, V)
  auto loss = torch::nn::functional::cross_entropy(logits[0].slice(0, 0, T - 1), ids[0].slice(0, 1, T));
  auto gL = torch::autograd::grad({loss}, qk, {}, /*retain_graph=*/false, false, /*allow_unused=*/true);
  split_norms(gL, r.loss_grad_wq, r.loss_grad_wk);
  return r;
}

std::string constant_sequence_json(const ConstantSequenceReport& r, const std::string& model) {
  json j = eval::new_results("constant-seq");
  j.update({{"model", model},
            {"token", r.token},
            {"seq_len", r.seq_len},
            {"max_attention_deviation", r.max_attention_deviation},
            {"attention_deviation_per_layer", r.attention_deviation},
            {"bias_diagonal", r.bias},
            {"bias_grad_wq", r.bias_grad_wq},
            {"bias_grad_wk", r.bias_grad_wk},
            {"loss_grad_wq", r.loss_grad_wq},
            {"loss_grad_wk", r.loss_grad_wk},
            {"output_spread", r.output_spread}});
  return j.dump(2) + "\n";
}

std::string constant_sequence_text(const ConstantSequenceReport& r, const std::string& model) {
  std::string out = fmt::format("Proposition 3.1 check: {} on {} copies of token {}\n", model, r.seq_len, r.token);
  out += fmt::format("  (1) max |alpha_ij - 1/i|            {:.3e}", r.max_attention_deviation);
  std::string per;
  for (double d : r.attention_deviation) per += fmt::format("{}{:.2e}", per.empty() ? "" : ", ", d);
  out += fmt::format("   per layer: {}\n", per);
  out += fmt::format("  (2) |dL/dW_Q|, |dL/dW_K|            {:.3e}, {:.3e}\n", r.loss_grad_wq, r.loss_grad_wk);
  out += fmt::format("  (3) A^c (diagonal, sum of heads)    {:.3e}\n", r.bias);
  out += fmt::format("      |dA/dW_Q|, |dA/dW_K|            {:.3e}, {:.3e}\n", r.bias_grad_wq, r.bias_grad_wk);
  out += fmt::format("  (4) output spread max|h_i - h_1|    {:.3e}\n", r.output_spread);
  return out;
}

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
    j["runs"].push_back({{"label", r.label}, {"needle_begin", r.needle_begin}, {"needle_end", r.needle_end},
                 {"prompt_tokens", r.prompt_tokens}, {"key_offset", r.key_offset}, {"mean", r.mean},
                 {"per_layer", r.per_layer}, {"needle_mass", r.needle_mass},
                 {"mean_needle_mass", r.mean_needle_mass}, {"uniform_mass", r.uniform_mass}});
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
    if (t == ' ')
      out.push_back("\u2423");
    else if (t == '\n')
      out.push_back("\\n");
    else if (t == '\t')
      out.push_back("\\t");
    else if (t > 32 && t < 127)
      out.push_back(std::string(1, char(t)));
    else
      out.push_back(fmt::format("#{}", t));
  }
  return out;
}

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
  fig.title = fmt::format("RoPE frequency scaling \u03b3_m = \u03c9'_m / \u03c9_m   (d = {}, \u03b8 = {:g}, L\u2080 = {})",
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
