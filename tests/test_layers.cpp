// The fused CPU layer kernels (RMSNorm, rotary) against their plain-ATen definitions: forward and
// gradients in float64 and float32, strided inputs, several threads, and float64 central differences.
#include <torch/torch.h>

#include "drope/kernels/layers_cpu.h"
#include "drope/ops/layers.h"
#include "test_util.h"

using namespace drope;

namespace {

// Runs f with `n` intra-op threads, then restores the previous count.
template <typename F>
void with_threads(int n, F&& f) {
  const int before = at::get_num_threads();
  at::set_num_threads(n);
  f();
  at::set_num_threads(before);
}

struct Grads {
  torch::Tensor out;
  std::vector<torch::Tensor> grads;
};

// out = op(inputs), then grads of sum(out · g) w.r.t. the inputs.
template <typename Op>
Grads run(const Op& op, std::vector<torch::Tensor> inputs, const torch::Tensor& g, bool composite) {
  for (auto& t : inputs) t = t.detach().clone().requires_grad_(true);
  std::optional<ops::ForceCompositeLayers> force;
  if (composite) force.emplace();
  auto out = op(inputs);
  auto grads = torch::autograd::grad({(out * g).sum()}, inputs);
  return {out.detach(), grads};
}

double max_diff(const torch::Tensor& a, const torch::Tensor& b) { return (a - b).abs().max().item<double>(); }

template <typename Op>
void expect_fused_equals_composite(const Op& op, const std::vector<torch::Tensor>& inputs, const torch::Tensor& g,
                                   double tol) {
  auto ref = run(op, inputs, g, /*composite=*/true);
  for (int threads : {1, 2}) {
    with_threads(threads, [&] {
      auto got = run(op, inputs, g, /*composite=*/false);
      EXPECT_LE(max_diff(got.out, ref.out), tol) << "forward, threads " << threads;
      for (size_t i = 0; i < ref.grads.size(); ++i)
        EXPECT_LE(max_diff(got.grads[i], ref.grads[i]), tol * 10) << "grad " << i << ", threads " << threads;
    });
  }
}

}  // namespace

TEST(FusedLayers, SupportedInputs) {
  EXPECT_TRUE(ops::layers_cpu_supported({torch::zeros({2}), torch::zeros({3})}));
  EXPECT_TRUE(ops::layers_cpu_supported({torch::zeros({2}, torch::kDouble)}));
  EXPECT_FALSE(ops::layers_cpu_supported({torch::zeros({2}), torch::zeros({2}, torch::kDouble)}));
  EXPECT_FALSE(ops::layers_cpu_supported({torch::zeros({2}, torch::kBFloat16)}));
  EXPECT_FALSE(ops::layers_cpu_supported({torch::Tensor()}));
}

TEST(FusedLayers, RmsNormMatchesDefinition) {
  torch::manual_seed(0);
  auto op = [](const std::vector<torch::Tensor>& t) { return ops::rms_norm(t[0], t[1], 1e-5); };
  for (auto dtype : {torch::kDouble, torch::kFloat}) {
    const double tol = dtype == torch::kDouble ? 1e-13 : 2e-6;
    for (int64_t n : {1, 7, 64, 131}) {
      auto x = torch::randn({3, 37, n}, dtype) * 3;
      auto w = torch::randn({n}, dtype);
      auto g = torch::randn({3, 37, n}, dtype);
      expect_fused_equals_composite(op, {x, w}, g, tol);
    }
    // A transposed (non-contiguous) input, as the per-head QK-norm sees.
    auto x = torch::randn({2, 9, 4, 16}, dtype).transpose(1, 2);
    expect_fused_equals_composite(op, {x, torch::randn({16}, dtype)}, torch::randn({2, 4, 9, 16}, dtype), tol);
  }
  // The definition itself, written out: y = w · x / sqrt(mean(x²) + eps).
  auto x = torch::randn({5, 12}, torch::kDouble), w = torch::randn({12}, torch::kDouble);
  auto y = ops::rms_norm(x, w, 1e-6);
  EXPECT_LE(max_diff(y, w * x / (x.pow(2).mean(-1, true) + 1e-6).sqrt()), 1e-14);
}

TEST(FusedLayers, RotaryMatchesDefinition) {
  torch::manual_seed(1);
  auto op = [](const std::vector<torch::Tensor>& t) { return ops::rotary(t[0], t[1], t[2]); };
  for (auto dtype : {torch::kDouble, torch::kFloat}) {
    const double tol = dtype == torch::kDouble ? 1e-14 : 1e-6;
    for (int64_t D : {2, 16, 64}) {
      const int64_t B = 2, H = 3, T = 19;
      auto angle = torch::rand({T, D / 2}, dtype) * 6;
      auto cos = torch::cat({angle.cos(), angle.cos()}, -1) * 1.1,
           sin = torch::cat({angle.sin(), angle.sin()}, -1) * 1.1;
      auto g = torch::randn({B, H, T, D}, dtype);
      // Contiguous, and a (B, T, H, D) projection viewed as (B, H, T, D) as the model passes it.
      expect_fused_equals_composite(op, {torch::randn({B, H, T, D}, dtype), cos, sin}, g, tol);
      auto strided = torch::randn({B, T, H, D}, dtype).transpose(1, 2);
      auto ref = run(op, {strided, cos, sin}, g, true);
      auto got = run(op, {strided, cos, sin}, g, false);
      EXPECT_LE(max_diff(got.out, ref.out), tol);
      EXPECT_LE(max_diff(got.grads[0], ref.grads[0]), tol);
    }
  }
  // A rotation preserves the norm of each (i, i + D/2) pair when cos² + sin² = 1.
  auto angle = torch::rand({5, 4}, torch::kDouble) * 6;
  auto cos = torch::cat({angle.cos(), angle.cos()}, -1), sin = torch::cat({angle.sin(), angle.sin()}, -1);
  auto x = torch::randn({1, 2, 5, 8}, torch::kDouble);
  auto y = ops::rotary(x, cos, sin);
  auto pair_norm = [](const torch::Tensor& t) { return t.narrow(-1, 0, 4).pow(2) + t.narrow(-1, 4, 4).pow(2); };
  EXPECT_LE(max_diff(pair_norm(y), pair_norm(x)), 1e-12);
  EXPECT_GT(max_diff(y, x), 0.1);
}

// Every element of every input: the fused op's analytic gradient of sum(out · g) against a float64 central
// difference of the same op.
template <typename Op>
void expect_central_differences(const Op& op, std::vector<torch::Tensor> inputs) {
  const torch::Tensor g = torch::randn_like(op(inputs));
  const std::vector<torch::Tensor> analytic = run(op, inputs, g, /*composite=*/false).grads;
  auto loss = [&] {
    const torch::Tensor out = op(inputs);
    return (out * g).sum().item<double>();
  };
  const double h = 1e-6;
  for (size_t which = 0; which < inputs.size(); ++which) {
    torch::Tensor flat = inputs[which].view(-1);
    const torch::Tensor a = analytic[which].reshape(-1);
    for (int64_t e = 0; e < flat.numel(); ++e) {
      const double x0 = flat[e].item<double>();
      flat[e] = x0 + h;
      const double up = loss();
      flat[e] = x0 - h;
      const double down = loss();
      flat[e] = x0;
      EXPECT_NEAR(a[e].item<double>(), (up - down) / (2 * h), 1e-7) << "input " << which << " element " << e;
    }
  }
}

TEST(FusedLayers, GradientsMatchCentralDifferences) {
  torch::manual_seed(3);
  auto rnd = [](at::IntArrayRef shape) { return torch::randn(shape, torch::kDouble); };
  expect_central_differences([](const std::vector<torch::Tensor>& t) { return ops::rms_norm(t[0], t[1], 1e-5); },
                             {rnd({2, 3, 8}), rnd({8})});
  auto angle = torch::rand({4, 3}, torch::kDouble) * 6;
  auto cos = torch::cat({angle.cos(), angle.cos()}, -1), sin = torch::cat({angle.sin(), angle.sin()}, -1);
  expect_central_differences([&](const std::vector<torch::Tensor>& t) { return ops::rotary(t[0], cos, sin); },
                             {rnd({1, 2, 4, 6})});
}

TEST(FusedLayers, OneDnnLinearDefault) {
  EXPECT_TRUE(ops::onednn_linear_default(nullptr, false));  // AMD and others: oneDNN
  EXPECT_FALSE(ops::onednn_linear_default(nullptr, true));  // Intel: LibTorch's GEMM (MKL)
  EXPECT_FALSE(ops::onednn_linear_default("", true));
  EXPECT_TRUE(ops::onednn_linear_default("1", true));
  EXPECT_FALSE(ops::onednn_linear_default("0", false));
  EXPECT_THROW(ops::onednn_linear_default("yes", false), std::exception);  // a bad value is refused, not ignored
}

TEST(FusedLayers, LinearOnOneDnnMatchesFloat64) {
  // The wheel's oneDNN op must be found: without it linear() silently falls back to MKL (correct, but 2×
  // slower on AMD CPUs), which this guards against.
  EXPECT_TRUE(ops::onednn_linear_available());
  ops::ForceOneDnnLinear onednn(true);  // the process default is MKL on Intel CPUs
  torch::manual_seed(11);
  auto x = torch::randn({3, 37, 48}), w = torch::randn({40, 48}) * 0.2, b = torch::randn({40}),
       g = torch::randn({3, 37, 40});
  auto x64 = x.to(torch::kDouble).requires_grad_(true), w64 = w.to(torch::kDouble).requires_grad_(true),
       b64 = b.to(torch::kDouble).requires_grad_(true);
  auto want = torch::linear(x64, w64, b64);
  auto want_g = torch::autograd::grad({(want * g.to(torch::kDouble)).sum()}, {x64, w64, b64});
  for (bool with_bias : {true, false}) {
    for (int threads : {1, 2}) {
      with_threads(threads, [&] {
        auto xx = x.clone().requires_grad_(true), ww = w.clone().requires_grad_(true),
             bb = b.clone().requires_grad_(true);
        auto y = ops::linear(xx, ww, with_bias ? bb : torch::Tensor());
        ASSERT_EQ(y.sizes(), (std::vector<int64_t>{3, 37, 40}));
        auto ref = with_bias ? want : want - b64;
        EXPECT_LT(max_diff(y.to(torch::kDouble), ref.detach()), 1e-5);
        std::vector<torch::Tensor> in{xx, ww};
        if (with_bias) in.push_back(bb);
        auto gr = torch::autograd::grad({(y * g).sum()}, in);
        EXPECT_LT(max_diff(gr[0].to(torch::kDouble), want_g[0]), 1e-4);
        EXPECT_LT(max_diff(gr[1].to(torch::kDouble), want_g[1]), 1e-4);
        if (with_bias) EXPECT_LT(max_diff(gr[2].to(torch::kDouble), want_g[2]), 1e-4);
      });
    }
  }
  // Frozen weight: only the input gets a gradient; matmul_nt with transposed views.
  auto xx = x.reshape({-1, 48}).clone().requires_grad_(true);
  auto y = ops::linear(xx, w);
  auto dx = torch::autograd::grad({y.sum()}, {xx})[0];
  EXPECT_LT(max_diff(dx, torch::ones({111, 40}).mm(w)), 1e-4);
  const auto x2 = x.reshape({-1, 48}), g2 = g.reshape({-1, 40});
  EXPECT_LT(
      max_diff(ops::matmul_nt(x2.t(), g2.t()).to(torch::kDouble), x2.t().to(torch::kDouble).mm(g2.to(torch::kDouble))),
      1e-4);
}

TEST(FusedLayers, SwiGluMatchesDefinition) {
  torch::manual_seed(12);
  for (auto dtype : {torch::kDouble, torch::kFloat}) {
    const double tol = dtype == torch::kDouble ? 1e-12 : 3e-5;
    // Widths around every vector width (16, 8, 4 and 2 lanes) so that the padded last vector is exercised.
    for (int64_t F : {1, 7, 16, 33, 69}) {
      for (bool bias : {false, true}) {
        const int64_t C = 24;
        auto x = torch::randn({3, 11, C}, dtype);
        auto wg = torch::randn({F, C}, dtype) * 0.8, wu = torch::randn({F, C}, dtype) * 0.3;  // gates up to ±~15
        std::vector<torch::Tensor> in{x, wg, wu};
        if (bias) in.push_back(torch::randn({F}, dtype));
        auto op = [](const std::vector<torch::Tensor>& t) {
          return ops::swiglu(t[0], t[1], t.size() > 3 ? t[3] : torch::Tensor(), t[2], torch::Tensor());
        };
        expect_fused_equals_composite(op, in, torch::randn({3, 11, F}, dtype), tol);
        // The definition in float64: silu(g)·u = g·σ(g)·u.
        auto g = torch::linear(x.to(torch::kDouble), wg.to(torch::kDouble),
                               bias ? in[3].to(torch::kDouble) : torch::Tensor());
        auto u = torch::linear(x.to(torch::kDouble), wu.to(torch::kDouble));
        auto want = g / (1 + (-g).exp()) * u;
        EXPECT_LE(max_diff(op(in).to(torch::kDouble), want), tol * (1 + want.abs().max().item<double>()))
            << "F " << F << " bias " << bias;
      }
    }
  }
  // Large gates: σ saturates to 0 and 1 without overflow; NaN propagates (the trainer's guards rely on it).
  auto x = torch::tensor({{1.0f}, {-1.0f}, {0.0f}}), wg = torch::tensor({{120.0f}}), wu = torch::tensor({{2.0f}});
  auto h = ops::swiglu(x, wg, {}, wu, {});
  EXPECT_FLOAT_EQ(h[0][0].item<float>(), 240.0f);
  EXPECT_NEAR(h[1][0].item<float>(), 0.0f, 1e-30);
  EXPECT_EQ(h[2][0].item<float>(), 0.0f);
  EXPECT_TRUE(std::isnan(ops::swiglu(torch::tensor({{NAN}}), wg, {}, wu, {}).item<float>()));
}

TEST(FusedLayers, LinearSplitMatchesSeparateLinears) {
  torch::manual_seed(13);
  for (auto dtype : {torch::kDouble, torch::kFloat}) {
    const double tol = dtype == torch::kDouble ? 1e-12 : 2e-5;
    const int64_t C = 40;
    auto x = torch::randn({2, 13, C}, dtype);
    std::vector<torch::Tensor> ws{torch::randn({32, C}, dtype), torch::randn({8, C}, dtype),
                                  torch::randn({8, C}, dtype)};
    // Biases on all, on none, and on some (Qwen2 has q/k/v biases, Llama none).
    for (int mask : {0, 7, 5}) {
      std::vector<torch::Tensor> bs(3);
      for (int i = 0; i < 3; ++i)
        if (mask >> i & 1) bs[i] = torch::randn({ws[i].size(0)}, dtype);
      std::vector<torch::Tensor> in{x, ws[0], ws[1], ws[2]};
      for (auto& b : bs)
        if (b.defined()) in.push_back(b);
      // Sum of each output against its own upstream gradient: separate linear() calls vs one stacked GEMM.
      auto op = [&](const std::vector<torch::Tensor>& t) {
        std::vector<torch::Tensor> b(3);
        size_t next = 4;
        for (int i = 0; i < 3; ++i)
          if (mask >> i & 1) b[i] = t[next++];
        auto p = ops::linear_split(t[0], {t[1], t[2], t[3]}, {b[0], b[1], b[2]});
        EXPECT_EQ(p.size(), 3u);
        return torch::cat({p[0], p[1] * 2, p[2] * 3}, -1);
      };
      expect_fused_equals_composite(op, in, torch::randn({2, 13, 48}, dtype), tol);
    }
  }
  // A frozen weight gets no gradient; the others still do, and match separate linears.
  auto x = torch::randn({5, 6}, torch::kDouble).requires_grad_(true);
  auto w0 = torch::randn({4, 6}, torch::kDouble).requires_grad_(true), w1 = torch::randn({3, 6}, torch::kDouble);
  auto p = ops::linear_split(x, {w0, w1});
  auto gr = torch::autograd::grad({(p[0].sum() + 2 * p[1].sum())}, {x, w0});
  EXPECT_LE(
      max_diff(gr[0], torch::ones({5, 4}, torch::kDouble).mm(w0) + 2 * torch::ones({5, 3}, torch::kDouble).mm(w1)),
      1e-12);
  EXPECT_LE(max_diff(gr[1], torch::ones({4, 5}, torch::kDouble).mm(x.detach())), 1e-12);
  EXPECT_FALSE(w1.grad().defined());
}

TEST(FusedLayers, StackedGradientsMatchCentralDifferences) {
  torch::manual_seed(14);
  auto rnd = [](at::IntArrayRef shape) { return torch::randn(shape, torch::kDouble); };
  expect_central_differences(
      [](const std::vector<torch::Tensor>& t) { return ops::swiglu(t[0], t[1], t[3], t[2], {}); },
      {rnd({2, 3, 4}), rnd({5, 4}), rnd({5, 4}), rnd({5})});
  expect_central_differences(
      [](const std::vector<torch::Tensor>& t) {
        return torch::cat(ops::linear_split(t[0], {t[1], t[2]}, {{}, t[3]}), -1);
      },
      {rnd({3, 4}), rnd({2, 4}), rnd({3, 4}), rnd({3})});
}
