#include <cmath>

#include <torch/torch.h>

#include "drope/model/drope.h"
#include "drope/model/transformer.h"
#include "test_util.h"

using namespace drope;

namespace {

ModelConfig small(const std::string& positional) {
  auto c = model_preset("micro");
  c.positional.type = parse_name<PositionalType>(positional, "test");
  c.init_std = 0.3;  // large enough that attention is far from uniform for distinct tokens
  return c;
}

struct ConstantSeqResult {
  double max_dev_from_uniform = 0;  // max |α_ij − 1/i|
  double output_spread = 0;         // max over positions of |h_i − h_1|
  double loss_wq_grad = 0;          // ‖∂L/∂W_Q‖ for a scalar L of the outputs, summed over layers
  double bias = 0;                  // Σ over layers and heads of A^c (diagonal weights)
  double bias_wq_grad = 0, bias_wk_grad = 0;  // ‖∂A/∂W_Q‖, ‖∂A/∂W_K‖
};

// Diagonal-head weights c (docs/design.md#positional-bias): c_ii = 1, c_ij = −1/(i−1) for j < i (1-based i),
// row 1 zero.
torch::Tensor diagonal_weights(int64_t T) {
  auto c = torch::zeros({T, T}, torch::kDouble);
  for (int64_t i = 1; i < T; ++i) {
    c[i][i] = 1.0;
    for (int64_t j = 0; j < i; ++j) c[i][j] = -1.0 / double(i);
  }
  return c;
}

double grad_norm(DecoderLM& m, const char* name) {
  double n = 0;
  for (auto& kv : m->named_parameters())
    if (kv.key().find(name) != std::string::npos && kv.value().grad().defined())
      n += kv.value().grad().norm().item<double>();
  return n;
}

// Proposition 3.1 setting: a sequence of one repeated token, float64.
ConstantSeqResult constant_sequence(const std::string& positional) {
  DecoderLM m(small(positional));
  m->reset_parameters(7);
  m->to(torch::kDouble);
  const int64_t T = 16;
  auto ids = torch::full({1, T}, 5, torch::kLong);
  std::vector<torch::Tensor> probs;
  ForwardOptions opt;
  opt.attention_probs = &probs;
  auto h = m->hidden(ids, opt);  // (1, T, C)
  ConstantSeqResult r;
  auto rows = torch::arange(1, T + 1, torch::kDouble).view({T, 1});
  auto causal = torch::ones({T, T}, torch::kBool).tril();
  auto uniform = torch::where(causal, 1.0 / rows, torch::zeros({T, T}, torch::kDouble));
  for (const auto& p : probs)
    r.max_dev_from_uniform = std::max(r.max_dev_from_uniform, (p[0] - uniform).abs().max().item<double>());
  r.output_spread = (h[0] - h[0][0]).abs().max().item<double>();
  // A loss on the outputs.
  auto w = torch::randn({h.size(2)}, torch::kDouble);
  (h * w).sum().backward({}, /*retain_graph=*/true);
  r.loss_wq_grad = grad_norm(m, "q_proj.weight");
  m->zero_grad();
  // The positional bias A^c = (1/T) Σ_i Σ_j c_ij α_ij summed over layers and heads.
  auto c = diagonal_weights(T);
  auto A = torch::zeros({}, torch::kDouble);
  for (const auto& p : probs) A = A + (p[0] * c).sum() / double(T);
  r.bias = A.item<double>();
  A.backward();
  r.bias_wq_grad = grad_norm(m, "q_proj.weight");
  r.bias_wk_grad = grad_norm(m, "k_proj.weight");
  return r;
}

}  // namespace

TEST(Proposition31, NoPEConstantSequenceIsUniformWithZeroBiasGradients) {
  auto nope = constant_sequence("nope");
  auto rope = constant_sequence("rope");
  // (1) uniform attention, (3) A^c = 0 and its gradient 0, (4) constant outputs; the W_Q gradient of a
  // loss on the outputs vanishes.
  EXPECT_LT(nope.max_dev_from_uniform, 1e-12);
  EXPECT_LT(std::abs(nope.bias), 1e-12);
  EXPECT_LT(nope.bias_wq_grad, 1e-12);
  EXPECT_LT(nope.bias_wk_grad, 1e-12);
  EXPECT_LT(nope.output_spread, 1e-10);
  EXPECT_LT(nope.loss_wq_grad, 1e-10);
  // RoPE (Proposition 3.2): attention is not uniform and A^c has non-zero gradients...
  EXPECT_GT(rope.max_dev_from_uniform, 1e-3);
  EXPECT_GT(std::abs(rope.bias), 1e-4);
  EXPECT_GT(rope.bias_wq_grad, 1e-3);
  EXPECT_GT(rope.bias_wk_grad, 1e-3);
  // ...while (4) still holds (values are identical), so a loss on the outputs cannot see W_Q either.
  EXPECT_LT(rope.output_spread, 1e-10);
  EXPECT_LT(rope.loss_wq_grad, 1e-10);
}

TEST(DroPE, TransformKeepsWeightsChangesLogitsAddsUnitNorms) {
  auto cfg = small("rope");
  DecoderLM rope(cfg);
  rope->reset_parameters(3);
  auto dropped = drop_positional(rope, {QkNorm::kQk, false});
  const auto& dc = dropped->config();
  for (const auto& l : dc.layer_plan()) EXPECT_EQ(l.kind, PositionalKind::kNope);
  EXPECT_EQ(dc.qk_norm, QkNorm::kQk);
  auto src = rope->named_parameters();
  int norms = 0;
  for (const auto& kv : dropped->named_parameters()) {
    if (auto* s = src.find(kv.key())) {
      EXPECT_TRUE(torch::equal(*s, kv.value())) << kv.key();
    } else {
      ++norms;
      EXPECT_TRUE(kv.key().find("q_norm") != std::string::npos || kv.key().find("k_norm") != std::string::npos);
      EXPECT_TRUE(torch::equal(kv.value(), torch::ones_like(kv.value()))) << kv.key();
    }
  }
  EXPECT_EQ(norms, 2 * cfg.num_layers);
  EXPECT_EQ(dropped->named_parameters()["model.layers.0.self_attn.q_norm.weight"].size(0), cfg.num_heads * 16);
  EXPECT_EQ(dropped->named_parameters()["model.layers.0.self_attn.k_norm.weight"].size(0), cfg.num_kv_heads * 16);
  torch::NoGradGuard ng;
  auto ids = torch::randint(0, cfg.vocab_size, {2, 20});
  auto a = rope->forward(ids), b = dropped->forward(ids);
  EXPECT_GT((a - b).abs().max().item<double>(), 1e-3);
  // Without QK-norm, DroPE equals the same weights run as a NoPE model.
  auto plain = drop_positional(rope, {});
  auto nope_cfg = cfg;
  nope_cfg.positional.type = PositionalType::kNope;
  DecoderLM nope(nope_cfg);
  copy_parameters(nope, rope);
  EXPECT_TRUE(torch::allclose(plain->forward(ids), nope->forward(ids)));
  // Per-head norms have head-dim weights.
  auto ph = drop_positional(rope, {QkNorm::kQ, true});
  EXPECT_EQ(ph->named_parameters()["model.layers.1.self_attn.q_norm.weight"].size(0), 16);
  EXPECT_EQ(ph->named_parameters().find("model.layers.1.self_attn.k_norm.weight"), nullptr);
  // Dropping again with another QK-norm would discard the trained norm weights: refused, saying why and the fix.
  test::expect_error([&] { drop_positional(ph, {QkNorm::kQ, false}); },
                     {"the model already has QK-norm q per head; dropping with QK-norm q would replace its trained "
                      "norm weights",
                      "QK-norm none"});
  EXPECT_EQ(drop_positional(ph, {QkNorm::kQ, true})->named_parameters().size(), ph->named_parameters().size());
  EXPECT_EQ(drop_positional(ph)->config().qk_norm, QkNorm::kQ);  // none keeps the model's
  try {
    drop_positional(ph, {QkNorm::kQ, false});
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).find("copy_parameters"), std::string::npos) << e.what();
  }
}

TEST(Temperature, AppliedOnlyBeyondTrainingLength) {
  EXPECT_DOUBLE_EQ(softmax_temperature(0.412, 512, 1024), 1.0);
  EXPECT_DOUBLE_EQ(softmax_temperature(0.412, 1024, 1024), 1.0);
  EXPECT_NEAR(softmax_temperature(0.412, 2048, 1024), 1.0 + 0.412 * std::log(2.0), 1e-15);
  auto cfg = small("nope");
  cfg.max_position = 8;
  DecoderLM m(cfg);
  auto ctx_short = m->position_context(0, 8, torch::kFloat);
  auto ctx_long = m->position_context(0, 32, torch::kFloat);
  EXPECT_DOUBLE_EQ(ctx_short.logit_scale, ctx_long.logit_scale);  // c = 0: no temperature
  cfg.softmax_temperature = 0.5;
  DecoderLM t(cfg);
  EXPECT_DOUBLE_EQ(t->position_context(0, 8, torch::kFloat).logit_scale, 1.0 / 4.0);
  EXPECT_NEAR(t->position_context(0, 32, torch::kFloat).logit_scale, (1.0 + 0.5 * std::log(4.0)) / 4.0, 1e-15);
}

TEST(Model, GqaAlibiAndParameterCount) {
  auto cfg = small("alibi");
  DecoderLM m(cfg);
  const int64_t C = 64, F = 128, V = 256, L = 2, qd = 64, kvd = 32;
  const int64_t per_layer = C * qd + 2 * C * kvd + qd * C + 3 * C * F + 2 * C;
  EXPECT_EQ(m->num_parameters(), V * C + L * per_layer + C);
  torch::NoGradGuard ng;
  auto logits = m->forward(torch::randint(0, V, {2, 9}));
  EXPECT_EQ(logits.sizes(), (std::vector<int64_t>{2, 9, V}));
  EXPECT_TRUE(torch::isfinite(logits).all().item<bool>());
  // Causality: changing a later token leaves earlier logits untouched.
  auto ids = torch::randint(0, V, {1, 9});
  auto ids2 = ids.clone();
  ids2[0][8] = (ids[0][8].item<int64_t>() + 1) % V;
  EXPECT_TRUE(torch::equal(m->forward(ids).narrow(1, 0, 8), m->forward(ids2).narrow(1, 0, 8)));
}
