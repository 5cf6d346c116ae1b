// bf16 compute copies of float32 weights, for training in bf16 on CPUs whose GEMMs multiply bf16 on matrix tiles
// (AMX): the float32 weights stay the masters (optimizer, checkpoints, gradients); each weight, or each stack of
// weights that one GEMM reads (q/k/v, gate/up), has one bf16 copy made on first use and refreshed once per optimizer
// step, not cast per op. While installed and CPU autocast to bf16 is on, ops::linear, linear_split and swiglu run
// their GEMMs on the copies (bf16 activations in, bf16 out, float32 accumulation inside the GEMM) and return the
// weights' gradients in float32 to the masters.
#pragma once

#include <map>
#include <mutex>
#include <vector>

#include <ATen/ATen.h>

namespace drope::ops {

class ComputeWeights {
 public:
  // The bf16 copy of `masters` (float32, (O_i, K) each) stacked by rows, (ΣO_i, K); made on first use.
  at::Tensor get(at::TensorList masters);
  // Copies every master into its bf16 copy (after the optimizer changed the weights).
  void refresh();
  // Bytes held by the copies.
  int64_t bytes() const;

 private:
  struct Entry {
    std::vector<at::Tensor> masters;
    at::Tensor copy;
  };
  std::map<std::vector<const void*>, Entry> entries_;
  mutable std::mutex mutex_;
};

// Installs `w` for the ops (nullptr: none); returns what was installed before. The owner (the optimizer that
// refreshes it) uninstalls it before it goes.
ComputeWeights* install_compute_weights(ComputeWeights* w);

// The installed copies when x and the weights take them now: CPU autocast to bf16 on, x on the CPU in float32 or
// bf16, the weights float32 CPU matrices of x's width; else nullptr.
ComputeWeights* compute_weights_for(const at::Tensor& x, at::TensorList weights);

// x (…, K) · [w_0; w_1; …]ᵀ (+ biases) on the bf16 copy of the stacked weights: (…, ΣO_i) in bf16. Gradients:
// x's in x's dtype, the masters' in float32.
at::Tensor bf16_projection(ComputeWeights& cw, const at::Tensor& x, at::TensorList weights, at::TensorList biases);

// Whether this CPU multiplies bf16 matrices on AMX tiles as LibTorch runs now: oneDNN's instruction-set cap
// (ONEDNN_MAX_CPU_ISA) and drope's (DROPE_CPU_ISA below avx512) both leave AMX on.
bool cpu_bf16_tiles();

// Whether this CPU multiplies bf16 matrices with the AVX512-BF16 dot products as LibTorch runs now (oneDNN's
// AVX512_CORE_BF16 kernels: AMD Zen 4 and later, Intel Cooper Lake): the instructions are there and neither oneDNN's
// cap (ONEDNN_MAX_CPU_ISA below AVX512_CORE_BF16) nor drope's (DROPE_CPU_ISA below avx512) turns them off.
bool cpu_bf16_dot();

// Whether computing in bf16 is faster than float32 on this device: on a GPU, and on a CPU whose bf16 GEMMs run
// natively, on AMX tiles (cpu_bf16_tiles) or with AVX512-BF16 (cpu_bf16_dot; measured in docs/cpu-isa.md).
// Elsewhere LibTorch's bf16 GEMMs are emulated, many times slower than its float32 ones, and train.dtype bfloat16
// trains in float32 (said at start), unless DROPE_BF16_EMULATED=1 asks for bf16 anyway.
bool bf16_pays(c10::DeviceType device);
// DROPE_BF16_EMULATED=1: bf16 computes in bf16 even where its GEMMs are emulated (checks bf16 numerics anywhere).
bool bf16_emulation_forced();

}  // namespace drope::ops
