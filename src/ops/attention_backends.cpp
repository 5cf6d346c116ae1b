// Tensor glue of the attention plan (attention_backends.h). Device-agnostic: the CPU tests run it against
// emulated backends, the CUDA path against LibTorch's ATen ops.
#include "drope/ops/attention_backends.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <vector>

#include <ATen/ops/_efficient_attention_backward.h>
#include <ATen/ops/_efficient_attention_forward.h>
#include <ATen/ops/_flash_attention_backward.h>
#include <ATen/ops/_flash_attention_forward.h>
#include <ATen/ops/_scaled_dot_product_cudnn_attention.h>
#include <ATen/ops/_scaled_dot_product_cudnn_attention_backward.h>
#include <ATen/ops/scaled_dot_product_attention.h>

#include "cudnn_graph.h"

namespace drope::ops::backends {

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

std::optional<at::Tensor> opt(const at::Tensor& t) { return t.defined() ? std::optional<at::Tensor>(t) : std::nullopt; }

// The window arguments as PyTorch's wrappers take them (nullopt: unbounded).
std::optional<int64_t> window_opt(int64_t w) { return w >= 0 ? std::optional<int64_t>(w) : std::nullopt; }

at::Tensor unit_d(const at::Tensor& t) { return t.stride(-1) == 1 ? t : t.contiguous(); }

int64_t resolved_offset(const at::Tensor& q, const at::Tensor& k, const AttentionParams& p) {
  return p.q_offset < 0 ? k.size(2) - q.size(2) : p.q_offset;
}

// Zero rows for keys [key_len, S) that the backend never saw: (B, Hkv, key_len, D) → (B, Hkv, S, D).
at::Tensor pad_keys(const at::Tensor& g, int64_t S) {
  if (g.size(2) == S) return g;
  auto full = at::zeros({g.size(0), g.size(1), S, g.size(3)}, g.options());
  full.narrow(2, 0, g.size(2)).copy_(g);
  return full;
}

// GQA for kernels without it: head h reads KV head h / G (the FA2 README's rule), so repeat each KV head G
// times in place, and sum the G gradients of a KV head back.
at::Tensor expand_heads(const at::Tensor& t, int64_t G) { return G == 1 ? t : t.repeat_interleave(G, 1); }
at::Tensor reduce_heads(const at::Tensor& g, int64_t G) {
  if (G == 1) return g;
  return g.view({g.size(0), g.size(1) / G, G, g.size(2), g.size(3)}).sum(2);
}

// FA2 varlen tables of a left-padded call: one sequence per (batch, KV head), rows of k viewed as
// (rows, 1, D). Returns {k_rows, v_rows, cu_q, cu_k, seqused_k}.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> varlen_tables(const at::Tensor& q, at::Tensor k,
                                                                                     at::Tensor v,
                                                                                     const AttentionParams& p,
                                                                                     int64_t key_len) {
  const int64_t B = k.size(0), Hkv = k.size(1), T = q.size(2), D = k.size(3), N = B * Hkv;
  // A KV cache (B, Hkv, capacity, D) narrowed to its length is read in place: sequence (b, g) starts at row
  // (b·Hkv + g)·capacity. Anything else is made contiguous (capacity = S).
  auto rows_layout = [&](const at::Tensor& t) {
    return t.stride(3) == 1 && t.stride(2) == D && t.stride(1) % t.stride(2) == 0 && t.stride(0) == Hkv * t.stride(1);
  };
  if (!rows_layout(k) || !rows_layout(v) || k.stride(1) != v.stride(1)) {
    k = k.contiguous();
    v = v.contiguous();
  }
  const int64_t rows_per_seq = k.stride(1) / k.stride(2);
  TORCH_CHECK(N * rows_per_seq < (int64_t(1) << 31), "attention (FA2 varlen): ", N * rows_per_seq,
              " key rows overflow int32 sequence offsets");
  auto k_rows = k.as_strided({N * rows_per_seq, 1, D}, {D, D, 1}, k.storage_offset());
  auto v_rows = v.as_strided({N * rows_per_seq, 1, D}, {D, D, 1}, v.storage_offset());
  const auto ks = p.key_start.to(at::kCPU, at::kLong).contiguous();
  std::vector<int32_t> cu_q(static_cast<size_t>(N + 1)), cu_k(static_cast<size_t>(N + 1)), used(static_cast<size_t>(N));
  for (int64_t n = 0; n <= N; ++n) {
    cu_q[size_t(n)] = int32_t(n * T);
    if (n == N) {
      cu_k[size_t(n)] = int32_t(N * rows_per_seq);
      break;
    }
    const int64_t start = ks.data_ptr<int64_t>()[n / Hkv];
    cu_k[size_t(n)] = int32_t(n * rows_per_seq + start);
    used[size_t(n)] = int32_t(key_len - start);
  }
  auto i32 = at::TensorOptions().dtype(at::kInt);
  auto to_dev = [&](std::vector<int32_t>& x) {
    return at::from_blob(x.data(), {int64_t(x.size())}, i32).clone().to(q.device());
  };
  return {k_rows, v_rows, to_dev(cu_q), to_dev(cu_k), to_dev(used)};
}

Forward flash_forward(const AttnPlan& plan, const at::Tensor& q_, const at::Tensor& k_, const at::Tensor& v_,
                      const AttentionParams& p, const BackendOps& ops) {
  const FlashArgs& a = plan.flash;
  const auto q = unit_d(q_), k = unit_d(k_).narrow(2, 0, a.key_len), v = unit_d(v_).narrow(2, 0, a.key_len);
  const int64_t B = q.size(0), H = q.size(1), T = q.size(2), D = q.size(3), Hkv = k.size(1), G = H / Hkv;
  FlashFwdIn in;
  in.max_q = a.max_q;
  in.max_k = a.max_k;
  in.is_causal = a.is_causal;
  in.scale = a.scale;
  in.window_left = a.window_left;
  in.window_right = a.window_right;
  Forward f;
  at::Tensor lse;  // (B, H, T) in FA2's convention
  if (!a.varlen) {
    in.q = q.transpose(1, 2);  // (B, T, H, D)
    in.k = k.transpose(1, 2);  // (B, key_len, Hkv, D)
    in.v = v.transpose(1, 2);
    auto o = ops.flash_fwd(in);
    f.state = {o.out, o.lse, o.rng_state, o.unused, {}};
    f.out = o.out.transpose(1, 2);  // (B, H, T, D)
    lse = o.lse.reshape({B, H, T});
  } else {
    auto [k_rows, v_rows, cu_q, cu_k, used] = varlen_tables(q, k, v, p, a.key_len);
    // q rows n·T + t of sequence n = (b, g), its G query heads as FA2 heads.
    in.q = q.reshape({B, Hkv, G, T, D}).permute({0, 1, 3, 2, 4}).reshape({B * Hkv * T, G, D});
    in.k = k_rows;
    in.v = v_rows;
    in.cu_q = cu_q;
    in.cu_k = cu_k;
    in.seqused_k = used;
    auto o = ops.flash_fwd(in);
    f.state = {o.out, o.lse, o.rng_state, o.unused, {}};
    f.out = o.out.view({B, Hkv, T, G, D}).permute({0, 1, 3, 2, 4}).reshape({B, H, T, D});
    lse = o.lse.view({G, B, Hkv, T}).permute({1, 2, 0, 3}).reshape({B, H, T});  // (G, N·T) → (B, H, T)
  }
  lse = lse.to(q.scalar_type() == at::kDouble ? at::kDouble : at::kFloat);
  f.lse = lse;
  return f;
}

AttentionGrads flash_backward(const AttnPlan& plan, const at::Tensor& q_, const at::Tensor& k_, const at::Tensor& v_,
                              const NativeState& s, const at::Tensor& dout, const BackendOps& ops) {
  const FlashArgs& a = plan.flash;
  TORCH_CHECK(!a.varlen, "attention (FA2): no backward for left-padded calls");
  const int64_t S = k_.size(2);
  const auto q = unit_d(q_), k = unit_d(k_).narrow(2, 0, a.key_len), v = unit_d(v_).narrow(2, 0, a.key_len);
  FlashBwdIn in;
  in.dout = dout.transpose(1, 2);
  in.q = q.transpose(1, 2);
  in.k = k.transpose(1, 2);
  in.v = v.transpose(1, 2);
  in.out = s.out;
  in.lse = s.lse;
  in.rng_state = s.rng0;
  in.unused = s.rng1;
  in.max_q = a.max_q;
  in.max_k = a.max_k;
  in.is_causal = a.is_causal;
  in.scale = a.scale;
  in.window_left = a.window_left;
  in.window_right = a.window_right;
  auto [dq, dk, dv] = ops.flash_bwd(in);
  return {dq.transpose(1, 2), pad_keys(dk.transpose(1, 2), S), pad_keys(dv.transpose(1, 2), S)};
}

// Keys, values and bias of the bias backends (memory-efficient, cuDNN): keys sliced to key_len, heads
// expanded for GQA.
struct BiasInputs {
  at::Tensor k, v, bias;
};

BiasInputs bias_inputs(const AttnPlan& plan, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                       const AttentionParams& p, int64_t key_len, bool expand, bool bias, bool causal_in_bias) {
  const int64_t G = expand ? q.size(1) / k.size(1) : 1;
  BiasInputs r;
  r.k = expand_heads(unit_d(k).narrow(2, 0, key_len), G);
  r.v = expand_heads(unit_d(v).narrow(2, 0, key_len), G);
  if (bias) r.bias = dense_bias(q, p, plan.geometry, key_len, causal_in_bias);
  return r;
}

Forward mem_eff_forward(const AttnPlan& plan, const at::Tensor& q_, const at::Tensor& k, const at::Tensor& v,
                        const AttentionParams& p, const BackendOps& ops) {
  const MemEffArgs& a = plan.mem_eff;
  const auto q = unit_d(q_);
  auto in3 = bias_inputs(plan, q, k, v, p, a.key_len, a.expand_kv, a.bias, a.custom_mask_type == 0);
  MemEffFwdIn in;
  in.q = q.transpose(1, 2);
  in.k = in3.k.transpose(1, 2);
  in.v = in3.v.transpose(1, 2);
  in.bias = in3.bias;
  in.custom_mask_type = a.custom_mask_type;
  in.scale = a.scale;
  auto o = ops.mem_eff_fwd(in);
  Forward f;
  f.state = {o.out, o.lse, o.seed, o.offset, in3.bias};
  f.out = o.out.transpose(1, 2);
  f.lse = o.lse.narrow(2, 0, q.size(2)).to(q.scalar_type() == at::kDouble ? at::kDouble : at::kFloat);
  return f;
}

AttentionGrads mem_eff_backward(const AttnPlan& plan, const at::Tensor& q_, const at::Tensor& k, const at::Tensor& v,
                                const AttentionParams& p, const NativeState& s, const at::Tensor& dout,
                                const BackendOps& ops) {
  const MemEffArgs& a = plan.mem_eff;
  const auto q = unit_d(q_);
  const int64_t G = a.expand_kv ? q.size(1) / k.size(1) : 1;
  auto in3 = bias_inputs(plan, q, k, v, p, a.key_len, a.expand_kv, false, false);
  MemEffBwdIn in;
  in.dout = dout.transpose(1, 2);
  in.q = q.transpose(1, 2);
  in.k = in3.k.transpose(1, 2);
  in.v = in3.v.transpose(1, 2);
  in.bias = s.bias;
  in.out = s.out;
  in.lse = s.lse;
  in.seed = s.rng0;
  in.offset = s.rng1;
  in.custom_mask_type = a.custom_mask_type;
  in.scale = a.scale;
  auto [dq, dk, dv] = ops.mem_eff_bwd(in);
  const int64_t S = k.size(2);
  return {dq.transpose(1, 2), pad_keys(reduce_heads(dk.transpose(1, 2), G), S),
          pad_keys(reduce_heads(dv.transpose(1, 2), G), S)};
}

Forward cudnn_forward(const AttnPlan& plan, const at::Tensor& q_, const at::Tensor& k, const at::Tensor& v,
                      const AttentionParams& p, const BackendOps& ops) {
  const CudnnArgs& a = plan.cudnn;
  const auto q = unit_d(q_);
  auto in3 = bias_inputs(plan, q, k, v, p, a.key_len, a.expand_kv, a.bias, !a.is_causal);
  CudnnFwdIn in{q, in3.k, in3.v, in3.bias, a.is_causal, a.scale};
  auto o = ops.cudnn_fwd(in);
  Forward f;
  f.state = {o.out, o.lse, o.seed, o.offset, in3.bias};
  f.out = o.out;
  f.lse =
      o.lse.reshape({q.size(0), q.size(1), q.size(2)}).to(q.scalar_type() == at::kDouble ? at::kDouble : at::kFloat);
  return f;
}

AttentionGrads cudnn_backward(const AttnPlan& plan, const at::Tensor& q_, const at::Tensor& k, const at::Tensor& v,
                              const AttentionParams& p, const NativeState& s, const at::Tensor& dout,
                              const BackendOps& ops) {
  const CudnnArgs& a = plan.cudnn;
  const auto q = unit_d(q_);
  const int64_t G = a.expand_kv ? q.size(1) / k.size(1) : 1;
  auto in3 = bias_inputs(plan, q, k, v, p, a.key_len, a.expand_kv, false, false);
  CudnnBwdIn in{dout, q, in3.k, in3.v, s.out, s.lse, s.rng0, s.rng1, s.bias, a.is_causal, a.scale};
  auto [dq, dk, dv] = ops.cudnn_bwd(in);
  const int64_t S = k.size(2);
  return {dq, pad_keys(reduce_heads(dk, G), S), pad_keys(reduce_heads(dv, G), S)};
}

Forward cudnn_graph_forward(const AttnPlan& plan, const at::Tensor& q_, const at::Tensor& k_, const at::Tensor& v_,
                            const BackendOps& ops) {
  const CudnnGraphArgs& a = plan.cudnn_graph;
  const auto q = unit_d(q_), k = unit_d(k_).narrow(2, 0, a.key_len), v = unit_d(v_).narrow(2, 0, a.key_len);
  auto o = ops.cudnn_graph_fwd({q, k, v, a});
  Forward f;
  f.state = {o.out, o.stats, {}, {}, {}};
  f.out = o.out;
  // Our logits are cuDNN's (ALiBi only with the queries at position 0), so the stats are our log-sum-exp.
  f.lse =
      o.stats.reshape({q.size(0), q.size(1), q.size(2)}).to(q.scalar_type() == at::kDouble ? at::kDouble : at::kFloat);
  return f;
}

AttentionGrads cudnn_graph_backward(const AttnPlan& plan, const at::Tensor& q_, const at::Tensor& k_,
                                    const at::Tensor& v_, const NativeState& s, const at::Tensor& dout,
                                    const BackendOps& ops) {
  const CudnnGraphArgs& a = plan.cudnn_graph;
  const int64_t S = k_.size(2);
  const auto q = unit_d(q_), k = unit_d(k_).narrow(2, 0, a.key_len), v = unit_d(v_).narrow(2, 0, a.key_len);
  auto [dq, dk, dv] = ops.cudnn_graph_bwd({unit_d(dout), q, k, v, s.out, s.lse, a});
  return {dq, pad_keys(dk, S), pad_keys(dv, S)};
}

// Whether the slopes are cuDNN's built-in ones: one host copy per slopes tensor and version, remembered while
// the tensor lives (a weak reference, so a new tensor at a freed address is not taken for the old one).
bool slopes_are_cudnn_builtin(const at::Tensor& slopes) {
  using Weak = c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>;
  struct Seen {
    Weak impl;
    const void* data;
    int64_t version;
    bool match;
  };
  static std::mutex mu;
  static std::vector<Seen> seen;
  const void* data = slopes.data_ptr();
  const int64_t version = int64_t(slopes._version());
  auto same = [&](const Seen& e) {
    return !e.impl.expired() && e.impl._unsafe_get_target() == slopes.unsafeGetTensorImpl() && e.data == data &&
           e.version == version;
  };
  {
    std::lock_guard<std::mutex> lock(mu);
    for (const auto& e : seen)
      if (same(e)) return e.match;
  }
  const auto host = slopes.detach().to(at::kCPU, at::kFloat).contiguous();
  const bool match = alibi_matches_cudnn(host.data_ptr<float>(), slopes.numel());
  std::lock_guard<std::mutex> lock(mu);
  seen.erase(std::remove_if(seen.begin(), seen.end(), [](const Seen& e) { return e.impl.expired(); }), seen.end());
  if (seen.size() >= 256) seen.erase(seen.begin());
  seen.push_back({Weak(slopes.getIntrusivePtr()), data, version, match});
  return match;
}

Forward sdpa_forward(const AttnPlan& plan, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                     const AttentionParams& p, const BackendOps& ops) {
  const SdpaArgs& a = plan.sdpa;
  SdpaIn in;
  in.q = q;
  in.k = k.narrow(2, 0, a.key_len);
  in.v = v.narrow(2, 0, a.key_len);
  if (a.mask) in.mask = dense_bias(q, p, plan.geometry, a.key_len, !a.is_causal);
  in.is_causal = a.is_causal;
  in.scale = a.scale;
  in.enable_gqa = a.enable_gqa;
  Forward f;
  f.out = ops.sdpa(in);
  return f;
}

}  // namespace

AttnCall make_call(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const AttentionParams& p,
                   bool training, int sm) {
  (void)v;
  AttnCall c;
  switch (q.scalar_type()) {
    case at::kHalf: c.dtype = kernels::AttnDType::kFloat16; break;
    case at::kBFloat16: c.dtype = kernels::AttnDType::kBFloat16; break;
    case at::kDouble: c.dtype = kernels::AttnDType::kFloat64; break;
    default: c.dtype = kernels::AttnDType::kFloat32; break;
  }
  c.sm = sm;
  c.batch = q.size(0);
  c.heads = q.size(1);
  c.kv_heads = k.size(1);
  c.q_len = q.size(2);
  c.kv_len = k.size(2);
  c.head_dim = q.size(3);
  c.causal = p.causal;
  c.window = p.window;
  c.alibi = p.alibi_slopes.defined();
  c.alibi_trainable = c.alibi && p.alibi_slopes.requires_grad();
  c.scale = p.scale > 0 ? p.scale : 1.0 / std::sqrt(double(c.head_dim));
  c.q_offset = resolved_offset(q, k, p);
  c.key_start = p.key_start.defined();
  c.max_key_start = c.key_start && p.key_start.numel() > 0 ? p.key_start.max().item<int64_t>() : 0;
  c.training = training;
  c.alibi_builtin = c.alibi && !c.alibi_trainable && slopes_are_cudnn_builtin(p.alibi_slopes);
  c.cudnn_graph = cudnn_graph_enabled();
  return c;
}

bool cudnn_graph_enabled() {
#ifdef DROPE_WITH_CUDNN_FRONTEND
  static const bool on = [] {
    const char* e = std::getenv("DROPE_CUDNN_GRAPH");
    return !(e && std::strcmp(e, "0") == 0);
  }();
  return on;
#else
  return false;
#endif
}

at::Tensor dense_bias(const at::Tensor& q, const AttentionParams& p, const AttnGeometry& g, int64_t key_len,
                      bool causal_in_bias) {
  const int64_t B = q.size(0), H = q.size(1), T = q.size(2), L = key_len;
  const int64_t off = g.delta + g.key_len - T;  // the resolved q_offset
  // Positions in float64 (exact), the bias rounded once to q's dtype.
  auto dopt = q.options().dtype(at::kDouble);
  auto i = at::arange(T, dopt).add_(double(off)).view({T, 1});
  auto j = at::arange(L, dopt).view({1, L});
  auto allowed = at::ones({T, L}, q.options().dtype(at::kBool));
  if (causal_in_bias && g.causal) allowed = allowed & (j <= i);
  if (p.window > 0) allowed = allowed & (j > i - double(p.window));
  at::Tensor bias;                                                          // (Hb, T, L)
  if (p.alibi_slopes.defined())
    bias = -p.alibi_slopes.detach().to(q.device(), at::kDouble).view({H, 1, 1}) * (i - j).unsqueeze(0);
  else bias = at::zeros({1, T, L}, dopt);
  bias = bias.masked_fill(allowed.logical_not().unsqueeze(0), kNegInf).unsqueeze(0);  // (1, Hb, T, L)
  if (p.key_start.defined()) {
    auto pad = j.view({1, 1, 1, L}) < p.key_start.to(q.device(), at::kDouble).view({B, 1, 1, 1});
    bias = bias.masked_fill(pad, kNegInf);  // (B, Hb, T, L)
  }
  // Rows padded to a multiple of 16 elements (the memory-efficient kernel's alignment; PyTorch pads alike).
  const int64_t Lp = (L + 15) / 16 * 16;
  auto buf = at::empty({bias.size(0), bias.size(1), T, Lp}, q.options());
  auto view = buf.narrow(3, 0, L);
  view.copy_(bias);
  return view.expand({B, H, T, L});
}

Forward run_forward(const AttnPlan& plan, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                    const AttentionParams& p, const BackendOps& ops) {
  switch (plan.backend) {
    case AttnBackend::kFlash: return flash_forward(plan, q, k, v, p, ops);
    case AttnBackend::kMemEfficient: return mem_eff_forward(plan, q, k, v, p, ops);
    case AttnBackend::kCudnn: return cudnn_forward(plan, q, k, v, p, ops);
    case AttnBackend::kCudnnGraph: return cudnn_graph_forward(plan, q, k, v, ops);
    case AttnBackend::kSdpa: return sdpa_forward(plan, q, k, v, p, ops);
    default: break;
  }
  TORCH_CHECK(false, "attention: backend ", attn_backend_name(plan.backend), " is not an ATen backend");
}

AttentionGrads run_backward(const AttnPlan& plan, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const AttentionParams& p, const NativeState& state, const at::Tensor& dout,
                            const BackendOps& ops) {
  switch (plan.backend) {
    case AttnBackend::kFlash: return flash_backward(plan, q, k, v, state, dout, ops);
    case AttnBackend::kMemEfficient: return mem_eff_backward(plan, q, k, v, p, state, dout, ops);
    case AttnBackend::kCudnn: return cudnn_backward(plan, q, k, v, p, state, dout, ops);
    case AttnBackend::kCudnnGraph: return cudnn_graph_backward(plan, q, k, v, state, dout, ops);
    default: break;
  }
  TORCH_CHECK(false, "attention: backend ", attn_backend_name(plan.backend), " has no planned backward");
}

const BackendOps& aten_ops() {
  static const BackendOps ops = [] {
    BackendOps o;
    o.flash_fwd = [](const FlashFwdIn& in) {
      auto [out, lse, rng, unused, dbg] = at::_flash_attention_forward(
          in.q, in.k, in.v, opt(in.cu_q), opt(in.cu_k), in.max_q, in.max_k, /*dropout_p=*/0.0, in.is_causal,
          /*return_debug_mask=*/false, in.scale, window_opt(in.window_left), window_opt(in.window_right),
          opt(in.seqused_k), /*alibi_slopes=*/std::nullopt);  // LibTorch builds FA2 without ALiBi
      (void)dbg;
      return FlashFwdOut{out, lse, rng, unused};
    };
    o.flash_bwd = [](const FlashBwdIn& in) {
      return at::_flash_attention_backward(in.dout, in.q, in.k, in.v, in.out, in.lse, at::Tensor(), at::Tensor(),
                                           in.max_q, in.max_k, /*dropout_p=*/0.0, in.is_causal, in.rng_state, in.unused,
                                           in.scale, window_opt(in.window_left), window_opt(in.window_right));
    };
    o.mem_eff_fwd = [](const MemEffFwdIn& in) {
      auto [out, lse, seed, offset, mq, mk] = at::_efficient_attention_forward(
          in.q, in.k, in.v, opt(in.bias), std::nullopt, std::nullopt, std::nullopt, std::nullopt,
          /*dropout_p=*/0.0, in.custom_mask_type, /*compute_log_sumexp=*/true, in.scale);
      (void)mq, (void)mk;
      return MemEffFwdOut{out, lse, seed, offset};
    };
    o.mem_eff_bwd = [](const MemEffBwdIn& in) {
      auto [dq, dk, dv, db] = at::_efficient_attention_backward(
          in.dout, in.q, in.k, in.v, opt(in.bias), in.out, std::nullopt, std::nullopt, in.q.size(1), in.k.size(1),
          in.lse, /*dropout_p=*/0.0, in.seed, in.offset, in.custom_mask_type, /*bias_requires_grad=*/false, in.scale);
      (void)db;
      return Grads3{dq, dk, dv};
    };
    o.cudnn_fwd = [](const CudnnFwdIn& in) {
      auto r = at::_scaled_dot_product_cudnn_attention(in.q, in.k, in.v, opt(in.bias), /*compute_log_sumexp=*/true,
                                                       /*dropout_p=*/0.0, in.is_causal,
                                                       /*return_debug_mask=*/false, in.scale);
      return CudnnFwdOut{std::get<0>(r), std::get<1>(r), std::get<6>(r), std::get<7>(r)};
    };
    o.cudnn_bwd = [](const CudnnBwdIn& in) {
      return at::_scaled_dot_product_cudnn_attention_backward(
          in.dout, in.q, in.k, in.v, in.out, in.lse, in.seed, in.offset, in.bias, at::Tensor(), at::Tensor(),
          in.q.size(2), in.k.size(2), /*dropout_p=*/0.0, in.is_causal, in.scale);
    };
#ifdef DROPE_WITH_CUDNN_FRONTEND
    o.cudnn_graph_fwd = cudnn_graph::forward;
    o.cudnn_graph_bwd = cudnn_graph::backward;
#endif
    o.sdpa = [](const SdpaIn& in) {
      return at::scaled_dot_product_attention(in.q, in.k, in.v, opt(in.mask), /*dropout_p=*/0.0, in.is_causal, in.scale,
                                              in.enable_gqa);
    };
    return o;
  }();
  return ops;
}

}  // namespace drope::ops::backends
