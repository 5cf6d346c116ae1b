// bf16 compute copies of float32 weights (ops/compute_weights.h): the projections, the stacked q/k/v and SwiGLU run
// on the copies under CPU bf16 autocast with errors against float64 no worse than 2× autocast's own, the gradients
// reach the float32 masters, a copy is made once and follows its masters only when refreshed.
#include <optional>

#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include "drope/ops/compute_weights.h"
#include "drope/ops/layers.h"
#include "test_util.h"

using namespace drope;

namespace {

// CPU autocast to bf16 while alive (as drope-train's bf16 forward runs).
struct Bf16Autocast {
  Bf16Autocast() {
    at::autocast::set_autocast_enabled(at::kCPU, true);
    at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
  }
  ~Bf16Autocast() {
    at::autocast::set_autocast_enabled(at::kCPU, false);
    at::autocast::clear_cache();
  }
};

struct Installed {
  explicit Installed(ops::ComputeWeights* w) { ops::install_compute_weights(w); }
  ~Installed() { ops::install_compute_weights(nullptr); }
};

double max_err(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kDouble) - b.to(torch::kDouble)).abs().max().item<double>();
}

struct Result {
  torch::Tensor out, dx;
  std::vector<torch::Tensor> dw;
};

// out = f(x, weights) under bf16 autocast (with the copies installed or not); the gradients of sum(out · g).
template <typename F>
Result run(const F& f, const torch::Tensor& x0, const std::vector<torch::Tensor>& w0, const torch::Tensor& g,
           ops::ComputeWeights* cw) {
  auto x = x0.detach().clone().requires_grad_(true);
  std::vector<torch::Tensor> ws;
  for (const auto& w : w0) ws.push_back(w.detach().clone().requires_grad_(true));
  std::optional<Installed> inst;
  if (cw) inst.emplace(cw);
  torch::Tensor out;
  {
    Bf16Autocast ac;
    out = f(x, ws);
  }
  (out.to(torch::kFloat) * g).sum().backward();
  Result r{out.detach(), x.grad(), {}};
  for (const auto& w : ws) r.dw.push_back(w.grad());
  return r;
}

// float64 reference of the same f without autocast.
template <typename F>
Result exact(const F& f, const torch::Tensor& x0, const std::vector<torch::Tensor>& w0, const torch::Tensor& g) {
  auto x = x0.to(torch::kDouble).requires_grad_(true);
  std::vector<torch::Tensor> ws;
  for (const auto& w : w0) ws.push_back(w.to(torch::kDouble).requires_grad_(true));
  auto out = f(x, ws);
  (out * g.to(torch::kDouble)).sum().backward();
  Result r{out.detach(), x.grad(), {}};
  for (const auto& w : ws) r.dw.push_back(w.grad());
  return r;
}

template <typename F>
void check_against_autocast(const char* what, const F& f, int64_t out_cols, int64_t n_weights, int64_t O) {
  torch::manual_seed(11);
  const int64_t N = 96, K = 64;
  auto x = torch::randn({2, N / 2, K});
  std::vector<torch::Tensor> w;
  for (int64_t i = 0; i < n_weights; ++i) w.push_back(torch::randn({O, K}) * 0.1);
  auto g = torch::randn({2, N / 2, out_cols});
  ops::ComputeWeights cw;
  const auto got = run(f, x, w, g, &cw);
  const auto ac = run(f, x, w, g, nullptr);  // plain autocast (its casts per op)
  const auto ex = exact(f, x, w, g);
  EXPECT_EQ(got.out.scalar_type(), torch::kBFloat16) << what;
  EXPECT_EQ(got.dx.scalar_type(), torch::kFloat) << what;
  EXPECT_LE(max_err(got.out, ex.out), 2 * max_err(ac.out, ex.out) + 1e-3) << what;
  EXPECT_LE(max_err(got.dx, ex.dx), 2 * max_err(ac.dx, ex.dx) + 1e-3) << what;
  for (size_t i = 0; i < w.size(); ++i) {
    ASSERT_TRUE(got.dw[i].defined()) << what;
    EXPECT_EQ(got.dw[i].scalar_type(), torch::kFloat) << what << ": the masters' gradients are float32";
    EXPECT_LE(max_err(got.dw[i], ex.dw[i]), 2 * max_err(ac.dw[i], ex.dw[i]) + 1e-3) << what << " weight " << i;
  }
  EXPECT_GT(cw.bytes(), 0) << what << ": the copies were used";
}

}  // namespace

TEST(ComputeWeights, ProjectionsNoWorseThanAutocast) {
  check_against_autocast(
      "linear", [](const torch::Tensor& x, const std::vector<torch::Tensor>& w) { return ops::linear(x, w[0]); }, 48, 1,
      48);
  check_against_autocast(
      "linear_split",
      [](const torch::Tensor& x, const std::vector<torch::Tensor>& w) {
        return torch::cat(ops::linear_split(x, {w[0], w[1], w[2]}), -1);
      },
      3 * 32, 3, 32);
  check_against_autocast(
      "swiglu",
      [](const torch::Tensor& x, const std::vector<torch::Tensor>& w) {
        return ops::swiglu(x, w[0], torch::Tensor(), w[1], torch::Tensor());
      },
      40, 2, 40);
}

TEST(ComputeWeights, OneCopyPerStackRefreshedOnlyOnRequest) {
  torch::manual_seed(12);
  auto a = torch::randn({8, 16}), b = torch::randn({4, 16});
  ops::ComputeWeights cw;
  const auto c1 = cw.get({a, b});
  EXPECT_EQ(c1.scalar_type(), torch::kBFloat16);
  EXPECT_EQ(c1.sizes(), (std::vector<int64_t>{12, 16}));
  EXPECT_EQ(cw.get({a, b}).data_ptr(), c1.data_ptr());  // made once, not per call
  EXPECT_EQ(cw.bytes(), 12 * 16 * 2);
  a.add_(1.0);  // an optimizer step changes the master
  EXPECT_LT(max_err(cw.get({a, b}).narrow(0, 0, 8), a - 1.0), 0.05);  // stale until refreshed
  cw.refresh();
  EXPECT_EQ(cw.get({a, b}).data_ptr(), c1.data_ptr());  // refreshed in place
  EXPECT_LT(max_err(cw.get({a, b}).narrow(0, 0, 8), a), 0.05);
  EXPECT_LT(max_err(cw.get({a, b}).narrow(0, 8, 4), b), 0.05);
}

TEST(ComputeWeights, TakenOnlyUnderCpuBf16Autocast) {
  auto x = torch::randn({4, 16}), w = torch::randn({8, 16});
  ops::ComputeWeights cw;
  Installed inst(&cw);
  EXPECT_EQ(ops::compute_weights_for(x, {w}), nullptr);  // no autocast: float32 stays float32
  EXPECT_EQ(ops::linear(x, w).scalar_type(), torch::kFloat);
  Bf16Autocast ac;
  EXPECT_EQ(ops::compute_weights_for(x, {w}), &cw);
  EXPECT_EQ(ops::compute_weights_for(x.to(torch::kDouble), {w}), nullptr);
  EXPECT_EQ(ops::compute_weights_for(x, {torch::randn({8, 15})}), nullptr);  // width mismatch: the caller's error
}
