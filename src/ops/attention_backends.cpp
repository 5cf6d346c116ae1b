// Tensor glue shared by the attention backends (attention_backends.h): the call's description, dense biases,
// GQA heads and padded gradients, and the real ops each backend binds. Device-agnostic: the CPU tests run the
// backends' glue against emulated ops, the CUDA path against LibTorch's ATen ops.
#include "drope/ops/attention_backends.h"
#include "drope/core/environment.h"
#include "drope/core/numbers.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <vector>

#include "attention_common.h"

namespace drope::ops::backends {

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

int64_t resolved_offset(const at::Tensor& q, const at::Tensor& k, const AttentionParams& p) {
  return p.q_offset < 0 ? k.size(2) - q.size(2) : p.q_offset;
}

}  // namespace

at::Tensor pad_keys(const at::Tensor& g, int64_t S) {
  if (g.size(2) == S) return g;
  auto full = at::zeros({g.size(0), g.size(1), S, g.size(3)}, g.options());
  full.narrow(2, 0, g.size(2)).copy_(g);
  return full;
}

at::Tensor expand_heads(const at::Tensor& t, int64_t G) { return G == 1 ? t : t.repeat_interleave(G, 1); }
at::Tensor reduce_heads(const at::Tensor& g, int64_t G) {
  if (G == 1) return g;
  return g.view({g.size(0), g.size(1) / G, G, g.size(2), g.size(3)}).sum(2);
}

BiasInputs bias_inputs(const AttnPlan& plan, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                       const AttentionParams& p, int64_t key_len, bool expand, bool bias, bool causal_in_bias) {
  const int64_t G = expand ? q.size(1) / k.size(1) : 1;
  BiasInputs r;
  r.k = expand_heads(unit_d(k).narrow(2, 0, key_len), G);
  r.v = expand_heads(unit_d(v).narrow(2, 0, key_len), G);
  if (bias) r.bias = dense_bias(q, p, plan.geometry, key_len, causal_in_bias);
  return r;
}

namespace {

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

}  // namespace

AttnCall make_call(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const AttentionParams& p,
                   bool training, int sm) {
  AttnCall c;
  bool known_dtype = true;
  switch (q.scalar_type()) {
    case at::kHalf: c.dtype = kernels::AttnDType::kFloat16; break;
    case at::kBFloat16: c.dtype = kernels::AttnDType::kBFloat16; break;
    case at::kDouble: c.dtype = kernels::AttnDType::kFloat64; break;
    case at::kFloat: c.dtype = kernels::AttnDType::kFloat32; break;
    default:
      c.dtype = kernels::AttnDType::kFloat32;
      known_dtype = false;
      break;
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
  c.cuda = q.is_cuda();
  c.uniform = known_dtype && k.scalar_type() == q.scalar_type() && v.scalar_type() == q.scalar_type() &&
              k.device() == q.device() && v.device() == q.device();
  return c;
}

bool cudnn_graph_enabled() {
#ifdef DROPE_WITH_CUDNN_FRONTEND
  static const bool on = [] {
    return switch_value(env::get("DROPE_CUDNN_GRAPH")) != SwitchValue::kOff;  // validated at start
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
  return attn_backend_def(plan.backend).forward(plan, q, k, v, p, ops);
}

AttentionGrads run_backward(const AttnPlan& plan, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const AttentionParams& p, const NativeState& state, const at::Tensor& dout,
                            const BackendOps& ops) {
  const AttnBackendDef& d = attn_backend_def(plan.backend);
  TORCH_CHECK(d.backward, "attention: backend ", d.name, " has no planned backward");
  return d.backward(plan, q, k, v, p, state, dout, ops);
}

const BackendOps& aten_ops() {
  static const BackendOps ops = [] {
    BackendOps o;
    for (const auto* d : attn_backends())
      if (d->bind) d->bind(o);
    return o;
  }();
  return ops;
}

}  // namespace drope::ops::backends
