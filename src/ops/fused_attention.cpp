// The fused attention entry points (attention.h): a fused kernel's forward without autograd, its gradients and
// its backward, each on the backend the registry picks (CUDA) or our CPU kernel (CPU).
#include "attention_common.h"
#include "attention_internal.h"
#include "drope/ops/attention.h"
#ifdef DROPE_WITH_CUDA
#include "cuda_glue.h"
#endif

namespace drope::ops {

namespace {

// Whether our CUDA kernels take these inputs (always false without them).
bool cuda_supported(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
#ifdef DROPE_WITH_CUDA
  return cuda_glue::supported(q, k, v);
#else
  (void)q, (void)k, (void)v;
  return false;
#endif
}

void check_fused_supported(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const char* who) {
  TORCH_CHECK(backends::cpu_fused_supported(q, k, v) || cuda_supported(q, k, v), who,
              ": needs CPU tensors of one dtype among "
              "float32, bfloat16 and float64, or CUDA bfloat16/float16 with head dim 64 or 128; got ",
              q.scalar_type(), "/", k.scalar_type(), "/", v.scalar_type(), " on ", q.device());
}

}  // namespace

AttentionOutput fused_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                const AttentionParams& p) {
  check_attention_shapes(q, k, v, p);
  check_fused_supported(q, k, v, "fused_attention");
  at::NoGradGuard no_grad;
  if (q.is_cuda()) {
    const auto plan = detail::plan_call(q, k, v, p, /*training=*/false, /*reference_force=*/false);
    const AttnBackendDef& d = attn_backend_def(plan.backend);
    if (d.backward) {  // a fused kernel with a log-sum-exp (SDPA has none)
      auto f = d.forward(plan, q, k, v, p, backends::aten_ops());
      return {f.out, f.lse.to(at::kFloat)};
    }
    return detail::reference_attention_unchecked(q, k, v, p);
  }
  auto res = backends::cpu_fused_forward(q, k, v, p);
  return {res.out, res.lse.to(at::kFloat)};
}

AttentionGrads fused_attention_grads(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                     const at::Tensor& dout, const AttentionParams& p,
                                     kernels::BackwardSchedule schedule) {
  check_attention_shapes(q, k, v, p);
  TORCH_CHECK(backends::cpu_fused_supported(q, k, v),
              "fused_attention_grads: needs CPU tensors of one dtype among float32, "
              "bfloat16 and float64; got ",
              q.scalar_type(), " on ", q.device());
  TORCH_CHECK(dout.sizes() == q.sizes(), "fused_attention_grads: dout ", dout.sizes(), " must match q ", q.sizes());
  at::NoGradGuard no_grad;
  const auto fwd = backends::cpu_fused_forward(q, k, v, p);
  return backends::cpu_fused_backward(q, k, v, fwd.out, fwd.lse, dout, p, schedule);
}

AttentionGrads fused_attention_backward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                        const at::Tensor& out, const at::Tensor& lse, const at::Tensor& dout,
                                        const AttentionParams& p) {
  check_attention_shapes(q, k, v, p);
  check_fused_supported(q, k, v, "fused_attention_backward");
  TORCH_CHECK(out.sizes() == q.sizes() && dout.sizes() == q.sizes(), "fused_attention_backward: out ", out.sizes(),
              " and dout ", dout.sizes(), " must match q ", q.sizes());
  TORCH_CHECK(lse.dim() == 3 && lse.sizes() == q.sizes().slice(0, 3), "fused_attention_backward: lse ", lse.sizes(),
              " must be (B, H, T) of q ", q.sizes());
  at::NoGradGuard no_grad;
#ifdef DROPE_WITH_CUDA
  if (q.is_cuda()) {
    auto [dq, dk, dv] = cuda_glue::backward(q, k, v, out, lse, dout, p);
    return {dq, dk, dv};
  }
#endif
  return backends::cpu_fused_backward(q, k, v, out, lse, dout, p);
}

at::Tensor fused_attention_autograd(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                    const AttentionParams& p) {
  check_attention_shapes(q, k, v, p);
  check_fused_supported(q, k, v, "fused_attention_autograd");
  AttnPlan plan;
  plan.backend = q.is_cuda() ? AttnBackend::kOwnCuda : AttnBackend::kCpuFused;
  plan.reason = "fused_attention_autograd";
  return run_attention(plan, q, k, v, p);
}

}  // namespace drope::ops
