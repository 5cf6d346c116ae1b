// CUDA kernels of the fused attention op: forward (online softmax over the causal/window band), the
// FlashAttention-2 backward and a split-KV decode forward. Raw device pointers, element strides and a
// cudaStream_t only (no torch types), so the .cu files compile without ATen; the torch glue lives in
// src/ops/attention_own_cuda.cpp. Tile math (visibility, bands, logits, online softmax) comes from
// attention_math.h, the header the CPU kernel and its tests share.
#pragma once

#include <stdint.h>

#include <stdexcept>
#include <string>

#include <cuda_runtime.h>

#include "drope/kernels/attention_math.h"

namespace drope::kernels::cuda {

// kFloat16 or kBFloat16 inputs; p.alibi_slopes a DEVICE pointer; lse, rowdot, dq_accum float32.
using DType = AttnDType;
using ForwardArgs = AttnForwardArgs<float>;
using BackwardArgs = AttnBackwardArgs<float>;

// Split-KV decode: every query row's visible keys are cut into num_splits chunks, one CTA each; a second
// kernel combines the partial (max, sum, accumulator) triples.
struct DecodeArgs : ForwardArgs {
  int num_splits = 1;
  float* part_m = nullptr;    // scratch (B·H·T, num_splits)
  float* part_l = nullptr;    // scratch (B·H·T, num_splits)
  float* part_acc = nullptr;  // scratch (B·H·T, num_splits, D)
};

// Head dims the kernels are compiled for.
inline bool cuda_head_dim_supported(int64_t d) { return d == 64 || d == 128; }

// Suggested number of key chunks for the decode kernel.
inline int decode_num_splits(int64_t kv_len) {
  const int64_t s = (kv_len + 511) / 512;
  return int(s < 1 ? 1 : (s > 64 ? 64 : s));
}

void attention_forward_cuda(const ForwardArgs& a, cudaStream_t stream);
void attention_backward_cuda(const BackwardArgs& a, cudaStream_t stream);
void attention_decode_cuda(const DecodeArgs& a, cudaStream_t stream);

namespace detail {

// Throws std::runtime_error naming the file, kernel and CUDA error when the last launch failed.
inline void check_launch(const char* file, int line, const char* kernel) {
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess)
    throw std::runtime_error(std::string(file) + ":" + std::to_string(line) + ": CUDA kernel " + kernel +
                             " failed to launch: " + cudaGetErrorString(err));
}

inline void check_call(cudaError_t err, const char* file, int line, const char* what) {
  if (err != cudaSuccess)
    throw std::runtime_error(std::string(file) + ":" + std::to_string(line) + ": " + what + ": " +
                             cudaGetErrorString(err));
}

}  // namespace detail

}  // namespace drope::kernels::cuda

#ifdef __CUDACC__
#include <cuda_bf16.h>
#include <cuda_fp16.h>

// Device helpers shared by the .cu files.
namespace drope::kernels::cuda::dev {

__device__ __forceinline__ float to_f(float x) { return x; }
__device__ __forceinline__ float to_f(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_f(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T>
__device__ __forceinline__ T from_f(float x);
template <>
__device__ __forceinline__ float from_f<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __half from_f<__half>(float x) {
  return __float2half_rn(x);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

}  // namespace drope::kernels::cuda::dev
#endif  // __CUDACC__

#define DROPE_CUDA_CHECK_LAUNCH(name) ::drope::kernels::cuda::detail::check_launch(__FILE__, __LINE__, name)
#define DROPE_CUDA_CHECK(call) ::drope::kernels::cuda::detail::check_call((call), __FILE__, __LINE__, #call)
