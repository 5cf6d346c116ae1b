// The positional-bias analyses of the paper (drope/analyze/positional_bias.h). This file: A^c, the
// attention mass on a fixed pattern (diagonal or previous token), per layer and head, and the helpers
// shared by the analyses; the gradients of A^c (Figure 3) are in bias_grad.cpp, Proposition 3.1 in
// constant_sequence.cpp, attention maps and attention to a needle (Figures 7-8) in attention_maps.cpp,
// the RoPE-scaling curves (Figure 6) in scaling_gammas.cpp.
#include "drope/analyze/positional_bias.h"

#include <cmath>

#include "positional_bias_internal.h"

namespace drope::analyze {

namespace detail {

double norm_of(const std::vector<torch::Tensor>& grads) {
  double s = 0;
  for (const auto& g : grads)
    if (g.defined()) s += g.to(torch::kDouble).pow(2).sum().item<double>();
  return std::sqrt(s);
}

}  // namespace detail

// ----- A^c -----------------------------------------------------------------------------------------

const char* bias_weights_name(BiasWeights w) { return w == BiasWeights::kDiagonal ? "diagonal" : "previous-token"; }

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
}  // namespace drope::analyze
