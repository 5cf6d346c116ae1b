#include <tuple>

#include <torch/autograd.h>

#include "drope/kernels/attention_cpu.h"
#include "drope/ops/attention.h"

namespace drope::ops {

#ifdef DROPE_WITH_CUDA
// CUDA kernels' torch glue (src/ops/fused_attention_cuda.cpp).
namespace cuda_glue {
bool supported(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v);
AttentionOutput forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const AttentionParams& p);
std::tuple<at::Tensor, at::Tensor, at::Tensor> backward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                                        const at::Tensor& out, const at::Tensor& lse,
                                                        const at::Tensor& dout, const AttentionParams& p);
}  // namespace cuda_glue
#endif

namespace {

// Whether the CUDA kernels take these inputs (always false without them).
bool cuda_supported(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
#ifdef DROPE_WITH_CUDA
  return cuda_glue::supported(q, k, v);
#else
  (void)q, (void)k, (void)v;
  return false;
#endif
}

thread_local bool reference_forced = false;

// Differentiable fused attention: the CPU (or, for CUDA tensors, the CUDA) kernel's forward, and its
// FlashAttention-2 backward.
class FusedAttentionFunction : public torch::autograd::Function<FusedAttentionFunction> {
 public:
  // q (B, H, T, D), k/v (B, H_kv, S, D) → out (B, H, T, D).
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k,
                            const at::Tensor& v, const AttentionParams* p) {
    at::Tensor out, lse;
#ifdef DROPE_WITH_CUDA
    if (q.is_cuda()) {
      auto res = cuda_glue::forward(q, k, v, *p);
      out = res.out, lse = res.lse;
    } else
#endif
    {
      auto res = kernels::attention_forward_cpu(q, k, v, *p);
      out = res.out, lse = res.lse;
    }
    ctx->save_for_backward({q, k, v, out, lse});
    ctx->saved_data["causal"] = p->causal;
    ctx->saved_data["window"] = p->window;
    ctx->saved_data["scale"] = p->scale;
    ctx->saved_data["q_offset"] = p->q_offset;
    ctx->saved_data["alibi_slopes"] = p->alibi_slopes.defined() ? p->alibi_slopes.detach() : at::Tensor();
    return out;
  }

  // dout (B, H, T, D) → dq, dk, dv (no gradient for the parameters).
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &q = saved[0], &k = saved[1], &v = saved[2], &out = saved[3], &lse = saved[4];
    AttentionParams p;
    p.causal = ctx->saved_data["causal"].toBool();
    p.window = ctx->saved_data["window"].toInt();
    p.scale = ctx->saved_data["scale"].toDouble();
    p.q_offset = ctx->saved_data["q_offset"].toInt();
    p.alibi_slopes = ctx->saved_data["alibi_slopes"].toTensor();
    if (!grads[0].defined()) return {at::zeros_like(q), at::zeros_like(k), at::zeros_like(v), at::Tensor()};
#ifdef DROPE_WITH_CUDA
    if (q.is_cuda()) {
      auto [dq, dk, dv] = cuda_glue::backward(q, k, v, out, lse, grads[0], p);
      return {dq, dk, dv, at::Tensor()};
    }
#endif
    auto g = kernels::attention_backward_cpu(q, k, v, out, lse, grads[0], p);
    return {g.dq, g.dk, g.dv, at::Tensor()};
  }
};

}  // namespace

AttentionOutput fused_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const AttentionParams& p) {
  check_attention_shapes(q, k, v, p);
#ifdef DROPE_WITH_CUDA
  if (cuda_supported(q, k, v)) {
    at::NoGradGuard no_grad;
    return cuda_glue::forward(q, k, v, p);
  }
#endif
  TORCH_CHECK(kernels::attention_cpu_supported(q, k, v), "fused_attention: needs CPU tensors of one dtype among "
              "float32, bfloat16 and float64; got ", q.scalar_type(), " on ", q.device());
  at::NoGradGuard no_grad;
  auto res = kernels::attention_forward_cpu(q, k, v, p);
  return {res.out, res.lse.to(at::kFloat)};
}

at::Tensor fused_attention_autograd(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                    const AttentionParams& p) {
  check_attention_shapes(q, k, v, p);
  TORCH_CHECK(kernels::attention_cpu_supported(q, k, v) || cuda_supported(q, k, v),
              "fused_attention_autograd: unsupported inputs (", q.scalar_type(), " on ", q.device(), ")");
  return FusedAttentionFunction::apply(q, k, v, &p);
}

bool uses_fused_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const AttentionParams& p) {
  if (reference_forced || !(kernels::attention_cpu_supported(q, k, v) || cuda_supported(q, k, v))) return false;
  if (p.key_start.defined()) return false;  // padding masks: the reference (batched decode, T = 1)
  // Trainable slopes need the reference's autograd.
  return !(p.alibi_slopes.defined() && p.alibi_slopes.requires_grad());
}

ForceReferenceAttention::ForceReferenceAttention() : previous_(reference_forced) { reference_forced = true; }

ForceReferenceAttention::~ForceReferenceAttention() { reference_forced = previous_; }

}  // namespace drope::ops
