// ops::linear_cross_entropy (chunked LM-head loss) against at::cross_entropy of the full logits: loss and
// gradients in float64 for several chunk sizes, ignored labels, upstream gradient scaling, a weight shared
// with another use (tied embeddings), no-grad evaluation, float32, and bad labels.
#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include "drope/ops/loss.h"
#include "test_util.h"

using namespace drope;

namespace {

struct Result {
  torch::Tensor loss, dh, dw;
};

// loss · 2.5 + (weight · u).sum() backpropagated, so the incoming gradient is not 1 and the weight has a
// second use, as a tied embedding does.
template <typename F>
Result run(F&& loss_fn, const torch::Tensor& h0, const torch::Tensor& w0, const torch::Tensor& u) {
  auto h = h0.clone().requires_grad_(true);
  auto w = w0.clone().requires_grad_(true);
  auto loss = loss_fn(h, w);
  (loss * 2.5 + (w * u).sum()).backward();
  return {loss.detach(), h.grad(), w.grad()};
}

double max_diff(const torch::Tensor& a, const torch::Tensor& b) { return (a - b).abs().max().item<double>(); }

// Expects a c10::Error whose message contains `needle`.
template <typename F>
void expect_c10_error(F&& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "expected c10::Error containing " << needle;
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what_without_backtrace()).find(needle), std::string::npos) << e.what_without_backtrace();
  }
}

}  // namespace

TEST(LinearCrossEntropy, MatchesFullLogitsFloat64) {
  torch::manual_seed(0);
  const int64_t N = 37, C = 24, V = 101;
  auto opt = torch::TensorOptions().dtype(torch::kDouble);
  auto h = torch::randn({N, C}, opt), w = torch::randn({V, C}, opt) * 0.3, u = torch::randn({V, C}, opt);
  auto y = torch::randint(0, V, {N}, torch::kLong);
  y.index_put_({torch::tensor({2, 5, 36})}, -100);  // ignored rows
  auto ref =
      run([&](auto& hh, auto& ww) { return torch::nn::functional::cross_entropy(hh.matmul(ww.t()), y); }, h, w, u);
  for (int64_t chunk : {0, 1, 4, 16, 37, 100}) {
    auto got = run([&](auto& hh, auto& ww) { return ops::linear_cross_entropy(hh, ww, y, -100, chunk); }, h, w, u);
    SCOPED_TRACE(chunk);
    EXPECT_LT(max_diff(got.loss, ref.loss), 1e-12);
    EXPECT_LT(max_diff(got.dh, ref.dh), 1e-12);
    EXPECT_LT(max_diff(got.dw, ref.dw), 1e-12);
  }
  // The gradient also agrees with central differences of the op itself.
  auto f = [&](const torch::Tensor& hh) { return ops::linear_cross_entropy(hh, w, y, -100, 8).item<double>(); };
  auto got = run([&](auto& hh, auto& ww) { return ops::linear_cross_entropy(hh, ww, y, -100, 8); }, h, w, u);
  for (int64_t i : {0, 7, 200, 887}) {
    const double eps = 1e-6;
    auto hp = h.clone(), hm = h.clone();
    hp.view({-1})[i] += eps;
    hm.view({-1})[i] -= eps;
    EXPECT_NEAR(2.5 * (f(hp) - f(hm)) / (2 * eps), got.dh.view({-1})[i].item<double>(), 1e-7);
  }
}

TEST(LinearCrossEntropy, Float32OnlyHiddenAndNoGrad) {
  torch::manual_seed(1);
  const int64_t N = 64, C = 32, V = 300;
  auto h = torch::randn({N, C}), w = torch::randn({V, C}) * 0.2;
  auto y = torch::randint(0, V, {N}, torch::kLong);
  auto ref64 = torch::nn::functional::cross_entropy(h.to(torch::kDouble).matmul(w.to(torch::kDouble).t()), y);
  // Weight frozen: only hidden gets a gradient.
  auto hh = h.clone().requires_grad_(true);
  auto loss = ops::linear_cross_entropy(hh, w, y, -100, 10);
  EXPECT_EQ(loss.scalar_type(), torch::kFloat);
  EXPECT_NEAR(loss.item<double>(), ref64.item<double>(), 1e-5);
  loss.backward();
  auto h64 = h.to(torch::kDouble).requires_grad_(true);
  torch::nn::functional::cross_entropy(h64.matmul(w.to(torch::kDouble).t()), y).backward();
  EXPECT_LT(max_diff(hh.grad().to(torch::kDouble), h64.grad()), 1e-6);
  // Evaluation: no graph, same value.
  torch::NoGradGuard ng;
  auto ww = w.clone().requires_grad_(true);
  auto eval = ops::linear_cross_entropy(h, ww, y);
  EXPECT_FALSE(eval.requires_grad());
  EXPECT_NEAR(eval.item<double>(), ref64.item<double>(), 1e-5);
}

TEST(LinearCrossEntropy, AllIgnoredIsNanAsCrossEntropy) {
  auto h = torch::randn({3, 4}), w = torch::randn({5, 4});
  auto y = torch::full({3}, -100, torch::kLong);
  EXPECT_TRUE(std::isnan(ops::linear_cross_entropy(h, w, y).item<double>()));
  EXPECT_TRUE(std::isnan(torch::nn::functional::cross_entropy(h.matmul(w.t()), y).item<double>()));
}

TEST(LinearCrossEntropy, RejectsBadLabelsAndShapes) {
  auto h = torch::randn({3, 4}), w = torch::randn({5, 4});
  expect_c10_error([&] { ops::linear_cross_entropy(h, w, torch::tensor({0, 5, 1}, torch::kLong)); }, "[0, 5)");
  expect_c10_error([&] { ops::linear_cross_entropy(h, w, torch::tensor({0, 1}, torch::kLong)); },
                   "labels must be int64");
  expect_c10_error([&] { ops::linear_cross_entropy(h, torch::randn({5, 3}), torch::tensor({0, 1, 2}, torch::kLong)); },
                   "hidden (N, C) and weight (V, C)");
}

TEST(LinearCrossEntropy, Bfloat16AutocastGemms) {
  torch::manual_seed(2);
  const int64_t N = 48, C = 64, V = 200;
  auto h = torch::randn({N, C}), w = torch::randn({V, C}) * 0.1;
  auto y = torch::randint(0, V, {N}, torch::kLong);
  auto ref = run([&](auto& hh, auto& ww) { return torch::nn::functional::cross_entropy(hh.matmul(ww.t()), y); }, h, w,
                 torch::zeros({V, C}));
  at::autocast::set_autocast_enabled(at::kCPU, true);
  at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
  auto got = run([&](auto& hh, auto& ww) { return ops::linear_cross_entropy(hh, ww, y, -100, 7); }, h, w,
                 torch::zeros({V, C}));
  at::autocast::set_autocast_enabled(at::kCPU, false);
  at::autocast::clear_cache();
  EXPECT_EQ(got.loss.scalar_type(), torch::kFloat);
  EXPECT_EQ(got.dw.scalar_type(), torch::kFloat);
  EXPECT_NEAR(got.loss.item<double>(), ref.loss.item<double>(), 2e-2);
  EXPECT_LT(max_diff(got.dh, ref.dh) / ref.dh.abs().max().item<double>(), 3e-2);
  EXPECT_LT(max_diff(got.dw, ref.dw) / ref.dw.abs().max().item<double>(), 3e-2);
}

TEST(LinearCrossEntropy, FusedChunkAgainstUnfusedFloat64AndFiniteDifferences) {
  // The fused chunk (CPU row kernel: max, exp and sum, gradient in place) against the separate-ops chunk and
  // the full logits in float64, with ignored rows, vocabularies that are and are not multiples of the vector
  // width, and central differences of the fused loss in the weight.
  torch::manual_seed(3);
  auto opt = torch::TensorOptions().dtype(torch::kDouble);
  for (int64_t V : {64, 101, 1000}) {
    const int64_t N = 29, C = 16;
    auto h = torch::randn({N, C}, opt), w = torch::randn({V, C}, opt) * 0.4, u = torch::randn({V, C}, opt);
    auto y = torch::randint(0, V, {N}, torch::kLong);
    y.index_put_({torch::tensor({0, 11})}, -100);
    auto ref =
        run([&](auto& hh, auto& ww) { return torch::nn::functional::cross_entropy(hh.matmul(ww.t()), y); }, h, w, u);
    for (bool fused : {true, false}) {
      auto got = run([&](auto& hh, auto& ww) { return ops::linear_cross_entropy(hh, ww, y, -100, 6, fused); }, h, w, u);
      SCOPED_TRACE(std::to_string(V) + (fused ? " fused" : " unfused"));
      EXPECT_LT(max_diff(got.loss, ref.loss), 1e-12);
      EXPECT_LT(max_diff(got.dh, ref.dh), 1e-12);
      EXPECT_LT(max_diff(got.dw, ref.dw), 1e-12);
    }
    auto f = [&](const torch::Tensor& ww) { return ops::linear_cross_entropy(h, ww, y, -100, 6, true).item<double>(); };
    auto got = run([&](auto& hh, auto& ww) { return ops::linear_cross_entropy(hh, ww, y, -100, 6, true); }, h, w,
                   torch::zeros_like(w));
    for (int64_t i : std::vector<int64_t>{0, 5, 3 * C + 2, V * C - 1}) {
      const double eps = 1e-6;
      auto wp = w.clone(), wm = w.clone();
      wp.view({-1})[i] += eps;
      wm.view({-1})[i] -= eps;
      EXPECT_NEAR(2.5 * (f(wp) - f(wm)) / (2 * eps), got.dw.view({-1})[i].item<double>(), 1e-7) << "V=" << V;
    }
  }
}

TEST(LinearCrossEntropy, FusedChunkFloat32AndBfloat16) {
  // float32 (the row kernel with its polynomial exp) and bfloat16 autocast GEMMs (ATen's log-softmax and its
  // backward) against float64 of the same inputs; fused and unfused within rounding of each other.
  torch::manual_seed(4);
  const int64_t N = 40, C = 32, V = 517;
  auto h = torch::randn({N, C}), w = torch::randn({V, C}) * 0.2;
  auto y = torch::randint(0, V, {N}, torch::kLong);
  y[3] = -100;
  auto ref = run([&](auto& hh, auto& ww) { return torch::nn::functional::cross_entropy(hh.matmul(ww.t()), y); },
                 h.to(torch::kDouble), w.to(torch::kDouble), torch::zeros({V, C}, torch::kDouble));
  auto got = run([&](auto& hh, auto& ww) { return ops::linear_cross_entropy(hh, ww, y, -100, 9, true); }, h, w,
                 torch::zeros({V, C}));
  EXPECT_NEAR(got.loss.item<double>(), ref.loss.item<double>(), 1e-5);
  EXPECT_LT(max_diff(got.dh.to(torch::kDouble), ref.dh), 1e-6);
  EXPECT_LT(max_diff(got.dw.to(torch::kDouble), ref.dw), 1e-6);
  Result r[2];
  at::autocast::set_autocast_enabled(at::kCPU, true);
  at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
  for (int fused = 0; fused < 2; ++fused)
    r[fused] = run([&](auto& hh, auto& ww) { return ops::linear_cross_entropy(hh, ww, y, -100, 9, fused == 1); }, h, w,
                   torch::zeros({V, C}));
  at::autocast::set_autocast_enabled(at::kCPU, false);
  at::autocast::clear_cache();
  EXPECT_NEAR(r[1].loss.item<double>(), ref.loss.item<double>(), 2e-2);
  EXPECT_NEAR(r[1].loss.item<double>(), r[0].loss.item<double>(), 1e-5);
  EXPECT_LT(max_diff(r[1].dh, r[0].dh) / r[0].dh.abs().max().item<double>(), 1e-2);
  EXPECT_LT(max_diff(r[1].dw, r[0].dw) / r[0].dw.abs().max().item<double>(), 1e-2);
  EXPECT_LT(max_diff(r[1].dh.to(torch::kDouble), ref.dh) / ref.dh.abs().max().item<double>(), 3e-2);
}
