// Fused CPU kernels for the decoder's memory-bound layers: RMSNorm, rotary embedding and SwiGLU, forward and
// backward, one pass over the data each (ATen's composite versions take 2–10 passes), threaded on
// LibTorch's OpenMP team. float32 and float64, raw contiguous buffers; the autograd wrappers, checks and
// allocation live in drope/ops/layers.h.
#pragma once

#include <cstdint>

namespace drope::kernels {

// RMSNorm over rows of n: y = w · x · rstd, rstd = (mean(x²) + eps)^-½ (one per row).
template <typename T>
struct RmsNormForwardArgs {
  const T* x = nullptr;  // (rows, n)
  const T* w = nullptr;  // (n)
  T* y = nullptr;        // (rows, n)
  T* rstd = nullptr;     // (rows)
  int64_t rows = 0, n = 0;
  double eps = 0;
};

// Gradients from the forward's x and rstd: dx (rows, n), and dweight accumulated into dw_parts, one
// zeroed row of n per thread (dw_rows >= the intra-op thread count); the caller sums the rows.
template <typename T>
struct RmsNormBackwardArgs {
  const T *dy = nullptr, *x = nullptr, *w = nullptr, *rstd = nullptr;
  T* dx = nullptr;
  T* dw_parts = nullptr;
  int64_t dw_rows = 0;
  int64_t rows = 0, n = 0;
};

// Rotary embedding, rotate_half pairing: x (B, H, T, D) with strides xs (B, H, T; D contiguous), cos/sin
// (T, D) contiguous → y contiguous (B, H, T, D), y = x·cos + rotate_half(x)·sin. inverse applies the
// transpose (the backward: dx = dy·cos + rotate_half^T(dy)·sin). D is even.
template <typename T>
struct RotaryArgs {
  const T* x = nullptr;
  T* y = nullptr;
  const T *cos = nullptr, *sin = nullptr;
  int64_t batch = 0, heads = 0, len = 0, dim = 0;
  int64_t xs[3] = {0, 0, 0};
  bool inverse = false;
};

// SwiGLU of the gate and up projections stacked side by side, gu (rows, 2n) = [g | u]: with dh null,
// out (rows, n) = silu(g)·u; with dh (rows, n), out (rows, 2n) = the gradient [dh·u·silu'(g) | dh·silu(g)].
// silu(g) = g·σ(g); exp is a ~1-ulp polynomial in float32 and libm's in float64.
template <typename T>
struct SwiGluArgs {
  const T* gu = nullptr;
  const T* dh = nullptr;
  T* out = nullptr;
  int64_t rows = 0, n = 0;
};

// Softmax cross-entropy of logit rows, in place: x (rows, n) contiguous, labels (rows) in [0, n) or
// ignore_index. Per row, loss[r] = lse − x[label] (0 for an ignored row), lse = log Σ_j exp x_j. With grad, x
// becomes the gradient of scale · Σ_r loss[r] in the logits: (softmax(x) − onehot(label)) · scale, 0 on ignored
// rows. A row is read once from memory (max), then from cache (exp and sum, stored in place; the scaling).
template <typename T>
struct SoftmaxXentArgs {
  T* x = nullptr;
  const int64_t* labels = nullptr;
  T* loss = nullptr;  // (rows)
  int64_t rows = 0, n = 0;
  int64_t ignore_index = -100;
  double scale = 1.0;
  bool grad = false;
};

// bf16 rows (raw bit patterns) through a float32 row buffer that stays in cache: each row converted in, the float32
// kernel above, the result rounded back to bf16 (nearest even). SwiGLU: gu, dh and out in bf16. Softmax
// cross-entropy: x in bf16 (the gradient written in place in bf16), the losses float32.
struct SwiGluBf16Args {
  const uint16_t* gu = nullptr;
  const uint16_t* dh = nullptr;
  uint16_t* out = nullptr;
  int64_t rows = 0, n = 0;
};
struct SoftmaxXentBf16Args {
  uint16_t* x = nullptr;
  const int64_t* labels = nullptr;
  float* loss = nullptr;  // (rows)
  int64_t rows = 0, n = 0;
  int64_t ignore_index = -100;
  double scale = 1.0;
  bool grad = false;
};
void swiglu_bf16_cpu(const SwiGluBf16Args& a);
void softmax_xent_bf16_cpu(const SoftmaxXentBf16Args& a);

void rms_norm_forward_cpu(const RmsNormForwardArgs<float>& a);
void rms_norm_forward_cpu(const RmsNormForwardArgs<double>& a);
void rms_norm_backward_cpu(const RmsNormBackwardArgs<float>& a);
void rms_norm_backward_cpu(const RmsNormBackwardArgs<double>& a);
void rotary_cpu(const RotaryArgs<float>& a);
void rotary_cpu(const RotaryArgs<double>& a);
void swiglu_cpu(const SwiGluArgs<float>& a);
void swiglu_cpu(const SwiGluArgs<double>& a);
void softmax_xent_cpu(const SoftmaxXentArgs<float>& a);
void softmax_xent_cpu(const SoftmaxXentArgs<double>& a);

}  // namespace drope::kernels
