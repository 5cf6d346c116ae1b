// The drope:: PyTorch ops (TORCH_LIBRARY): attention_fwd / attention_bwd over the ops layer's fused attention
// (ops/attention.h), and attention = the output of attention_fwd. Calls from Python enter here, so every argument is
// checked here with a message naming it (ValueError, or TypeError for dtypes). Autograd and the fake
// implementations that torch.compile traces are registered from Python (python/drope/_ops.py).
#include <cmath>
#include <optional>
#include <tuple>

#include <ATen/ATen.h>
#include <ATen/DeviceGuard.h>
#include <torch/library.h>

#include "drope/ops/attention.h"
#ifdef DROPE_WITH_CUDA
#include "drope/kernels/attention_cuda.h"
#endif

namespace drope::python_ext {

namespace {

using Grads = std::tuple<at::Tensor, at::Tensor, at::Tensor>;

// The options of one call, as the schema spells them.
struct Options {
  bool causal = true;
  int64_t window = 0;
  std::optional<at::Tensor> alibi_slopes;
  double scale = 0.0;  // 0: 1/√D
  int64_t q_offset = -1;
  double temperature = 1.0;
};

bool float_dtype(at::ScalarType t) {
  return t == at::kFloat || t == at::kDouble || t == at::kBFloat16 || t == at::kHalf;
}

// q (B, H, T, D), k/v (B, H_kv, S, D): ranks, dtypes, devices and sizes.
void check_tensors(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  TORCH_CHECK_VALUE(q.dim() == 4, "drope.attention: q must be 4-D (B, H, T, D), got shape ", q.sizes());
  TORCH_CHECK_VALUE(k.dim() == 4, "drope.attention: k must be 4-D (B, H_kv, S, D), got shape ", k.sizes());
  TORCH_CHECK_VALUE(v.dim() == 4, "drope.attention: v must be 4-D (B, H_kv, S, D), got shape ", v.sizes());
  TORCH_CHECK_TYPE(float_dtype(q.scalar_type()),
                   "drope.attention: q must be float32, float64, bfloat16 or float16, got ", q.scalar_type());
  TORCH_CHECK_TYPE(k.scalar_type() == q.scalar_type(), "drope.attention: k has dtype ", k.scalar_type(), " but q has ",
                   q.scalar_type());
  TORCH_CHECK_TYPE(v.scalar_type() == q.scalar_type(), "drope.attention: v has dtype ", v.scalar_type(), " but q has ",
                   q.scalar_type());
  TORCH_CHECK_VALUE(k.device() == q.device(), "drope.attention: k is on ", k.device(), " but q is on ", q.device());
  TORCH_CHECK_VALUE(v.device() == q.device(), "drope.attention: v is on ", v.device(), " but q is on ", q.device());
  TORCH_CHECK_VALUE(v.sizes() == k.sizes(), "drope.attention: v has shape ", v.sizes(), " but k has ", k.sizes(),
                    " (both (B, H_kv, S, D))");
  TORCH_CHECK_VALUE(k.size(0) == q.size(0), "drope.attention: k has batch size ", k.size(0), " but q has ", q.size(0));
  TORCH_CHECK_VALUE(k.size(3) == q.size(3), "drope.attention: k has head dim ", k.size(3), " but q has ", q.size(3));
  TORCH_CHECK_VALUE(q.size(3) > 0, "drope.attention: q has head dim 0");
  TORCH_CHECK_VALUE(k.size(1) > 0 && q.size(1) % k.size(1) == 0, "drope.attention: q's ", q.size(1),
                    " heads must be a multiple of k's ", k.size(1), " heads (grouped-query attention)");
  TORCH_CHECK_VALUE(k.size(2) > 0, "drope.attention: k holds no keys (S = 0)");
}

// The options against the tensors: window, ALiBi slopes, query offset, scale and temperature.
void check_options(const at::Tensor& q, const at::Tensor& k, const Options& o) {
  const int64_t H = q.size(1), T = q.size(2), S = k.size(2);
  TORCH_CHECK_VALUE(o.window >= 0, "drope.attention: window must be >= 0 (0: no window), got ", o.window);
  TORCH_CHECK_VALUE(T <= S, "drope.attention: q has ", T, " queries but k only ", S,
                    " keys; the queries are the last T of the S positions");
  TORCH_CHECK_VALUE(o.q_offset == -1 || (o.q_offset >= 0 && o.q_offset <= S - T),
                    "drope.attention: q_offset must be in [0, S - T] = [0, ", S - T,
                    "] (the position of the first query; -1 or None: S - T), got ", o.q_offset);
  TORCH_CHECK_VALUE(std::isfinite(o.scale) && o.scale >= 0,
                    "drope.attention: scale must be a finite number > 0 "
                    "(0 or None: 1/sqrt(D)), got ",
                    o.scale);
  TORCH_CHECK_VALUE(std::isfinite(o.temperature) && o.temperature > 0,
                    "drope.attention: temperature must be a finite number > 0, got ", o.temperature);
  if (!o.alibi_slopes) return;
  const at::Tensor& s = *o.alibi_slopes;
  TORCH_CHECK_VALUE(s.dim() == 1 && s.size(0) == H,
                    "drope.attention: alibi_slopes must have one slope per query head, "
                    "shape (",
                    H, "), got ", s.sizes());
  TORCH_CHECK_TYPE(s.scalar_type() == at::kFloat || s.scalar_type() == at::kDouble,
                   "drope.attention: alibi_slopes must be float32 or float64, got ", s.scalar_type());
  TORCH_CHECK_VALUE(s.device() == q.device(), "drope.attention: alibi_slopes is on ", s.device(), " but q is on ",
                    q.device());
}

// The ops layer's parameters: the temperature multiplies the logit scale, as in the model's position context.
ops::AttentionParams params(const at::Tensor& q, const Options& o) {
  ops::AttentionParams p;
  p.causal = o.causal;
  p.window = o.window;
  p.q_offset = o.q_offset;
  p.scale = o.temperature * (o.scale > 0 ? o.scale : 1.0 / std::sqrt(double(q.size(3))));
  if (o.alibi_slopes) p.alibi_slopes = o.alibi_slopes->detach();
  return p;
}

// Whether the fused kernels take q's dtype and device (ops::fused_attention's contract); else the reference runs.
bool fused_takes(const at::Tensor& q) {
  const auto dt = q.scalar_type();
  if (q.is_cpu()) return dt == at::kFloat || dt == at::kBFloat16 || dt == at::kDouble;
#ifdef DROPE_WITH_CUDA
  if (q.is_cuda()) return (dt == at::kBFloat16 || dt == at::kHalf) && kernels::cuda::cuda_head_dim_supported(q.size(3));
#endif
  return false;
}

// The reference's gradients from its probabilities P (B, H, T, S): dV = Pᵀ dO, dS = P ∘ (dO Vᵀ − rowsum(P ∘ dO Vᵀ)),
// dQ = scale · dS K, dK = scale · dSᵀ Q. The G = H / H_kv query heads of a kv head are viewed as one (B, H_kv, G·T, ·)
// block, so the products with k and v sum over each group.
Grads reference_backward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& dout,
                         const ops::AttentionParams& p) {
  at::NoGradGuard no_grad;
  const int64_t B = q.size(0), H = q.size(1), Hkv = k.size(1), T = q.size(2), S = k.size(2), D = q.size(3);
  const auto cdt = q.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  const auto grouped = [&](const at::Tensor& t, int64_t cols) {
    return t.to(cdt).reshape({B, Hkv, (H / Hkv) * T, cols});
  };
  const auto P = grouped(ops::reference_attention_probs(q, k, p), S);  // (B, H_kv, G·T, S)
  const auto dO = grouped(dout, D), qg = grouped(q, D);                // (B, H_kv, G·T, D)
  const auto kc = k.to(cdt), vc = v.to(cdt);                           // (B, H_kv, S, D)
  const auto dP = at::matmul(dO, vc.transpose(-2, -1));                // (B, H_kv, G·T, S)
  const auto dS = P * (dP - (P * dP).sum(-1, /*keepdim=*/true));
  auto dq = (at::matmul(dS, kc) * p.scale).view({B, H, T, D});
  auto dk = at::matmul(dS.transpose(-2, -1), qg) * p.scale;  // (B, H_kv, S, D)
  auto dv = at::matmul(P.transpose(-2, -1), dO);
  return {dq.to(q.scalar_type()), dk.to(k.scalar_type()), dv.to(v.scalar_type())};
}

std::tuple<at::Tensor, at::Tensor> attention_fwd(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                                 bool causal, int64_t window,
                                                 const std::optional<at::Tensor>& alibi_slopes, double scale,
                                                 int64_t q_offset, double temperature) {
  const Options o{causal, window, alibi_slopes, scale, q_offset, temperature};
  check_tensors(q, k, v);
  check_options(q, k, o);
  const at::OptionalDeviceGuard device(at::device_of(q));
  if (q.numel() == 0)
    return {at::empty(q.sizes(), q.options()),
            at::empty({q.size(0), q.size(1), q.size(2)}, q.options().dtype(at::kFloat))};
  const auto p = params(q, o);
  at::NoGradGuard no_grad;
  auto res = fused_takes(q) ? ops::fused_attention(q, k, v, p) : ops::reference_attention(q, k, v, p);
  return {res.out.contiguous(), res.lse.to(at::kFloat).contiguous()};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> attention_bwd(const at::Tensor& dout, const at::Tensor& q,
                                                             const at::Tensor& k, const at::Tensor& v,
                                                             const at::Tensor& out, const at::Tensor& lse, bool causal,
                                                             int64_t window,
                                                             const std::optional<at::Tensor>& alibi_slopes,
                                                             double scale, int64_t q_offset, double temperature) {
  const Options o{causal, window, alibi_slopes, scale, q_offset, temperature};
  check_tensors(q, k, v);
  check_options(q, k, o);
  const at::OptionalDeviceGuard device(at::device_of(q));
  TORCH_CHECK_VALUE(dout.sizes() == q.sizes() && out.sizes() == q.sizes(), "drope.attention_bwd: dout ", dout.sizes(),
                    " and out ", out.sizes(), " must have q's shape ", q.sizes());
  TORCH_CHECK_VALUE(lse.dim() == 3 && lse.sizes() == q.sizes().slice(0, 3),
                    "drope.attention_bwd: lse must be (B, H, T) = ", q.sizes().slice(0, 3), ", got ", lse.sizes());
  TORCH_CHECK_TYPE(
      float_dtype(dout.scalar_type()) && out.scalar_type() == q.scalar_type() && lse.scalar_type() == at::kFloat,
      "drope.attention_bwd: dout must be floating point, out of q's dtype and lse float32 (attention_fwd's "
      "outputs), got ",
      dout.scalar_type(), ", ", out.scalar_type(), ", ", lse.scalar_type());
  TORCH_CHECK_VALUE(dout.device() == q.device() && out.device() == q.device() && lse.device() == q.device(),
                    "drope.attention_bwd: dout, out and lse must be on q's device ", q.device());
  if (q.numel() == 0) return {at::zeros_like(q), at::zeros_like(k), at::zeros_like(v)};
  const auto p = params(q, o);
  const at::Tensor d = dout.to(q.scalar_type());
  // float64 is the dtype of gradcheck and references: its gradients come from float64 probabilities, not from the
  // float32 log-sum-exp the fused backward would read (2e-7 off in float64).
  if (!fused_takes(q) || q.scalar_type() == at::kDouble) return reference_backward(q, k, v, d, p);
  auto g = ops::fused_attention_backward(q, k, v, out, lse, d, p);
  return {g.dq.contiguous(), g.dk.contiguous(), g.dv.contiguous()};
}

// drope::attention: the output of drope::attention_fwd, through the dispatcher so that attention_fwd's autograd
// and fake implementations apply.
at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal, int64_t window,
                     const std::optional<at::Tensor>& alibi_slopes, double scale, int64_t q_offset,
                     double temperature) {
  static const auto op =
      c10::Dispatcher::singleton().findSchemaOrThrow("drope::attention_fwd", "").typed<decltype(attention_fwd)>();
  return std::get<0>(op.call(q, k, v, causal, window, alibi_slopes, scale, q_offset, temperature));
}

}  // namespace

}  // namespace drope::python_ext

namespace ext = drope::python_ext;

TORCH_LIBRARY(drope, m) {
  m.set_python_module("drope._ops");  // where the fake implementations and the autograd formula live
  m.def("attention_fwd(Tensor q, Tensor k, Tensor v, bool causal=True, int window=0, Tensor? alibi_slopes=None, "
        "float scale=0.0, int q_offset=-1, float temperature=1.0) -> (Tensor out, Tensor lse)");
  m.def("attention_bwd(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, bool causal, int window, "
        "Tensor? alibi_slopes, float scale, int q_offset, float temperature) -> (Tensor dq, Tensor dk, Tensor dv)");
  m.def("attention(Tensor q, Tensor k, Tensor v, bool causal=True, int window=0, Tensor? alibi_slopes=None, "
        "float scale=0.0, int q_offset=-1, float temperature=1.0) -> Tensor",
        &ext::attention);
}

TORCH_LIBRARY_IMPL(drope, CPU, m) {
  m.impl("attention_fwd", &ext::attention_fwd);
  m.impl("attention_bwd", &ext::attention_bwd);
}

#ifdef DROPE_WITH_CUDA
TORCH_LIBRARY_IMPL(drope, CUDA, m) {
  m.impl("attention_fwd", &ext::attention_fwd);
  m.impl("attention_bwd", &ext::attention_bwd);
}
#endif
