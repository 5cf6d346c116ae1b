// The attention op shared by every positional variant: causal, GQA, ALiBi, sliding window, logit scale,
// query offset for KV-cache decoding.
#pragma once

#include <cstdint>

#include <ATen/ATen.h>

#include "drope/kernels/attention_cpu.h"
#include "drope/ops/attention_plan.h"

namespace drope::ops {

struct AttentionParams {
  bool causal = true;          // key j visible to query i only if j <= i (absolute positions)
  int64_t window = 0;          // > 0: key j visible only if j > i − window
  at::Tensor alibi_slopes;     // optional (H) float32: logit bias −slope_h · (i − j)
  double scale = 0.0;          // logit scale; 0 means 1/√D
  int64_t q_offset = -1;       // absolute position of the first query; −1 means S − T (queries end the keys)
  at::Tensor key_start;        // optional (B) int64: keys j < key_start[b] are masked (left-padded batches)
};

struct AttentionOutput {
  at::Tensor out;  // (B, H, T, D), dtype of q
  at::Tensor lse;  // (B, H, T) float32 log-sum-exp of the scaled, biased, masked logits
};

// Plain-ATen attention for q (B, H, T, D), k/v (B, H_kv, S, D). Materialises the (T, S) logits;
// computes in float32 (or float64 for float64 inputs). Differentiable through autograd.
AttentionOutput reference_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                    const AttentionParams& p);

// Probabilities (B, H, T, S) of the same computation, for analysis tools.
at::Tensor reference_attention_probs(const at::Tensor& q, const at::Tensor& k, const AttentionParams& p);

// The op the model calls. Validates shapes with clear messages.
at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const AttentionParams& p);

// Throws a clear error unless q (B, H, T, D), k/v (B, H_kv, S, D) and p describe a valid call.
void check_attention_shapes(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const AttentionParams& p);

// Fused flash-style attention (CPU kernel: CPU float32/bfloat16/float64; CUDA kernels: bfloat16/float16,
// head dim 64 or 128). Same
// semantics and shapes as reference_attention; no autograd (use attention() for gradients).
AttentionOutput fused_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                const AttentionParams& p);

struct AttentionGrads {
  at::Tensor dq, dk, dv;  // shapes of q, k, v
};

// Gradients of the fused CPU kernel (its forward, then its FlashAttention-2 backward with the given work
// schedule) for dout (B, H, T, D): for tests and benchmarks of the backward; attention() gets the same
// through autograd.
AttentionGrads fused_attention_grads(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                     const at::Tensor& dout, const AttentionParams& p,
                                     kernels::BackwardSchedule schedule = kernels::BackwardSchedule::kAuto);

// The FlashAttention-2 backward of fused_attention() from that call's out (B, H, T, D) and lse (B, H, T), without
// recomputing the forward: dq, dk, dv for dout (B, H, T, D). Takes the inputs fused_attention() takes.
AttentionGrads fused_attention_backward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                        const at::Tensor& out, const at::Tensor& lse, const at::Tensor& dout,
                                        const AttentionParams& p);

// attention() through the fused kernel with its own backward, for inputs the kernel supports.
at::Tensor fused_attention_autograd(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                    const AttentionParams& p);

// Whether attention() runs a fused kernel for these inputs (else it runs reference_attention): on CUDA any
// backend of the plan but the reference; on the CPU our kernel (attention() without gradients still serves
// one-query calls through the decode backend, the reference's grouped products).
bool uses_fused_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const AttentionParams& p);

// While alive, attention() on this thread runs reference_attention (for comparisons and debugging).
class ForceReferenceAttention {
 public:
  ForceReferenceAttention();
  ~ForceReferenceAttention();
  ForceReferenceAttention(const ForceReferenceAttention&) = delete;
  ForceReferenceAttention& operator=(const ForceReferenceAttention&) = delete;

 private:
  bool previous_;
};

// The plan attention() follows for these CUDA tensors (attention_plan.h; training: a backward will follow),
// ForceReferenceAttention aside. Needs a CUDA build. attention_plan() (attention_registry.h) is the same for
// any device.
AttnPlan cuda_attention_plan(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const AttentionParams& p,
                             bool training);

struct AttnBackendDef;

// While alive, attention() and fused_attention() on this thread run the calls on `backend`'s devices on it (an
// error when it cannot run a call), for benchmarks and tests; `backend` must be registered.
class ForceAttentionBackend {
 public:
  explicit ForceAttentionBackend(AttnBackend backend);
  ~ForceAttentionBackend();
  ForceAttentionBackend(const ForceAttentionBackend&) = delete;
  ForceAttentionBackend& operator=(const ForceAttentionBackend&) = delete;

 private:
  const AttnBackendDef* previous_;
};

// ALiBi slopes for any head count (Press et al.; docs/design.md#alibi).
std::vector<double> alibi_slopes(int64_t num_heads);

}  // namespace drope::ops
