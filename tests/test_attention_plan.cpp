// The CUDA attention plan (ops/attention_plan.h) and its tensor glue (src/ops/attention_backends.cpp), proven
// on the CPU: each LibTorch backend is emulated in float64 from its documented / published semantics, fed
// the arguments the plan builds, and must reproduce the float64 reference (out, log-sum-exp, dq, dk, dv)
// to 1e-10 over the option grid of the attention tests. Sources of each emulated rule:
//  - FlashAttention-2 as vendored in PyTorch (aten/src/ATen/native/transformers/cuda/flash_attn/):
//    flash_api.cpp mha_fwd / mha_varlen_fwd (window ≥ seqlen_k → −1; seqlen_q == 1 drops is_causal, since
//    no ALiBi is passed: LibTorch builds FA2 without it; is_causal sets window_right = 0), set_params_fprop
//    (is_causal ⇔ window_left < 0 && window_right == 0; a missing side of a local window becomes seqlen_k),
//    mask.h (row r sees column c iff c ≥ r + sk − sq − window_left and c < min(sk, r + 1 + sk − sq +
//    window_right)), block_info.h (varlen: keys start at cu_seqlens_k[b], seqused_k[b] of them used),
//    flash_fwd_kernel.h get_lse_tile (lse (b, h, seqlen_q) dense, (h, total_q) varlen), and the README
//    (GQA: query head h reads KV head h / (H / H_kv); empty rows give out 0, lse +inf: mha_varlen_fwd).
//  - Memory-efficient attention (mem_eff_attention/kernel_forward.h): logits scale·q·k + bias, custom mask
//    type 1 (c ≤ r) or 2 (c ≤ r + N − M), lse (B, H, ⌈M/32⌉·32); one head count for q, k, v
//    (attention_backward.cu checks query.size(2) == key.size(2)).
//  - cuDNN (MHA.cpp run_cudnn_SDP_fprop): layout (B, H, T, D), additive bias, causal top-left, lse (B, H, T, 1).
//  - at::scaled_dot_product_attention: its documented reference (torch.nn.functional docs): top-left
//    is_causal, additive float mask, enable_gqa repeats k/v heads (repeat_interleave).
// Backward: each kernel computes the exact gradients of its forward, so the emulated backward is float64
// autograd through the emulated forward.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "attention_cases.h"
#include "drope/ops/attention.h"
#include "drope/ops/attention_backends.h"
#include "drope/ops/attention_plan.h"

using namespace drope;
namespace be = drope::ops::backends;
using ops::AttnBackend;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Row softmax of logits (..., sq, sk) with −inf for hidden keys. Rows without a visible key: out 0 and
// lse +inf (FlashAttention's convention, mha_varlen_fwd) when zero_empty, else NaN as softmax gives.
std::pair<torch::Tensor, torch::Tensor> softmax_out(const torch::Tensor& s, const torch::Tensor& v, bool zero_empty) {
  auto lse = torch::logsumexp(s, -1);  // (..., sq)
  auto p = torch::exp(s - lse.unsqueeze(-1));
  if (zero_empty) {
    auto empty = torch::isinf(lse) & (lse < 0);
    p = p.masked_fill(empty.unsqueeze(-1), 0.0);
    lse = lse.masked_fill(empty, kInf);
  }
  return {torch::matmul(p, v), lse};
}

// FlashAttention-2 forward (see the file comment).
be::FlashFwdOut emulate_flash(const be::FlashFwdIn& in) {
  const bool varlen = in.cu_q.defined();
  int64_t wl = in.window_left, wr = in.window_right;
  bool causal = in.is_causal;
  const int64_t seqlen_k = varlen ? in.max_k : in.k.size(1);
  const int64_t seqlen_q = varlen ? in.max_q : in.q.size(1);
  if (wl >= seqlen_k) wl = -1;
  if (wr >= seqlen_k) wr = -1;
  if (seqlen_q == 1) causal = false;
  if (causal) wr = 0;
  const bool causal_mode = wl < 0 && wr == 0;
  if (wl < 0 && wr >= 0) wl = seqlen_k;
  if (wl >= 0 && wr < 0) wr = seqlen_k;
  const bool local = (wl >= 0 || wr >= 0) && !causal_mode;
  const int64_t H = in.q.size(-2), Hk = in.k.size(-2);
  EXPECT_EQ(H % Hk, 0);
  const int64_t nseq = varlen ? in.cu_q.size(0) - 1 : in.q.size(0);
  auto out = torch::zeros(in.q.sizes(), in.q.options());
  const int64_t total_q = varlen ? in.q.size(0) : 0;
  auto lse_all =
      varlen ? torch::zeros({H, total_q}, in.q.options()) : torch::zeros({nseq, H, in.q.size(1)}, in.q.options());
  std::vector<torch::Tensor> outs;
  for (int64_t n = 0; n < nseq; ++n) {
    torch::Tensor qs, ks, vs;  // (sq, H, D), (sk, Hk, D)
    int64_t q0 = 0;
    if (varlen) {
      q0 = in.cu_q[n].item<int64_t>();
      const int64_t q1 = in.cu_q[n + 1].item<int64_t>();
      const int64_t k0 = in.cu_k[n].item<int64_t>();
      const int64_t sk = in.seqused_k.defined() ? in.seqused_k[n].item<int64_t>() : in.cu_k[n + 1].item<int64_t>() - k0;
      qs = in.q.narrow(0, q0, q1 - q0);
      ks = in.k.narrow(0, k0, sk);
      vs = in.v.narrow(0, k0, sk);
    } else {
      qs = in.q[n];
      ks = in.k[n];
      vs = in.v[n];
    }
    const int64_t sq = qs.size(0), sk = ks.size(0);
    auto kh = ks.permute({1, 0, 2}).repeat_interleave(H / Hk, 0);  // (H, sk, D): head h reads KV head h / G
    auto vh = vs.permute({1, 0, 2}).repeat_interleave(H / Hk, 0);
    auto s = torch::matmul(qs.permute({1, 0, 2}), kh.transpose(1, 2)) * in.scale;  // (H, sq, sk)
    auto r = torch::arange(sq, torch::kDouble).view({sq, 1});
    auto c = torch::arange(sk, torch::kDouble).view({1, sk});
    const double off = double(sk - sq);
    auto visible = torch::ones({sq, sk}, torch::kBool);
    if (causal_mode) visible = c < r + 1 + off;
    if (local) visible = (c >= r + off - double(wl)) & (c < r + 1 + off + double(wr));
    s = s.masked_fill(visible.logical_not().unsqueeze(0), -kInf);
    auto [o, lse] = softmax_out(s, vh, /*zero_empty=*/true);  // (H, sq, D), (H, sq)
    if (varlen) {
      outs.push_back(o.permute({1, 0, 2}));
      lse_all.narrow(1, q0, sq).copy_(lse);
    } else {
      outs.push_back(o.permute({1, 0, 2}).unsqueeze(0));
      lse_all[n].copy_(lse);
    }
  }
  out = torch::cat(outs, 0);
  return {out, lse_all, torch::zeros({2}), torch::zeros({})};
}

// Gradients of an emulated forward by float64 autograd.
template <typename F>
be::Grads3 autograd_of(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                       const torch::Tensor& dout, F forward) {
  torch::AutoGradMode on(true);
  auto qg = q.detach().requires_grad_(), kg = k.detach().requires_grad_(), vg = v.detach().requires_grad_();
  auto out = forward(qg, kg, vg);
  auto g = torch::autograd::grad({out}, {qg, kg, vg}, {dout});
  return {g[0], g[1], g[2]};
}

be::Grads3 emulate_flash_bwd(const be::FlashBwdIn& in) {
  return autograd_of(in.q, in.k, in.v, in.dout, [&](auto q, auto k, auto v) {
    be::FlashFwdIn f;
    f.q = q, f.k = k, f.v = v;
    f.max_q = in.max_q, f.max_k = in.max_k, f.is_causal = in.is_causal, f.scale = in.scale;
    f.window_left = in.window_left, f.window_right = in.window_right;
    return emulate_flash(f).out;
  });
}

// Memory-efficient attention forward: q (B, M, H, K), k/v (B, N, H, K).
be::MemEffFwdOut emulate_mem_eff(const be::MemEffFwdIn& in) {
  EXPECT_EQ(in.q.size(2), in.k.size(2)) << "memory-efficient attention has no GQA";
  const int64_t B = in.q.size(0), M = in.q.size(1), H = in.q.size(2), N = in.k.size(1);
  auto s = torch::matmul(in.q.permute({0, 2, 1, 3}), in.k.permute({0, 2, 3, 1})) * in.scale;  // (B, H, M, N)
  if (in.bias.defined()) {
    EXPECT_EQ(in.bias.sizes(), torch::IntArrayRef({B, H, M, N}));
    s = s + in.bias;
  }
  auto r = torch::arange(M, torch::kDouble).view({M, 1});
  auto c = torch::arange(N, torch::kDouble).view({1, N});
  if (in.custom_mask_type == 1) s = s.masked_fill(c > r, -kInf);
  if (in.custom_mask_type == 2) s = s.masked_fill(c > r + double(N - M), -kInf);
  auto [o, lse] = softmax_out(s, in.v.permute({0, 2, 1, 3}), false);
  const int64_t cols = (M + 31) / 32 * 32;
  auto lse_pad = torch::full({B, H, cols}, std::nan(""), lse.options());
  lse_pad.narrow(2, 0, M).copy_(lse);
  return {o.permute({0, 2, 1, 3}), lse_pad, torch::zeros({}), torch::zeros({})};
}

be::Grads3 emulate_mem_eff_bwd(const be::MemEffBwdIn& in) {
  return autograd_of(in.q, in.k, in.v, in.dout, [&](auto q, auto k, auto v) {
    return emulate_mem_eff({q, k, v, in.bias, in.custom_mask_type, in.scale}).out;
  });
}

// cuDNN forward: q (B, H, T, D), k/v (B, H, S, D).
be::CudnnFwdOut emulate_cudnn(const be::CudnnFwdIn& in) {
  EXPECT_EQ(in.q.size(1), in.k.size(1));
  const int64_t T = in.q.size(2), S = in.k.size(2);
  auto s = torch::matmul(in.q, in.k.transpose(-2, -1)) * in.scale;
  if (in.bias.defined()) s = s + in.bias;
  if (in.is_causal)
    s = s.masked_fill(torch::arange(S).view({1, S}) > torch::arange(T).view({T, 1}), -kInf);  // top-left
  auto [o, lse] = softmax_out(s, in.v, false);
  return {o, lse.unsqueeze(-1), torch::zeros({}), torch::zeros({})};
}

be::Grads3 emulate_cudnn_bwd(const be::CudnnBwdIn& in) {
  return autograd_of(in.q, in.k, in.v, in.dout, [&](auto q, auto k, auto v) {
    return emulate_cudnn({q, k, v, in.bias, in.is_causal, in.scale}).out;
  });
}

// scaled_dot_product_attention's documented reference implementation.
torch::Tensor emulate_sdpa(const be::SdpaIn& in) {
  const int64_t L = in.q.size(-2), S = in.k.size(-2);
  auto k = in.k, v = in.v;
  if (in.enable_gqa) {
    k = k.repeat_interleave(in.q.size(-3) / k.size(-3), -3);
    v = v.repeat_interleave(in.q.size(-3) / v.size(-3), -3);
  }
  auto bias = torch::zeros({L, S}, torch::kDouble);
  if (in.is_causal) bias = bias.masked_fill(torch::ones({L, S}, torch::kBool).tril(0).logical_not(), -kInf);
  auto w = torch::matmul(in.q, k.transpose(-2, -1)) * in.scale + bias;
  if (in.mask.defined()) w = w + in.mask;
  return torch::matmul(torch::softmax(w, -1), v);
}

const be::BackendOps& emulated_ops() {
  static const be::BackendOps ops = [] {
    be::BackendOps o;
    o.flash_fwd = emulate_flash;
    o.flash_bwd = emulate_flash_bwd;
    o.mem_eff_fwd = emulate_mem_eff;
    o.mem_eff_bwd = emulate_mem_eff_bwd;
    o.cudnn_fwd = emulate_cudnn;
    o.cudnn_bwd = emulate_cudnn_bwd;
    o.sdpa = emulate_sdpa;
    return o;
  }();
  return ops;
}

using Case = test::AttentionCase;

// The option grid of tests/test_fused_attention.cpp (CPU kernel) and tests/test_attention_gpu.cpp (shapes of
// the CUDA kernels, head dims 64/128), with the head dims FA2 takes (multiples of 8) and one it does not (12).
std::vector<Case> option_grid() {
  std::vector<Case> cases;
  const int64_t shapes[][4] = {{70, 70, -1, 16}, {1, 77, -1, 16},    {13, 90, -1, 8},   {10, 40, 7, 24},
                               {31, 31, -1, 12}, {130, 130, -1, 64}, {45, 200, -1, 64}, {70, 160, 20, 128}};
  for (bool causal : {true, false})
    for (int64_t window : {0, 5, 37})
      for (bool alibi : {false, true})
        for (int64_t Hkv : {4, 2, 1})
          for (const auto& s : shapes) {
            const bool big = s[3] >= 64;
            if (big && (Hkv == 2 || (window == 5))) continue;
            if (!big && window == 37) continue;
            Case c;
            c.B = big ? 1 : 2;
            c.Hkv = Hkv;
            c.T = s[0];
            c.S = s[1];
            c.q_offset = s[2];
            c.D = s[3];
            c.causal = causal;
            c.window = window;
            c.alibi = alibi;
            c.scale = (Hkv == 2 && !big) ? 0.37 : 0.0;
            cases.push_back(c);
          }
  return cases;
}

struct Tensors {
  torch::Tensor q, k, v, dout;
};

Tensors inputs(const Case& c) {
  Tensors t;
  t.q = torch::randn({c.B, c.H, c.T, c.D}, torch::kDouble);
  const int64_t cap = std::max(c.capacity, c.S);
  t.k = torch::randn({c.B, c.Hkv, cap, c.D}, torch::kDouble).narrow(2, 0, c.S);
  t.v = torch::randn({c.B, c.Hkv, cap, c.D}, torch::kDouble).narrow(2, 0, c.S);
  t.dout = torch::randn({c.B, c.H, c.T, c.D}, torch::kDouble);
  return t;
}

// Float64 log-sum-exp (B, H, T) of our logits, computed here (the reference returns float32):
// scale·q·k − slope·(i − j) over the keys visible by causality, window and left padding.
torch::Tensor exact_lse(const torch::Tensor& q, const torch::Tensor& k, const ops::AttentionParams& p) {
  const int64_t H = q.size(1), T = q.size(2), S = k.size(2), D = q.size(3);
  const double scale = p.scale > 0 ? p.scale : 1.0 / std::sqrt(double(D));
  const int64_t off = p.q_offset < 0 ? S - T : p.q_offset;
  auto s = torch::matmul(q, k.repeat_interleave(H / k.size(1), 1).transpose(-2, -1)) * scale;  // (B, H, T, S)
  auto i = torch::arange(T, torch::kDouble).add(double(off)).view({T, 1});
  auto j = torch::arange(S, torch::kDouble).view({1, S});
  if (p.alibi_slopes.defined()) s = s - p.alibi_slopes.to(torch::kDouble).view({1, H, 1, 1}) * (i - j);
  auto hide = torch::zeros({T, S}, torch::kBool);
  if (p.causal) hide = hide | (j > i);
  if (p.window > 0) hide = hide | (j <= i - double(p.window));
  s = s.masked_fill(hide, -kInf);
  if (p.key_start.defined())
    s = s.masked_fill(j.view({1, 1, 1, S}) < p.key_start.to(torch::kDouble).view({-1, 1, 1, 1}), -kInf);
  return torch::logsumexp(s, -1);
}

double max_err(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kDouble) - b.to(torch::kDouble)).abs().max().item<double>();
}

// The GPU's view of the call (bfloat16 on an H100) for float64 test tensors.
ops::AttnCall gpu_call(const Tensors& t, const ops::AttentionParams& p, bool training) {
  auto call = be::make_call(t.q, t.k, t.v, p, training, 90);
  call.dtype = kernels::AttnDType::kBFloat16;
  return call;
}

// Runs `backend` through the glue on the emulated ops and compares with the reference; returns false when
// the plan says the backend cannot take the call.
bool check_backend(const Case& c, const Tensors& t, AttnBackend backend, bool training) {
  const auto p = c.params();
  bool ok = false;
  const char* why = "";
  const auto plan = ops::plan_attention_forced(gpu_call(t, p, training), backend, &ok, &why);
  if (!ok) return false;
  SCOPED_TRACE(c.str() + " backend=" + ops::attn_backend_name(backend) + (training ? " training" : ""));
  const auto ref = ops::reference_attention(t.q, t.k, t.v, p);
  const auto f = be::run_forward(plan, t.q, t.k, t.v, p, emulated_ops());
  EXPECT_LT(max_err(f.out, ref.out), 1e-10);
  if (f.lse.defined()) EXPECT_LT(max_err(f.lse, exact_lse(t.q, t.k, p)), 1e-10);
  if (training && backend != AttnBackend::kSdpa) {
    auto g = be::run_backward(plan, t.q, t.k, t.v, p, f.state, t.dout, emulated_ops());
    auto r = autograd_of(t.q, t.k, t.v, t.dout,
                         [&](auto q, auto k, auto v) { return ops::reference_attention(q, k, v, p).out; });
    EXPECT_EQ(g.dq.sizes(), t.q.sizes());
    EXPECT_EQ(g.dk.sizes(), t.k.sizes());
    EXPECT_LT(max_err(g.dq, std::get<0>(r)), 1e-10);
    EXPECT_LT(max_err(g.dk, std::get<1>(r)), 1e-10);
    EXPECT_LT(max_err(g.dv, std::get<2>(r)), 1e-10);
  }
  return true;
}

const AttnBackend kAtenBackends[] = {AttnBackend::kFlash, AttnBackend::kMemEfficient, AttnBackend::kCudnn,
                                     AttnBackend::kSdpa};

}  // namespace

TEST(AttentionPlan, FlashWindowAndOffsetMapping) {
  ops::AttnCall c;
  c.q_len = c.kv_len = 100;
  c.window = 5;
  auto a = ops::flash_args(c);
  ASSERT_TRUE(a.ok);
  EXPECT_FALSE(a.is_causal);  // local window: left W − 1, right 0
  EXPECT_EQ(a.window_left, 4);
  EXPECT_EQ(a.window_right, 0);
  // Queries in the middle of the keys: the keys after the last query are dropped, alignment is exact.
  c.q_len = 10, c.kv_len = 40, c.q_offset = 7, c.window = 0;
  a = ops::flash_args(c);
  ASSERT_TRUE(a.ok);
  EXPECT_TRUE(a.is_causal);
  EXPECT_EQ(a.key_len, 17);
  // Non-causal with the same offset keeps every key and shifts the window.
  c.causal = false, c.window = 5;
  a = ops::flash_args(c);
  ASSERT_TRUE(a.ok);
  EXPECT_EQ(a.key_len, 40);
  EXPECT_EQ(a.window_left, 4 + 23);
  EXPECT_EQ(a.window_right, -1);
}

TEST(AttentionPlan, DefaultChoices) {
  ops::AttnCall c;
  c.q_len = c.kv_len = 1024;
  c.heads = 14, c.kv_heads = 2;
  EXPECT_EQ(ops::plan_attention(c).backend, AttnBackend::kCudnn);  // sm90: cuDNN, GQA expanded
  c.sm = 80;
  EXPECT_EQ(ops::plan_attention(c).backend, AttnBackend::kFlash);
  c.sm = 90;
  c.q_len = 1, c.q_offset = 1023;  // decode: cuDNN's causal mask is top-left, FA2's bottom-right fits
  EXPECT_EQ(ops::plan_attention(c).backend, AttnBackend::kFlash);
  c.q_len = 1024, c.q_offset = 0;
  c.window = 256;  // cuDNN would need a dense bias
  EXPECT_EQ(ops::plan_attention(c).backend, AttnBackend::kFlash);
  c.window = 0;
  c.alibi = true;
  EXPECT_FALSE(ops::flash_args(c).ok);  // LibTorch builds FA2 without ALiBi
  EXPECT_EQ(ops::plan_attention(c).backend, AttnBackend::kMemEfficient);  // ALiBi inference: bias
  c.training = true;
  EXPECT_EQ(ops::plan_attention(c).backend, AttnBackend::kMemEfficient);  // ALiBi backward: bias
  c.training = false, c.causal = false;
  EXPECT_EQ(ops::plan_attention(c).backend, AttnBackend::kMemEfficient);  // signed ALiBi, small bias
  c.q_len = c.kv_len = 16384;
  EXPECT_EQ(ops::plan_attention(c).backend, AttnBackend::kOwnCuda);  // the bias would take 7 GiB
  c.alibi = false;
  c.dtype = kernels::AttnDType::kFloat32;
  EXPECT_EQ(ops::plan_attention(c).backend, AttnBackend::kMemEfficient);
  c.dtype = kernels::AttnDType::kFloat64;
  EXPECT_EQ(ops::plan_attention(c).backend, AttnBackend::kReference);
  c.dtype = kernels::AttnDType::kBFloat16;
  c.head_dim = 12;
  EXPECT_EQ(ops::plan_attention(c).backend, AttnBackend::kSdpa);
  c.head_dim = 64;
  c.alibi = c.alibi_trainable = true;
  EXPECT_EQ(ops::plan_attention(c).backend, AttnBackend::kReference);
  AttnBackend b;
  ASSERT_TRUE(ops::parse_attn_backend("mem_efficient", &b));
  EXPECT_EQ(b, AttnBackend::kMemEfficient);
  EXPECT_FALSE(ops::parse_attn_backend("flash3", &b));
}

TEST(AttentionPlan, EveryBackendMatchesReferenceOverTheGrid) {
  at::set_num_threads(1);
  torch::manual_seed(20);
  int ran[4] = {0, 0, 0, 0};
  int own = 0;
  for (const auto& c : option_grid())
    for (bool training : {false, true}) {
      const auto t = inputs(c);
      for (int b = 0; b < 4; ++b) ran[b] += check_backend(c, t, kAtenBackends[b], training) ? 1 : 0;
      // The default plan runs a LibTorch kernel for every case of the grid (our kernels take only calls whose
      // dense bias would exceed kMaxDenseBiasBytes).
      const auto plan = ops::plan_attention(gpu_call(t, c.params(), training));
      own += plan.backend == AttnBackend::kOwnCuda;
      EXPECT_NE(plan.backend, AttnBackend::kReference) << c.str() << ": " << plan.reason;
    }
  EXPECT_EQ(own, 0);
  for (int b = 0; b < 4; ++b) EXPECT_GT(ran[b], 50) << ops::attn_backend_name(kAtenBackends[b]);
  std::printf("cases run: flash %d, mem_efficient %d, cudnn %d, sdpa %d\n", ran[0], ran[1], ran[2], ran[3]);
}

TEST(AttentionPlan, FlashCoversCausalSlidingWindowGqaAndOffsets) {
  // Every case without ALiBi (LibTorch builds FA2 without it), in training and inference, on an A100 (on sm90
  // cuDNN takes the calls it can without a bias).
  torch::manual_seed(21);
  int n = 0;
  for (const auto& c : option_grid()) {
    if (c.D % 8 != 0 || c.alibi) continue;
    const auto t = inputs(c);
    for (bool training : {false, true}) {
      auto call = gpu_call(t, c.params(), training);
      call.sm = 80;
      auto plan = ops::plan_attention(call);
      EXPECT_EQ(plan.backend, AttnBackend::kFlash) << c.str() << ": " << plan.flash.why;
      ++n;
    }
  }
  EXPECT_GT(n, 20);
}

TEST(AttentionPlan, LeftPaddedDecodeThroughFlashVarlen) {
  // KV-cache decode (T = 1) and a short chunk (T = 3) of a left-padded batch, keys read in place from a
  // cache of larger capacity, GQA/MQA, ALiBi and windows.
  at::set_num_threads(1);
  torch::manual_seed(22);
  int n = 0;
  for (int64_t T : {1, 3})
    for (int64_t Hkv : {4, 2, 1})
      for (bool alibi : {false, true})
        for (int64_t window : {0, 7})
          for (int64_t cap : {40, 64}) {
            Case c;
            c.B = 3, c.H = 4, c.Hkv = Hkv, c.T = T, c.S = 40, c.D = 16, c.alibi = alibi, c.window = window;
            c.capacity = cap;
            c.key_start = {0, 5, 30};
            const auto t = inputs(c);
            const auto plan = ops::plan_attention(gpu_call(t, c.params(), false));
            if (alibi) {  // LibTorch builds FA2 without ALiBi: a dense bias instead
              ASSERT_EQ(plan.backend, AttnBackend::kMemEfficient) << c.str() << ": " << plan.reason;
              EXPECT_FALSE(check_backend(c, t, AttnBackend::kFlash, false));
            } else {
              ASSERT_EQ(plan.backend, AttnBackend::kFlash) << c.str() << ": " << plan.flash.why;
              ASSERT_TRUE(plan.flash.varlen);
              EXPECT_TRUE(check_backend(c, t, AttnBackend::kFlash, false));
            }
            EXPECT_TRUE(check_backend(c, t, AttnBackend::kMemEfficient, false));
            EXPECT_TRUE(check_backend(c, t, AttnBackend::kSdpa, false));
            ++n;
          }
  EXPECT_EQ(n, 48);
}

TEST(AttentionPlan, MappingErrorsAreCaught) {
  // The emulation is sensitive to the mapping: an off-by-one window or a wrong alignment moves the result far
  // from the reference.
  torch::manual_seed(23);
  Case c;
  c.T = 20, c.S = 50, c.D = 16, c.window = 6, c.alibi = false, c.q_offset = 10;
  const auto t = inputs(c);
  const auto p = c.params();
  const auto ref = ops::reference_attention(t.q, t.k, t.v, p);
  auto plan = ops::plan_attention(gpu_call(t, p, false));
  ASSERT_EQ(plan.backend, AttnBackend::kFlash);
  auto good = be::run_forward(plan, t.q, t.k, t.v, p, emulated_ops());
  EXPECT_LT(max_err(good.out, ref.out), 1e-10);
  auto bad = plan;
  bad.flash.window_left += 1;
  EXPECT_GT(max_err(be::run_forward(bad, t.q, t.k, t.v, p, emulated_ops()).out, ref.out), 1e-3);
  bad = plan;
  bad.flash.key_len = c.S;  // keys after the last query kept: FA2's bottom-right alignment moves
  bad.flash.max_k = c.S;
  EXPECT_GT(max_err(be::run_forward(bad, t.q, t.k, t.v, p, emulated_ops()).out, ref.out), 1e-3);
}

TEST(AttentionPlan, RowsWithoutKeysGoToTheReference) {
  ops::AttnCall c;
  c.q_len = 4, c.kv_len = 10, c.q_offset = 20, c.window = 3;  // the window lies past the last key
  EXPECT_TRUE(ops::attn_geometry(c).empty_rows);
  EXPECT_EQ(ops::plan_attention(c).backend, AttnBackend::kReference);
  c.q_offset = 6, c.window = 0, c.key_start = true, c.max_key_start = 7;  // padding hides every key of row 0
  EXPECT_TRUE(ops::attn_geometry(c).empty_rows);
  c.max_key_start = 6;
  EXPECT_FALSE(ops::attn_geometry(c).empty_rows);
}
