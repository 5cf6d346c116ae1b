// Internals of the attention op shared by its translation units (attention.cpp, attention_dispatch.cpp,
// fused_attention.cpp, the backends' attention_<backend>.cpp): the unchecked paths that run after the public
// entry point validated the call once, and the one place where a call becomes the kernels' raw parameters.
#pragma once

#include <cmath>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include "drope/kernels/attention_math.h"
#include "drope/ops/attention.h"

namespace drope::ops::detail {

// reference_attention for a call check_attention_shapes accepted.
AttentionOutput reference_attention_unchecked(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                              const AttentionParams& p);

// Whether a backward will follow (autograd records the call).
inline bool needs_grad(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  return at::GradMode::is_enabled() && (q.requires_grad() || k.requires_grad() || v.requires_grad());
}

// ops::attention_plan for a validated call; reference_force: a ForceReferenceAttention alive on this thread
// picks the reference (attention() and uses_fused_attention(); fused_attention() and cuda_attention_plan()
// follow the forced backend only).
AttnPlan plan_call(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const AttentionParams& p,
                   bool training, bool reference_force);

// The kernels' parameters of a validated call: q (B, H, T, D) and out share q's strides; k/v (B, H_kv, S, D);
// each with unit stride in D. slopes: H values of acc_t on the kernel's device, or null.
template <typename acc_t>
kernels::AttnParams<acc_t> kernel_params(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                         const AttentionParams& a, const acc_t* slopes) {
  kernels::AttnParams<acc_t> p;
  p.batch = q.size(0);
  p.heads = q.size(1);
  p.kv_heads = k.size(1);
  p.q_len = q.size(2);
  p.kv_len = k.size(2);
  p.head_dim = q.size(3);
  for (int d = 0; d < 3; ++d) {
    p.q_stride[d] = p.o_stride[d] = q.stride(d);
    p.k_stride[d] = k.stride(d);
    p.v_stride[d] = v.stride(d);
  }
  p.q_offset = a.q_offset < 0 ? p.kv_len - p.q_len : a.q_offset;
  p.window = a.window;
  p.causal = a.causal;
  p.scale = acc_t(a.scale > 0 ? a.scale : 1.0 / std::sqrt(double(p.head_dim)));
  p.alibi_slopes = slopes;
  return p;
}

// The call's ALiBi slopes as a contiguous tensor of `dtype` on `device` (undefined when there are none);
// the caller keeps it alive while the kernel runs.
inline at::Tensor kernel_slopes(const AttentionParams& a, at::Device device, at::ScalarType dtype) {
  if (!a.alibi_slopes.defined()) return {};
  return a.alibi_slopes.detach().to(device, dtype).contiguous();
}

}  // namespace drope::ops::detail
