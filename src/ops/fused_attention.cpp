#include <torch/autograd.h>

#include "drope/kernels/attention_cpu.h"
#include "drope/ops/attention.h"

namespace drope::ops {

namespace {

thread_local bool reference_forced = false;

// Differentiable fused attention: the CPU kernel's forward, and its FlashAttention-2 backward.
class FusedAttentionFunction : public torch::autograd::Function<FusedAttentionFunction> {
 public:
  // q (B, H, T, D), k/v (B, H_kv, S, D) → out (B, H, T, D).
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k,
                            const at::Tensor& v, const AttentionParams* p) {
    auto res = kernels::attention_forward_cpu(q, k, v, *p);
    ctx->save_for_backward({q, k, v, res.out, res.lse});
    ctx->saved_data["causal"] = p->causal;
    ctx->saved_data["window"] = p->window;
    ctx->saved_data["scale"] = p->scale;
    ctx->saved_data["q_offset"] = p->q_offset;
    ctx->saved_data["alibi_slopes"] = p->alibi_slopes.defined() ? p->alibi_slopes.detach() : at::Tensor();
    return res.out;
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
    auto g = kernels::attention_backward_cpu(q, k, v, out, lse, grads[0], p);
    return {g.dq, g.dk, g.dv, at::Tensor()};
  }
};

}  // namespace

AttentionOutput fused_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const AttentionParams& p) {
  check_attention_shapes(q, k, v, p);
  TORCH_CHECK(kernels::attention_cpu_supported(q, k, v), "fused_attention: needs CPU tensors of one dtype among "
              "float32, bfloat16 and float64; got ", q.scalar_type(), " on ", q.device());
  at::NoGradGuard no_grad;
  auto res = kernels::attention_forward_cpu(q, k, v, p);
  return {res.out, res.lse.to(at::kFloat)};
}

at::Tensor fused_attention_autograd(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                    const AttentionParams& p) {
  check_attention_shapes(q, k, v, p);
  TORCH_CHECK(kernels::attention_cpu_supported(q, k, v), "fused_attention_autograd: unsupported inputs (",
              q.scalar_type(), " on ", q.device(), ")");
  return FusedAttentionFunction::apply(q, k, v, &p);
}

bool uses_fused_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const AttentionParams& p) {
  if (reference_forced || !kernels::attention_cpu_supported(q, k, v)) return false;
  // Trainable slopes need the reference's autograd.
  return !(p.alibi_slopes.defined() && p.alibi_slopes.requires_grad());
}

ForceReferenceAttention::ForceReferenceAttention() : previous_(reference_forced) { reference_forced = true; }

ForceReferenceAttention::~ForceReferenceAttention() { reference_forced = previous_; }

}  // namespace drope::ops
