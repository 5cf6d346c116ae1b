// The decoder's memory-bound layers as differentiable ops: fused CPU kernels (drope/kernels/layers_cpu.h)
// with their own backward where the inputs allow, otherwise the same math in plain ATen ops (CUDA,
// bfloat16, per-row rotary tables). Both paths compute the same function; tests compare them.
#pragma once

#include <initializer_list>
#include <vector>

#include <ATen/ATen.h>

namespace drope::ops {

// RMSNorm over the last dim, computed in float32 (float64 for float64 inputs): w · x · (mean(x²) + eps)^-½.
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps);

// RoPE with rotate_half pairing (HF Llama): x·cos + rotate_half(x)·sin. x (B, H, T, D); cos/sin (T, D),
// or per row (B, 1, T, D) (plain-ATen path).
at::Tensor rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

// x (…, K) · weightᵀ (+ bias): weight (N, K), bias (N) or undefined → (…, N). float32 on a non-Intel CPU
// runs forward and backward GEMMs on oneDNN (LibTorch's mkldnn::_linear_pointwise, which picks the widest
// ISA of the machine; MKL's sgemm takes AVX2 paths on AMD CPUs); on Intel CPUs, and for everything else
// (CUDA, bfloat16, autocast, float64), it is torch::linear (MKL on Intel is faster than oneDNN; numbers in
// docs/benchmarks.md#defaults-chosen-by-measurement). DROPE_ONEDNN_LINEAR=1 / 0 forces oneDNN on / off.
at::Tensor linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias = {});

// The projections of one input by several weights, as separate linear() calls would give them: x (…, K),
// weights (O_i, K), biases none or one per weight (each may be undefined) → one (…, O_i) per weight. On the
// CPU in float32/float64 without autocast, several weights are one GEMM over the weights stacked by rows (and
// two in the backward), and the outputs are views of one (…, ΣO_i) tensor, which makes the q/k/v projections'
// fwd+bwd faster (docs/benchmarks.md). Otherwise, separate linear() calls.
std::vector<at::Tensor> linear_split(const at::Tensor& x, at::TensorList weights, at::TensorList biases = {});

// The SwiGLU MLP's hidden activation silu(x·gateᵀ + b_g) · (x·upᵀ + b_u), biases possibly undefined. On the
// CPU in float32/float64 without autocast: one GEMM over the stacked gate and up weights, then one fused pass
// (drope/kernels/layers_cpu.h), forward and backward; otherwise linear() and ATen's silu.
at::Tensor swiglu(const at::Tensor& x, const at::Tensor& gate_weight, const at::Tensor& gate_bias,
                  const at::Tensor& up_weight, const at::Tensor& up_bias);

// a (M, K) · b (N, K)ᵀ without autograd, on the same GEMM linear() would use.
at::Tensor matmul_nt(const at::Tensor& a, const at::Tensor& b);

// Whether LibTorch's oneDNN linear op is registered in this process (linear() may use it).
bool onednn_linear_available();

// The process default for oneDNN GEMMs given DROPE_ONEDNN_LINEAR's value (nullptr when unset; "1" / "0" force
// it) and the CPU vendor: on except on Intel CPUs.
bool onednn_linear_default(const char* env, bool intel_cpu);

// Whether linear() and matmul_nt() choose oneDNN on this thread (ForceOneDnnLinear, else the process default,
// read from DROPE_ONEDNN_LINEAR once: a bad value is refused). The tools call it at start-up.
bool onednn_linear_enabled();

// While alive, linear() and matmul_nt() on this thread use oneDNN (on) or LibTorch's GEMM (off) whatever the
// process default (for tests and comparisons).
class ForceOneDnnLinear {
 public:
  explicit ForceOneDnnLinear(bool on);
  ~ForceOneDnnLinear();
  ForceOneDnnLinear(const ForceOneDnnLinear&) = delete;
  ForceOneDnnLinear& operator=(const ForceOneDnnLinear&) = delete;

 private:
  int previous_;
};

// While alive, the ops above take their plain-ATen path on this thread (for comparisons).
// Whether the fused CPU layer kernels take these tensors: CPU, float32 or float64, all of one dtype.
bool layers_cpu_supported(std::initializer_list<at::Tensor> tensors);

class ForceCompositeLayers {
 public:
  ForceCompositeLayers();
  ~ForceCompositeLayers();
  ForceCompositeLayers(const ForceCompositeLayers&) = delete;
  ForceCompositeLayers& operator=(const ForceCompositeLayers&) = delete;

 private:
  bool previous_;
};

}  // namespace drope::ops
