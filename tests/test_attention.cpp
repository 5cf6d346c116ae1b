#include <cmath>

#include <torch/torch.h>

#include "drope/model/transformer.h"
#include "drope/ops/attention.h"
#include "test_util.h"

using namespace drope;

TEST(Alibi, SlopesForAnyHeadCount) {
  auto s8 = ops::alibi_slopes(8);
  ASSERT_EQ(s8.size(), 8u);
  for (int k = 0; k < 8; ++k) EXPECT_DOUBLE_EQ(s8[k], std::pow(2.0, -(k + 1.0)));
  auto s12 = ops::alibi_slopes(12);
  ASSERT_EQ(s12.size(), 12u);
  for (int k = 0; k < 8; ++k) EXPECT_DOUBLE_EQ(s12[k], std::pow(2.0, -(k + 1.0)));
  const double extra[] = {0.70710678, 0.35355339, 0.17677670, 0.08838835};
  for (int k = 0; k < 4; ++k) EXPECT_NEAR(s12[8 + k], extra[k], 1e-8);
  auto s15 = ops::alibi_slopes(15);
  ASSERT_EQ(s15.size(), 15u);
  for (int k = 0; k < 7; ++k) EXPECT_NEAR(s15[8 + k], std::pow(2.0, -0.5 * (2 * k + 1)), 1e-12);
}

namespace {
// Independent scalar float64 loop: softmax over visible keys of scale·q·k − slope·(i − j).
torch::Tensor naive(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, bool causal, int64_t window,
                    const std::vector<double>& slopes, double scale, int64_t off) {
  const int64_t B = q.size(0), H = q.size(1), T = q.size(2), D = q.size(3), Hkv = k.size(1), S = k.size(2);
  auto out = torch::zeros({B, H, T, D}, torch::kDouble);
  auto qa = q.accessor<double, 4>(), ka = k.accessor<double, 4>(), va = v.accessor<double, 4>();
  auto oa = out.accessor<double, 4>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t hk = h / (H / Hkv);
      for (int64_t t = 0; t < T; ++t) {
        const int64_t i = off + t;
        std::vector<double> w(S, -INFINITY);
        double mx = -INFINITY;
        for (int64_t j = 0; j < S; ++j) {
          if (causal && j > i) continue;
          if (window > 0 && j <= i - window) continue;
          double s = 0;
          for (int64_t d = 0; d < D; ++d) s += qa[b][h][t][d] * ka[b][hk][j][d];
          s *= scale;
          if (!slopes.empty()) s -= slopes[h] * double(i - j);
          w[j] = s;
          mx = std::max(mx, s);
        }
        double z = 0;
        for (int64_t j = 0; j < S; ++j) z += w[j] == -INFINITY ? 0 : std::exp(w[j] - mx);
        for (int64_t j = 0; j < S; ++j) {
          if (w[j] == -INFINITY) continue;
          const double p = std::exp(w[j] - mx) / z;
          for (int64_t d = 0; d < D; ++d) oa[b][h][t][d] += p * va[b][hk][j][d];
        }
      }
    }
  return out;
}
}  // namespace

TEST(ReferenceAttention, MatchesScalarLoopForEveryOption) {
  torch::manual_seed(1);
  for (int64_t Hkv : {4, 2, 1})
    for (int64_t window : {0, 5})
      for (bool alibi : {false, true})
        for (int64_t T : {11, 3}) {
          const int64_t B = 2, H = 4, S = 11, D = 8;
          auto q = torch::randn({B, H, T, D}, torch::kDouble);
          auto k = torch::randn({B, Hkv, S, D}, torch::kDouble);
          auto v = torch::randn({B, Hkv, S, D}, torch::kDouble);
          ops::AttentionParams p;
          p.window = window;
          std::vector<double> slopes;
          if (alibi) {
            slopes = ops::alibi_slopes(H);
            p.alibi_slopes = torch::tensor(slopes, torch::kDouble);
          }
          p.scale = 0.7;
          auto got = ops::reference_attention(q, k, v, p).out;
          auto want = naive(q, k, v, true, window, slopes, 0.7, S - T);
          EXPECT_LT((got - want).abs().max().item<double>(), 1e-12)
              << "Hkv=" << Hkv << " window=" << window << " alibi=" << alibi << " T=" << T;
        }
}

TEST(ReferenceAttention, RejectsBadShapes) {
  auto q = torch::randn({1, 3, 4, 8});
  auto k = torch::randn({1, 2, 4, 8});
  EXPECT_THROW(ops::attention(q, k, k, {}), c10::Error);
  EXPECT_THROW(ops::attention(torch::randn({1, 2, 5, 8}), k, k, {}), c10::Error);  // more queries than keys
}

TEST(RNoPESWA, LayerMasksFollowThePlan) {
  auto cfg = model_preset("micro");
  cfg.num_layers = 4;
  cfg.positional.type = PositionalType::kRnopeSwa;
  cfg.positional.window = 4;
  DecoderLM m(cfg);
  torch::NoGradGuard ng;
  std::vector<torch::Tensor> probs;
  ForwardOptions opt;
  opt.attention_probs = &probs;
  m->forward(torch::randint(0, cfg.vocab_size, {1, 12}), opt);
  ASSERT_EQ(probs.size(), 4u);
  for (int layer = 0; layer < 4; ++layer) {
    const bool global = layer == 3;
    auto p = probs[layer][0];  // (H, T, T)
    for (int64_t i = 0; i < 12; ++i)
      for (int64_t j = 0; j < 12; ++j) {
        const bool visible = j <= i && (global || j > i - 4);
        const double mass = p.index({torch::indexing::Slice(), i, j}).abs().max().item<double>();
        if (visible) EXPECT_GT(mass, 0.0) << layer << " " << i << " " << j;
        else EXPECT_EQ(mass, 0.0) << layer << " " << i << " " << j;
      }
  }
}
