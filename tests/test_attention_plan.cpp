// The CUDA attention plan (ops/attention_plan.h) and its backends' tensor glue (src/ops/attention_<backend>.cpp),
// proven on the CPU: each LibTorch backend is emulated in float64 from its documented / published semantics, fed the
// arguments the plan builds, and must reproduce the float64 reference (out, log-sum-exp, dq, dk, dv) to 1e-10 over the
// option grid of the attention tests. Sources of each emulated rule:
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
//  - cuDNN's SDPA node through cudnn-frontend 1.23 (include/cudnn_frontend/): utils/attn_score_modifiers.h
//    (alibi_mask adds slope_h·(col − row) with the raw row and column indices; sliding_window_mask: the right bound
//    keeps c ≤ r + base + right_bound (CMP_GE), the left bound keeps c > r + base − left_bound (CMP_GT), base = 0
//    top-left, s_kv − s_q bottom-right), cudnn_frontend_utils.h get_alibi_slope (the built-in slopes),
//    node/scaled_dot_product_flash_attention.h and node/sdpa_support_surface.h (ALiBi only with right bound 0
//    and top-left; left bound ≥ 1; s_q ≤ s_kv with a left bound or bottom-right; h_q % h_kv == 0), and
//    test/python/sdpa/fp16_ref.py (K/V heads expanded G = h_q / h_kv times each, so head h reads KV head h / G;
//    stats = log Σ exp(s − max) + max, natural log, (b, h_q, s_q, 1)).
//  - at::scaled_dot_product_attention: its documented reference (torch.nn.functional docs): top-left
//    is_causal, additive float mask, enable_gqa repeats k/v heads (repeat_interleave).
// Backward: each kernel computes the exact gradients of its forward, so the emulated backward is float64
// autograd through the emulated forward.
#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "attention_cases.h"
#include "drope/ops/attention.h"
#include "drope/ops/attention_backends.h"
#include "drope/ops/attention_plan.h"
#include "drope/ops/attention_registry.h"

using namespace drope;
namespace be = drope::ops::backends;
using ops::AttnBackend;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Row softmax of logits (..., sq, sk) with −inf for hidden keys. Rows without a visible key: out 0 and
// lse +inf (FlashAttention's convention, mha_varlen_fwd) when zero_empty, else NaN as softmax gives.
std::pair<torch::Tensor, torch::Tensor> reference_softmax_out(const torch::Tensor& s, const torch::Tensor& v,
                                                              bool zero_empty) {
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
    auto [o, lse] = reference_softmax_out(s, vh, /*zero_empty=*/true);  // (H, sq, D), (H, sq)
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
  auto [o, lse] = reference_softmax_out(s, in.v.permute({0, 2, 1, 3}), false);
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
  auto [o, lse] = reference_softmax_out(s, in.v, false);
  return {o, lse.unsqueeze(-1), torch::zeros({}), torch::zeros({})};
}

be::Grads3 emulate_cudnn_bwd(const be::CudnnBwdIn& in) {
  return autograd_of(in.q, in.k, in.v, in.dout, [&](auto q, auto k, auto v) {
    return emulate_cudnn({q, k, v, in.bias, in.is_causal, in.scale}).out;
  });
}

// cuDNN's built-in ALiBi slopes (get_alibi_slope), in float64: n = 2^⌊log2 h⌋; 2^(−8k/n) for k = 1..n, then
// 2^(−8(k − ½)/n) for k = 1..h − n.
std::vector<double> cudnn_builtin_slopes(int64_t h) {
  int64_t n = 1;
  while (n * 2 <= h) n *= 2;
  std::vector<double> s;
  for (int64_t k = 1; k <= n; ++k) s.push_back(std::pow(2.0, -8.0 * double(k) / double(n)));
  for (int64_t k = 1; k <= h - n; ++k) s.push_back(std::pow(2.0, -8.0 * (double(k) - 0.5) / double(n)));
  return s;
}

// cuDNN's SDPA node forward: q (B, h_q, s_q, D), k/v (B, h_kv, s_kv, D). `kv_head_of` maps a query head to the KV
// head it reads (the node's rule, h / (h_q / h_kv), unless a test substitutes a wrong one).
be::CudnnGraphFwdOut emulate_cudnn_graph_with(const be::CudnnGraphFwdIn& in,
                                              int64_t (*kv_head_of)(int64_t, int64_t, int64_t)) {
  const auto& a = in.args;
  const int64_t Hq = in.q.size(1), sq = in.q.size(2), Hk = in.k.size(1), skv = in.k.size(2);
  EXPECT_EQ(Hq, a.q_heads);
  EXPECT_EQ(Hk, a.kv_heads);
  EXPECT_EQ(Hq % Hk, 0) << "h_q % h_kv";
  EXPECT_EQ(skv, a.key_len);
  // The support rules the node validates.
  if (a.alibi) EXPECT_TRUE(a.right_bound == 0 && a.align == ops::DiagonalAlign::kTopLeft) << "ALiBi needs rb 0, TL";
  if (a.left_bound >= 0) EXPECT_GE(a.left_bound, 1);
  if (a.left_bound >= 0 || (a.right_bound >= 0 && a.align == ops::DiagonalAlign::kBottomRight)) EXPECT_LE(sq, skv);
  std::vector<int64_t> idx;
  for (int64_t h = 0; h < Hq; ++h) idx.push_back(kv_head_of(h, Hq, Hk));
  auto sel = torch::tensor(idx, torch::kLong);
  auto kh = in.k.index_select(1, sel), vh = in.v.index_select(1, sel);
  auto s = torch::matmul(in.q, kh.transpose(-2, -1)) * a.scale;  // (B, h_q, s_q, s_kv)
  auto row = torch::arange(sq, torch::kDouble).view({sq, 1});
  auto col = torch::arange(skv, torch::kDouble).view({1, skv});
  if (a.alibi) s = s + torch::tensor(cudnn_builtin_slopes(Hq), torch::kDouble).view({1, Hq, 1, 1}) * (col - row);
  const double base = a.align == ops::DiagonalAlign::kBottomRight ? double(skv - sq) : 0.0;
  auto keep = torch::ones({sq, skv}, torch::kBool);
  if (a.right_bound >= 0) keep = keep & (col <= row + base + double(a.right_bound));
  if (a.left_bound >= 0) keep = keep & (col > row + base - double(a.left_bound));
  s = s.masked_fill(keep.logical_not(), -kInf);
  auto [o, lse] = reference_softmax_out(s, vh, /*zero_empty=*/true);
  return {o, lse.unsqueeze(-1)};
}

int64_t cudnn_kv_head(int64_t h, int64_t Hq, int64_t Hk) { return h / (Hq / Hk); }

be::CudnnGraphFwdOut emulate_cudnn_graph(const be::CudnnGraphFwdIn& in) {
  return emulate_cudnn_graph_with(in, cudnn_kv_head);
}

be::Grads3 emulate_cudnn_graph_bwd(const be::CudnnGraphBwdIn& in) {
  EXPECT_EQ(in.stats.sizes(), torch::IntArrayRef({in.q.size(0), in.q.size(1), in.q.size(2), 1}));
  EXPECT_FALSE(in.q.size(2) == 1 && in.k.size(2) == 1) << "the backward refuses s_q = s_kv = 1";
  return autograd_of(in.q, in.k, in.v, in.dout,
                     [&](auto q, auto k, auto v) { return emulate_cudnn_graph({q, k, v, in.args}).out; });
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
    o.cudnn_graph_fwd = emulate_cudnn_graph;
    o.cudnn_graph_bwd = emulate_cudnn_graph_bwd;
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

// The GPU's view of the call (bfloat16 on an H100) for float64 test tensors; cuDNN graphs in the build unless
// `graph` is false.
ops::AttnCall gpu_call(const Tensors& t, const ops::AttentionParams& p, bool training, bool graph = true) {
  auto call = be::make_call(t.q, t.k, t.v, p, training, 90);
  call.dtype = kernels::AttnDType::kBFloat16;
  call.cudnn_graph = graph;
  return call;
}

// Runs `backend` through the glue on the emulated ops and compares with the reference; returns false when
// the plan says the backend cannot take the call.
bool check_backend(const Case& c, const Tensors& t, AttnBackend backend, bool training,
                   const ops::AttentionParams* params = nullptr) {
  const auto p = params ? *params : c.params();
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

// The backends emulated_ops() stands in for: every registered backend that calls its ops through BackendOps.
std::vector<AttnBackend> emulated_backends() {
  std::vector<AttnBackend> v;
  for (const auto* d : test::backends_on(ops::kAttnCuda))
    if (d->bind) v.push_back(AttnBackend{d->name});
  return v;
}

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
  const auto backends = emulated_backends();
  ASSERT_GE(backends.size(), 5u);
  std::map<std::string, int> ran;
  int own = 0, graph_alibi = 0, graph_window = 0, graph_gqa = 0;
  for (const auto& c : option_grid())
    for (bool training : {false, true}) {
      const auto t = inputs(c);
      for (const auto b : backends) {
        const bool r = check_backend(c, t, b, training);
        ran[b.name] += r ? 1 : 0;
        if (r && b == AttnBackend::kCudnnGraph) {
          graph_alibi += c.alibi;
          graph_window += c.window > 0;
          graph_gqa += c.Hkv < c.H;
        }
      }
      // The default plan runs a LibTorch kernel for every case of the grid (our kernels take only calls whose
      // dense bias would exceed kMaxDenseBiasBytes).
      const auto plan = ops::plan_attention(gpu_call(t, c.params(), training));
      own += plan.backend == AttnBackend::kOwnCuda;
      EXPECT_NE(plan.backend, AttnBackend::kReference) << c.str() << ": " << plan.reason;
    }
  EXPECT_EQ(own, 0);
  std::string counts;
  for (const auto b : backends) {
    EXPECT_GT(ran[b.name], 50) << b;
    counts += std::string(counts.empty() ? "" : ", ") + b.name + " " + std::to_string(ran[b.name]);
  }
  EXPECT_GT(graph_alibi, 10);
  EXPECT_GT(graph_window, 30);
  EXPECT_GT(graph_gqa, 50);
  std::printf("cases run: %s (cudnn_graph: ALiBi %d, window %d, GQA %d)\n", counts.c_str(), graph_alibi, graph_window,
              graph_gqa);
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
  auto plan = ops::plan_attention(gpu_call(t, p, false, /*graph=*/false));
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

TEST(AttentionPlan, CudnnGraphAttributes) {
  ops::AttnCall c;
  c.q_len = c.kv_len = 1024;
  c.heads = 14, c.kv_heads = 2;
  c.window = 512;
  auto a = ops::cudnn_graph_args(c);
  ASSERT_TRUE(a.ok) << a.why;
  EXPECT_EQ(a.align, ops::DiagonalAlign::kTopLeft);
  EXPECT_EQ(a.right_bound, 0);
  EXPECT_EQ(a.left_bound, 512);  // exclusive: keeps c > r − 512, i.e. our j > i − W (FA2 would say W − 1)
  EXPECT_EQ(a.kv_heads, 2);      // GQA as it is, no K/V expansion
  // A KV-cache chunk: bottom-right, the keys after the last query dropped.
  c.q_len = 16, c.kv_len = 4096, c.q_offset = 1000, c.window = 100;
  a = ops::cudnn_graph_args(c);
  ASSERT_TRUE(a.ok) << a.why;
  EXPECT_EQ(a.align, ops::DiagonalAlign::kBottomRight);
  EXPECT_EQ(a.key_len, 1016);
  EXPECT_EQ(a.right_bound, 0);
  EXPECT_EQ(a.left_bound, 100);
  // Non-causal window with queries before the end of the keys: bottom-right, the left bound shifted.
  c.causal = false;
  a = ops::cudnn_graph_args(c);
  ASSERT_TRUE(a.ok) << a.why;
  EXPECT_EQ(a.key_len, 4096);
  EXPECT_EQ(a.right_bound, -1);
  EXPECT_EQ(a.left_bound, 100 + (4096 - 16) - 1000);
  // ALiBi: causal from position 0 only (cuDNN's ALiBi wants right bound 0, top-left); built-in slopes only.
  c = ops::AttnCall();
  c.q_len = c.kv_len = 2048;
  c.alibi = true;
  EXPECT_FALSE(ops::cudnn_graph_args(c).ok);  // slopes not known to be cuDNN's
  c.alibi_builtin = true;
  a = ops::cudnn_graph_args(c);
  ASSERT_TRUE(a.ok) << a.why;
  EXPECT_TRUE(a.alibi);
  EXPECT_EQ(a.right_bound, 0);
  c.causal = false;
  EXPECT_FALSE(ops::cudnn_graph_args(c).ok);  // signed ALiBi
  c.causal = true, c.q_len = 1, c.q_offset = 2047;
  EXPECT_FALSE(ops::cudnn_graph_args(c).ok);  // decode: cuDNN's row index is not our position
  c.q_offset = 0, c.q_len = 2048, c.alibi_trainable = true;
  EXPECT_FALSE(ops::cudnn_graph_args(c).ok);
  // Left padding, float32, head dim 12, the backward of s_q = s_kv = 1.
  c = ops::AttnCall();
  c.q_len = 1, c.kv_len = 40, c.key_start = true, c.max_key_start = 3;
  EXPECT_FALSE(ops::cudnn_graph_args(c).ok);
  c = ops::AttnCall();
  c.dtype = kernels::AttnDType::kFloat32;
  EXPECT_FALSE(ops::cudnn_graph_args(c).ok);
  c.dtype = kernels::AttnDType::kFloat16;
  c.head_dim = 12;
  EXPECT_FALSE(ops::cudnn_graph_args(c).ok);
  c.head_dim = 64, c.training = true;
  EXPECT_FALSE(ops::cudnn_graph_args(c).ok);
  c.training = false;
  EXPECT_TRUE(ops::cudnn_graph_args(c).ok);
}

TEST(AttentionPlan, CudnnGraphDefaultChoices) {
  ops::AttnCall c;
  c.cudnn_graph = true;
  c.q_len = c.kv_len = 8192;
  c.heads = 16, c.kv_heads = 4;
  EXPECT_EQ(ops::plan_attention(c).backend, AttnBackend::kCudnnGraph);  // GQA without expanded K/V
  c.window = 512;
  EXPECT_EQ(ops::plan_attention(c).backend, AttnBackend::kCudnnGraph);
  c.window = 0;
  c.sm = 80;
  EXPECT_EQ(ops::plan_attention(c).backend, AttnBackend::kFlash);  // sm80: FA2 unless ALiBi
  c.alibi = c.alibi_builtin = true;
  c.training = true;
  EXPECT_EQ(ops::plan_attention(c).backend, AttnBackend::kCudnnGraph);  // no 7 GiB bias, no own kernels
  c.sm = 90;
  EXPECT_EQ(ops::plan_attention(c).backend, AttnBackend::kCudnnGraph);
  c.alibi_builtin = false;  // slopes cuDNN does not build in: today's plan
  EXPECT_EQ(ops::plan_attention(c).backend, AttnBackend::kOwnCuda);
  c.alibi_builtin = true, c.alibi_trainable = true;
  EXPECT_EQ(ops::plan_attention(c).backend, AttnBackend::kReference);
  c.alibi_trainable = false, c.causal = false;  // signed ALiBi: not cuDNN's
  EXPECT_EQ(ops::plan_attention(c).backend, AttnBackend::kOwnCuda);
  c.cudnn_graph = false, c.causal = true;  // a build without cudnn-frontend: today's plan
  EXPECT_EQ(ops::plan_attention(c).backend, AttnBackend::kOwnCuda);
  bool ok = true;
  const char* why = "";
  ops::plan_attention_forced(c, AttnBackend::kCudnnGraph, &ok, &why);
  EXPECT_FALSE(ok);
  EXPECT_NE(std::string(why).find("cudnn-frontend"), std::string::npos);
  AttnBackend b;
  ASSERT_TRUE(ops::parse_attn_backend("cudnn_graph", &b));
  EXPECT_EQ(b, AttnBackend::kCudnnGraph);
}

TEST(AttentionPlan, CudnnBuiltinAlibiSlopesAreOurs) {
  // get_alibi_slope (float32, as cuDNN computes them) against its formula in float64 and against ours
  // (Press et al.), for every head count up to 64: powers of two and not.
  for (int64_t h = 1; h <= 64; ++h) {
    const auto cudnn = ops::cudnn_alibi_slopes(h);
    const auto formula = cudnn_builtin_slopes(h);
    const auto ours = ops::alibi_slopes(h);
    ASSERT_EQ(int64_t(cudnn.size()), h);
    std::vector<float> ours_f(ours.begin(), ours.end());
    for (int64_t i = 0; i < h; ++i) {
      EXPECT_NEAR(cudnn[size_t(i)], formula[size_t(i)], 2e-7 * formula[size_t(i)]) << "h=" << h << " i=" << i;
      EXPECT_NEAR(ours[size_t(i)], formula[size_t(i)], 1e-14 * formula[size_t(i)]) << "h=" << h << " i=" << i;
    }
    EXPECT_TRUE(ops::alibi_matches_cudnn(ours_f.data(), h)) << "h=" << h;
  }
  // Other slopes are refused: a different base, another head count's slopes, one slope off by 1e-5.
  const int64_t H = 12;
  std::vector<float> other(H);
  for (int64_t i = 0; i < H; ++i) other[size_t(i)] = float(std::pow(2.0, -4.0 * double(i + 1) / 8.0));
  EXPECT_FALSE(ops::alibi_matches_cudnn(other.data(), H));
  const auto s16 = ops::alibi_slopes(16);
  std::vector<float> first12(s16.begin(), s16.begin() + H);
  EXPECT_FALSE(ops::alibi_matches_cudnn(first12.data(), H));
  auto ours = ops::alibi_slopes(H);
  std::vector<float> nudged(ours.begin(), ours.end());
  nudged[5] *= 1.0f + 1e-5f;
  EXPECT_FALSE(ops::alibi_matches_cudnn(nudged.data(), H));
}

TEST(AttentionPlan, CudnnGraphAlibiAnyHeadCountAndTheSlopeCheck) {
  // Non-power-of-two head counts with GQA, through the glue on the emulated node (training: dq, dk, dv).
  at::set_num_threads(1);
  torch::manual_seed(24);
  for (auto [H, Hkv] : std::vector<std::pair<int64_t, int64_t>>{{12, 4}, {6, 2}, {5, 1}, {3, 3}}) {
    Case c;
    c.B = 2, c.H = H, c.Hkv = Hkv, c.T = c.S = 40, c.D = 16, c.alibi = true;
    for (int64_t window : {0, 9}) {
      c.window = window;
      const auto t = inputs(c);
      const auto plan = ops::plan_attention(gpu_call(t, c.params(), true));
      EXPECT_EQ(plan.backend, AttnBackend::kCudnnGraph)
          << c.str() << ": " << plan.reason << " / " << plan.cudnn_graph.why;
      EXPECT_TRUE(check_backend(c, t, AttnBackend::kCudnnGraph, true)) << c.str();
    }
  }
  // Slopes cuDNN does not build in (scaled), and trainable slopes: the plan keeps them off cuDNN's ALiBi.
  Case c;
  c.T = c.S = 40, c.D = 16, c.alibi = true;
  const auto t = inputs(c);
  auto p = c.params();
  p.alibi_slopes = p.alibi_slopes * 0.5;
  auto call = gpu_call(t, p, true);
  EXPECT_FALSE(call.alibi_builtin);
  EXPECT_NE(ops::plan_attention(call).backend, AttnBackend::kCudnnGraph);
  EXPECT_FALSE(check_backend(c, t, AttnBackend::kCudnnGraph, true, &p));
  EXPECT_TRUE(check_backend(c, t, AttnBackend::kMemEfficient, true, &p));
  p = c.params();
  p.alibi_slopes = p.alibi_slopes.clone().requires_grad_();
  call = gpu_call(t, p, true);
  EXPECT_FALSE(call.alibi_builtin);
  EXPECT_EQ(ops::plan_attention(call).backend, AttnBackend::kReference);
}

TEST(AttentionPlan, CudnnGraphMappingErrorsAreCaught) {
  // The emulation is sensitive to each attribute the glue sets: every deliberate error moves out (or the
  // log-sum-exp) far from the reference.
  at::set_num_threads(1);
  torch::manual_seed(25);
  auto err = [](const be::Forward& f, const ops::AttentionOutput& r) { return max_err(f.out, r.out); };
  // An off-by-one window (FA2's inclusive W − 1, or W + 1), top-left and bottom-right.
  for (int64_t q_offset : {-1, 10}) {
    Case c;
    c.T = 20, c.S = 50, c.D = 16, c.window = 6, c.q_offset = q_offset;
    if (q_offset < 0) c.S = c.T;
    const auto t = inputs(c);
    const auto p = c.params();
    const auto ref = ops::reference_attention(t.q, t.k, t.v, p);
    const auto plan = ops::plan_attention(gpu_call(t, p, false));
    ASSERT_EQ(plan.backend, AttnBackend::kCudnnGraph) << plan.cudnn_graph.why;
    EXPECT_LT(err(be::run_forward(plan, t.q, t.k, t.v, p, emulated_ops()), ref), 1e-10);
    for (int64_t delta : {-1, 1}) {
      auto bad = plan;
      bad.cudnn_graph.left_bound += delta;
      EXPECT_GT(err(be::run_forward(bad, t.q, t.k, t.v, p, emulated_ops()), ref), 1e-3) << c.str() << " " << delta;
    }
    if (q_offset > 0) {  // the chunk aligned top-left instead of bottom-right
      auto bad = plan;
      bad.cudnn_graph.align = ops::DiagonalAlign::kTopLeft;
      EXPECT_GT(err(be::run_forward(bad, t.q, t.k, t.v, p, emulated_ops()), ref), 1e-3);
    }
  }
  // A wrong slope base: slopes 2^(−4k/n) sent to cuDNN's ALiBi as if they were its own.
  {
    Case c;
    c.H = 8, c.Hkv = 2, c.T = c.S = 40, c.D = 16, c.alibi = true;
    const auto t = inputs(c);
    auto p = c.params();
    std::vector<double> base4;
    for (int64_t k = 1; k <= c.H; ++k) base4.push_back(std::pow(2.0, -4.0 * double(k) / double(c.H)));
    p.alibi_slopes = torch::tensor(base4, torch::kDouble);
    auto call = gpu_call(t, p, false);
    EXPECT_FALSE(call.alibi_builtin);
    call.alibi_builtin = true;  // the error: the plan believes the slopes are cuDNN's
    auto plan = ops::plan_attention(call);
    ASSERT_EQ(plan.backend, AttnBackend::kCudnnGraph);
    const auto ref = ops::reference_attention(t.q, t.k, t.v, p);
    EXPECT_GT(err(be::run_forward(plan, t.q, t.k, t.v, p, emulated_ops()), ref), 1e-3);
    // With our slopes the same plan is exact, log-sum-exp included.
    const auto pg = c.params();
    const auto f = be::run_forward(plan, t.q, t.k, t.v, pg, emulated_ops());
    EXPECT_LT(err(f, ops::reference_attention(t.q, t.k, t.v, pg)), 1e-10);
    EXPECT_LT(max_err(f.lse, exact_lse(t.q, t.k, pg)), 1e-10);
  }
  // A wrong group: query head h reading KV head h mod H_kv instead of h / (H / H_kv).
  {
    Case c;
    c.H = 8, c.Hkv = 2, c.T = c.S = 30, c.D = 16;
    const auto t = inputs(c);
    const auto p = c.params();
    const auto plan = ops::plan_attention(gpu_call(t, p, false));
    ASSERT_EQ(plan.backend, AttnBackend::kCudnnGraph);
    const auto ref = ops::reference_attention(t.q, t.k, t.v, p);
    auto wrong = emulated_ops();
    wrong.cudnn_graph_fwd = [](const be::CudnnGraphFwdIn& in) {
      return emulate_cudnn_graph_with(in, [](int64_t h, int64_t, int64_t Hk) { return h % Hk; });
    };
    EXPECT_LT(err(be::run_forward(plan, t.q, t.k, t.v, p, emulated_ops()), ref), 1e-10);
    EXPECT_GT(err(be::run_forward(plan, t.q, t.k, t.v, p, wrong), ref), 1e-3);
  }
}
