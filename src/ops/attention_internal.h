// Internals of the attention op shared by its translation units (attention.cpp, fused_attention.cpp,
// fused_attention_cuda.cpp): the unchecked paths that run after the public entry point validated the call
// once, and the one place where a call becomes the kernels' raw parameters.
#pragma once

#include <cmath>

#include <ATen/ATen.h>

#include "drope/kernels/attention_math.h"
#include "drope/ops/attention.h"

namespace drope::ops::detail {

// reference_attention / fused_attention_autograd for a call check_attention_shapes accepted.
AttentionOutput reference_attention_unchecked(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                              const AttentionParams& p);
at::Tensor fused_attention_autograd_unchecked(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                              const AttentionParams& p);
// CUDA calls of a CUDA build: runs the backend the plan picks (attention_plan.h) into *out and returns true,
// or returns false when the reference should run.
bool cuda_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const AttentionParams& p,
                    at::Tensor* out);

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
