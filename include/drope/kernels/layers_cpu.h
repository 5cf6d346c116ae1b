// Fused CPU kernels for the decoder's memory-bound layers: RMSNorm, rotary embedding and SwiGLU, forward
// and backward, one pass over the data each (ATen's composite versions take 3–10 passes), threaded on
// LibTorch's OpenMP team. float32 and float64 (accumulation in the input dtype for float64, float32
// otherwise). The autograd wrappers live in drope/ops/layers.h.
#pragma once

#include <tuple>

#include <ATen/ATen.h>

namespace drope::kernels {

// Whether the kernels below take these tensors: CPU, float32 or float64, all of one dtype.
bool layers_cpu_supported(std::initializer_list<at::Tensor> tensors);

// RMSNorm over the last dim of x (…, N) with weight (N): y = w · x · rstd, rstd = (mean(x²) + eps)^-½.
// Returns y and rstd (one per row, x's dtype).
std::tuple<at::Tensor, at::Tensor> rms_norm_forward_cpu(const at::Tensor& x, const at::Tensor& weight, double eps);
// Gradients (dx, dweight) from the forward's x and rstd.
std::tuple<at::Tensor, at::Tensor> rms_norm_backward_cpu(const at::Tensor& dy, const at::Tensor& x,
                                                         const at::Tensor& weight, const at::Tensor& rstd);

// Rotary embedding, rotate_half pairing: x (B, H, T, D) (any strides), cos/sin (T, D) contiguous →
// y = x·cos + rotate_half(x)·sin, contiguous (B, H, T, D). inverse = true applies the transpose
// (the backward: dx = dy·cos + rotate_half^T(dy)·sin).
at::Tensor rotary_cpu(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, bool inverse);

// SwiGLU: h = silu(gate) · up (same shapes, contiguous). Backward returns (dgate, dup).
at::Tensor swiglu_forward_cpu(const at::Tensor& gate, const at::Tensor& up);
std::tuple<at::Tensor, at::Tensor> swiglu_backward_cpu(const at::Tensor& dh, const at::Tensor& gate,
                                                       const at::Tensor& up);

}  // namespace drope::kernels
