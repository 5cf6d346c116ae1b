// Torch glue of our CUDA fused attention kernels (src/ops/attention_own_cuda.cpp; only with
// DROPE_WITH_CUDA): allocation, parameters and launches on the current stream. The plan
// (attention_plan.h) routes a CUDA call here only when no LibTorch kernel takes it (backend own_cuda). Callers
// validated the call with check_attention_shapes and supported().
#pragma once

#include <tuple>

#include <ATen/ATen.h>

#include "drope/ops/attention.h"

namespace drope::ops::cuda_glue {

// Compute capability × 10 of q's device (80: A100, 90: H100).
int device_sm(const at::Tensor& q);

// CUDA tensors on one device, one dtype among bfloat16 and float16, head dim 64 or 128.
bool supported(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v);

// out (B, H, T, D) in the input dtype, lse (B, H, T) float32; T = 1 runs the split-KV decode kernel.
AttentionOutput forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const AttentionParams& p);

// FlashAttention-2 backward from the forward's out and lse: dq, dk, dv in the input dtype.
std::tuple<at::Tensor, at::Tensor, at::Tensor> backward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                                        const at::Tensor& out, const at::Tensor& lse,
                                                        const at::Tensor& dout, const AttentionParams& p);

}  // namespace drope::ops::cuda_glue
