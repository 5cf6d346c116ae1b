// Flash-style fused attention on CPU: tiled online softmax, O(T·D) extra memory, threaded with
// at::parallel_for. float32 and bfloat16 inputs accumulate in float32, float64 in float64.
#pragma once

#include <ATen/ATen.h>

#include "drope/ops/attention.h"

namespace drope::kernels {

struct CpuAttentionForward {
  at::Tensor out;  // (B, H, T, D), dtype of q
  at::Tensor lse;  // (B, H, T), float64 for float64 inputs, else float32
};

struct CpuAttentionGrads {
  at::Tensor dq;  // (B, H, T, D)
  at::Tensor dk;  // (B, H_kv, S, D)
  at::Tensor dv;  // (B, H_kv, S, D)
};

// Whether the CPU kernel handles these inputs (CPU tensors of one dtype among float32/bfloat16/float64).
bool attention_cpu_supported(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v);

// Forward of q (B, H, T, D), k/v (B, H_kv, S, D); shapes must already be validated.
CpuAttentionForward attention_forward_cpu(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                          const ops::AttentionParams& p);

// How the backward splits its work over threads.
enum class BackwardSchedule {
  kAuto,       // kPerKVHead when the (batch, KV head) pairs keep every thread busy, else kTwoPass
  kPerKVHead,  // one sweep per (batch, KV head) pair computes its dK, dV and its query heads' dQ
  kTwoPass,    // dK/dV over (batch, KV head, key tile), then dQ over (batch, head, query tile)
};

// FlashAttention-2 backward from the forward's out and lse (as returned by attention_forward_cpu).
CpuAttentionGrads attention_backward_cpu(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                         const at::Tensor& out, const at::Tensor& lse, const at::Tensor& dout,
                                         const ops::AttentionParams& p,
                                         BackwardSchedule schedule = BackwardSchedule::kAuto);

}  // namespace drope::kernels
