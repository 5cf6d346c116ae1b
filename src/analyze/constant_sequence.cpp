// Proposition 3.1 on a sequence of one repeated token: deviation of the attention from uniform, A^c
// and its W_Q/W_K gradients, the loss gradients and the spread of the outputs (JSON and text reports).
#include "drope/analyze/positional_bias.h"

#include <cmath>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "drope/core/error.h"
#include "drope/eval/results.h"
#include "positional_bias_internal.h"

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

}  // namespace

using detail::norm_of;

// ----- Proposition 3.1 ----------------------------------------------------------------------------

ConstantSequenceReport constant_sequence_check(DecoderLM& model, int64_t token, int64_t T) {
  const auto& cfg = model->config();
  if (token < 0 || token >= cfg.vocab_size) fail("token {} is outside the vocabulary [0, {})", token, cfg.vocab_size);
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
}  // namespace drope::analyze
