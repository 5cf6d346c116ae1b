// Fused CPU kernels for the decoder's memory-bound layers: RMSNorm and rotary embedding, forward and
// backward, one pass over the data each (ATen's composite versions take 3–10 passes), threaded on
// LibTorch's OpenMP team. float32 and float64. The autograd wrappers live in drope/ops/layers.h.
// (A fused SwiGLU was measured 3–4× slower than ATen's silu · up: its exp ran scalar, ATen's is
// vectorised, so the model keeps ATen's.)
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

}  // namespace drope::kernels
