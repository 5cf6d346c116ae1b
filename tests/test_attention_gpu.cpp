// CUDA fused attention kernels against the float64 reference (label gpu; every case skips without CUDA).
// Tolerance (FlashAttention's rule): our error against the float64 reference is at most twice the error of
// LibTorch's own computation in the same dtype (reference_attention run on the GPU in bf16/fp16 and
// differentiated by autograd), plus a small floor.
#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "drope/ops/attention.h"

using namespace drope;

namespace {

#define SKIP_WITHOUT_CUDA() \
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device"

struct Case {
  int64_t B = 1, H = 4, Hkv = 4, T = 128, S = 128, D = 64;
  bool causal = true;
  int64_t window = 0;
  bool alibi = false;
  double scale = 0.0;
  int64_t q_offset = -1;

  std::string str() const {
    std::ostringstream o;
    o << "B=" << B << " H=" << H << " Hkv=" << Hkv << " T=" << T << " S=" << S << " D=" << D << " causal=" << causal
      << " window=" << window << " alibi=" << alibi << " scale=" << scale << " q_offset=" << q_offset;
    return o.str();
  }

  ops::AttentionParams params(torch::Device dev) const {
    ops::AttentionParams p;
    p.causal = causal;
    p.window = window;
    p.scale = scale;
    p.q_offset = q_offset;
    if (alibi) p.alibi_slopes = torch::tensor(ops::alibi_slopes(H), torch::kFloat).to(dev);
    return p;
  }
};

struct Result {
  torch::Tensor out, dq, dk, dv;
};

double max_err(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kCPU, torch::kDouble) - b.to(torch::kCPU, torch::kDouble)).abs().max().item<double>();
}

// Output and gradients of sum(out · g). mode 0: ops::attention (fused), 1: reference in the input dtype.
Result run(const torch::Tensor& q0, const torch::Tensor& k0, const torch::Tensor& v0, const torch::Tensor& g,
           const ops::AttentionParams& p, bool reference) {
  auto q = q0.detach().clone().requires_grad_(), k = k0.detach().clone().requires_grad_(),
       v = v0.detach().clone().requires_grad_();
  torch::Tensor out = reference ? ops::reference_attention(q, k, v, p).out : ops::attention(q, k, v, p);
  auto loss = (out.to(torch::kDouble) * g.to(out.device(), torch::kDouble)).sum();
  auto grads = torch::autograd::grad({loss}, {q, k, v});
  return {out.detach(), grads[0], grads[1], grads[2]};
}

// Checks forward and backward of one case in one dtype.
void check_case(const Case& c, torch::Dtype dtype, bool backward = true) {
  SCOPED_TRACE(c.str() + (dtype == torch::kBFloat16 ? " bf16" : " fp16"));
  const torch::Device dev(torch::kCUDA);
  auto q = torch::randn({c.B, c.H, c.T, c.D}, torch::kDouble).to(dtype);
  auto k = torch::randn({c.B, c.Hkv, c.S, c.D}, torch::kDouble).to(dtype);
  auto v = torch::randn({c.B, c.Hkv, c.S, c.D}, torch::kDouble).to(dtype);
  auto g = torch::randn({c.B, c.H, c.T, c.D}, torch::kDouble);
  const auto p_cpu = c.params(torch::kCPU);
  const auto p_gpu = c.params(dev);
  // Exact: float64 reference on the CPU from the rounded inputs.
  const auto exact = run(q.to(torch::kDouble), k.to(torch::kDouble), v.to(torch::kDouble), g, p_cpu, true);
  const auto qd = q.to(dev), kd = k.to(dev), vd = v.to(dev);
  ASSERT_TRUE(ops::uses_fused_attention(qd, kd, vd, p_gpu));
  if (!backward) {
    torch::NoGradGuard ng;
    const auto got = ops::fused_attention(qd, kd, vd, p_gpu);
    ASSERT_EQ(got.out.scalar_type(), dtype);
    ASSERT_EQ(got.lse.scalar_type(), torch::kFloat);
    // LibTorch in the dtype: the plain-ATen reference on the GPU from the same half-precision inputs.
    const auto lib = ops::reference_attention(qd, kd, vd, p_gpu);
    const double e_got = max_err(got.out, exact.out);
    const double e_lib = max_err(lib.out, exact.out);
    EXPECT_LE(e_got, 2 * e_lib + 2e-3) << "libtorch error " << e_lib;
    const auto lse_exact = ops::reference_attention(q.to(torch::kDouble), k.to(torch::kDouble), v.to(torch::kDouble),
                                                    p_cpu).lse;
    EXPECT_LE(max_err(got.lse, lse_exact), 2e-3);
    return;
  }
  const auto got = run(qd, kd, vd, g, p_gpu, false);
  const auto lib = run(qd, kd, vd, g, p_gpu, true);
  ASSERT_EQ(got.out.scalar_type(), dtype);
  ASSERT_EQ(got.dq.scalar_type(), dtype);
  const char* names[] = {"out", "dq", "dk", "dv"};
  const torch::Tensor* gt[] = {&got.out, &got.dq, &got.dk, &got.dv};
  const torch::Tensor* lt[] = {&lib.out, &lib.dq, &lib.dk, &lib.dv};
  const torch::Tensor* ex[] = {&exact.out, &exact.dq, &exact.dk, &exact.dv};
  for (int i = 0; i < 4; ++i) {
    const double e_got = max_err(*gt[i], *ex[i]);
    const double e_lib = max_err(*lt[i], *ex[i]);
    const double scale = ex[i]->abs().max().item<double>();
    EXPECT_LE(e_got, 2 * e_lib + 1e-3 * std::max(1.0, scale)) << names[i] << ": libtorch error " << e_lib;
  }
}

std::vector<Case> option_grid() {
  std::vector<Case> cases;
  // (T, S, q_offset): square with partial tiles, short queries at the end of a longer cache, queries in the
  // middle of the keys.
  const int64_t shapes[][3] = {{130, 130, -1}, {45, 200, -1}, {70, 160, 20}};
  for (int64_t D : {64, 128})
    for (bool causal : {true, false})
      for (int64_t window : {0, 37})
        for (bool alibi : {false, true})
          for (int64_t Hkv : {4, 1})
            for (const auto& s : shapes) {
              Case c;
              c.B = 2;
              c.H = 4;
              c.Hkv = Hkv;
              c.T = s[0];
              c.S = s[1];
              c.q_offset = s[2];
              c.D = D;
              c.causal = causal;
              c.window = window;
              c.alibi = alibi;
              c.scale = (window == 0 && alibi) ? 0.2 : 0.0;
              cases.push_back(c);
            }
  return cases;
}

}  // namespace

TEST(FusedAttentionGpu, DispatchesCudaHalfTypes) {
  SKIP_WITHOUT_CUDA();
  const torch::Device dev(torch::kCUDA);
  ops::AttentionParams p;
  for (auto dt : {torch::kBFloat16, torch::kHalf}) {
    auto q = torch::randn({1, 2, 8, 64}, torch::TensorOptions().dtype(dt).device(dev));
    EXPECT_TRUE(ops::uses_fused_attention(q, q, q, p));
    auto q2 = torch::randn({1, 2, 8, 32}, torch::TensorOptions().dtype(dt).device(dev));
    EXPECT_FALSE(ops::uses_fused_attention(q2, q2, q2, p));
  }
  auto qf = torch::randn({1, 2, 8, 64}, torch::TensorOptions().device(dev));
  EXPECT_FALSE(ops::uses_fused_attention(qf, qf, qf, p));
}

TEST(FusedAttentionGpu, BFloat16ForwardBackwardEveryOption) {
  SKIP_WITHOUT_CUDA();
  torch::manual_seed(11);
  for (const auto& c : option_grid()) check_case(c, torch::kBFloat16);
}

TEST(FusedAttentionGpu, Float16ForwardBackwardEveryOption) {
  SKIP_WITHOUT_CUDA();
  torch::manual_seed(12);
  int n = 0;
  for (const auto& c : option_grid())
    if (n++ % 2 == 0) check_case(c, torch::kHalf);
}

TEST(FusedAttentionGpu, DecodeSingleQueryLongCache) {
  SKIP_WITHOUT_CUDA();
  torch::manual_seed(13);
  for (int64_t D : {64, 128})
    for (int64_t window : {0, 1000})
      for (bool alibi : {false, true})
        for (auto dt : {torch::kBFloat16, torch::kHalf}) {
          Case c;
          c.B = 2;
          c.H = 8;
          c.Hkv = 2;
          c.T = 1;
          c.S = 5000;
          c.D = D;
          c.window = window;
          c.alibi = alibi;
          check_case(c, dt, /*backward=*/false);
          if (D == 64 && dt == torch::kBFloat16) check_case(c, dt, /*backward=*/true);
        }
}

TEST(FusedAttentionGpu, LongSequenceCausalAndWindow) {
  SKIP_WITHOUT_CUDA();
  torch::manual_seed(14);
  for (int64_t window : {0, 256}) {
    Case c;
    c.B = 1;
    c.H = 4;
    c.Hkv = 2;
    c.T = 1100;
    c.S = 1100;
    c.D = 128;
    c.window = window;
    c.alibi = window > 0;
    check_case(c, torch::kBFloat16);
  }
}

TEST(FusedAttentionGpu, RejectsBadInputs) {
  SKIP_WITHOUT_CUDA();
  const torch::Device dev(torch::kCUDA);
  auto q = torch::randn({1, 2, 8, 64}, torch::TensorOptions().dtype(torch::kBFloat16).device(dev));
  auto k = torch::randn({1, 3, 8, 64}, torch::TensorOptions().dtype(torch::kBFloat16).device(dev));
  EXPECT_THROW(ops::fused_attention(q, k, k, {}), c10::Error);
}
