// Flash-style fused attention on CPU: tiled online softmax, O(T·D) extra memory, threaded on LibTorch's
// OpenMP team. Raw pointers, sizes and strides only (the parameters of attention_math.h): the op layer
// (src/ops/fused_attention.cpp) checks shapes, builds the parameters once and allocates the outputs.
// float32 and bfloat16 inputs accumulate in float32 (acc_t = float), float64 in float64.
#pragma once

#include <cstdint>

#include "drope/kernels/attention_math.h"

namespace drope::kernels {

// Element type of q, k, v, out, dout, dq, dk, dv.
enum class CpuDType { kFloat32, kBFloat16, kFloat64 };

// One forward call: q (B, H, T, D) and out contiguous, with p.o_stride = p.q_stride; k/v (B, H_kv, S, D)
// with unit stride in D (KV-cache views are read in place). p.alibi_slopes: H host values or null.
// lse receives (B, H, T) contiguous log-sum-exps of the scaled, biased, masked logits.
template <typename acc_t>
struct CpuAttentionForwardArgs {
  AttnParams<acc_t> p;
  CpuDType dtype = CpuDType::kFloat32;
  const void *q = nullptr, *k = nullptr, *v = nullptr;
  void* out = nullptr;
  acc_t* lse = nullptr;
};

// How the backward splits its work over threads.
enum class BackwardSchedule {
  kAuto,       // kPerKVHead when the (batch, KV head) pairs keep every thread busy, else kTwoPass
  kPerKVHead,  // one sweep per (batch, KV head) pair computes its dK, dV and its query heads' dQ
  kTwoPass,    // dK/dV over (batch, KV head, key tile), then dQ over (batch, head, query tile)
};

// FlashAttention-2 backward from the forward's out and lse. Every tensor contiguous: q, out, dout, dq
// (B, H, T, D), k, v, dk, dv (B, H_kv, S, D), lse and the scratch rowdot (B, H, T).
template <typename acc_t>
struct CpuAttentionBackwardArgs {
  AttnParams<acc_t> p;
  CpuDType dtype = CpuDType::kFloat32;
  BackwardSchedule schedule = BackwardSchedule::kAuto;
  const void *q = nullptr, *k = nullptr, *v = nullptr, *out = nullptr, *dout = nullptr;
  const acc_t* lse = nullptr;
  acc_t* rowdot = nullptr;
  void *dq = nullptr, *dk = nullptr, *dv = nullptr;
};

// dtype kFloat32 or kBFloat16 with float accumulation; kFloat64 with double. Other pairings throw
// std::invalid_argument.
void attention_forward_cpu(const CpuAttentionForwardArgs<float>& a);
void attention_forward_cpu(const CpuAttentionForwardArgs<double>& a);
void attention_backward_cpu(const CpuAttentionBackwardArgs<float>& a);
void attention_backward_cpu(const CpuAttentionBackwardArgs<double>& a);

}  // namespace drope::kernels
