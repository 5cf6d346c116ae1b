// What the attention backends' files (src/ops/attention_<backend>.cpp) share: the refusals every fused backend
// makes, sizes of dense biases, and the tensor glue around native layouts (sliced keys, GQA heads, padded
// gradients, log-sum-exp dtypes).
#pragma once

#include <cstdint>
#include <optional>

#include <ATen/ATen.h>

#include "drope/kernels/attention_cpu.h"
#include "drope/ops/attention_registry.h"

namespace drope::ops::backends {

inline bool half_type(kernels::AttnDType d) {
  return d == kernels::AttnDType::kBFloat16 || d == kernels::AttnDType::kFloat16;
}

inline int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// Bytes of the dense (B or 1, H or 1, T, key_len) additive bias, rows padded to 16 elements (the
// memory-efficient kernel loads bias rows in 128-bit pieces; PyTorch pads the same way).
int64_t dense_bias_bytes(const AttnCall& c, int64_t key_len);

// Whether a backend's top-left causal mask (row r sees keys c <= r: the documented tril(ones(L, S))) is ours for
// this call: causal, T == key_len and delta == 0 (q_offset 0).
inline bool top_left_causal_is_ours(const AttnCall& c, const AttnGeometry& g) {
  return g.causal && g.delta == 0 && c.q_len == g.key_len;
}

// Whether our mask needs a dense additive bias on a backend whose own causal mask is ours for this call exactly
// when `native_causal`: ALiBi, a sliding window, per-row key starts, or a causality its mask cannot say.
inline bool needs_dense_bias(const AttnCall& c, const AttnGeometry& g, bool native_causal) {
  return c.alibi || c.window > 0 || c.key_start || (g.causal && !native_causal);
}

// Reasons shared by every fused backend (nullptr: none applies).
const char* common_reject(const AttnCall& c, const AttnGeometry& g);

// An argument set refusing the call: ok false, why set, the fields filled so far kept (informational).
template <typename Args>
Args refuse(Args a, const char* why) {
  a.ok = false;
  a.why = why;
  return a;
}

// A refusal read from an argument set's ok / why.
template <typename Args>
const char* refusal(const Args& a) {
  return a.ok ? nullptr : a.why;
}

inline std::optional<at::Tensor> opt(const at::Tensor& t) {
  return t.defined() ? std::optional<at::Tensor>(t) : std::nullopt;
}

// The window arguments as PyTorch's wrappers take them (nullopt: unbounded).
inline std::optional<int64_t> window_opt(int64_t w) { return w >= 0 ? std::optional<int64_t>(w) : std::nullopt; }

inline at::Tensor unit_d(const at::Tensor& t) { return t.stride(-1) == 1 ? t : t.contiguous(); }

// A native log-sum-exp in the accumulation dtype of q (float64 for float64 inputs, else float32).
inline at::Tensor acc_lse(const at::Tensor& lse, const at::Tensor& q) {
  return lse.to(q.scalar_type() == at::kDouble ? at::kDouble : at::kFloat);
}

// Zero rows for keys [key_len, S) that the backend never saw: (B, Hkv, key_len, D) → (B, Hkv, S, D).
at::Tensor pad_keys(const at::Tensor& g, int64_t S);

// GQA for kernels without it: head h reads KV head h / G (the FA2 README's rule), so repeat each KV head G
// times in place, and sum the G gradients of a KV head back.
at::Tensor expand_heads(const at::Tensor& t, int64_t G);
at::Tensor reduce_heads(const at::Tensor& g, int64_t G);

// Keys, values and bias of the bias backends (memory-efficient, cuDNN): keys sliced to key_len, heads
// expanded for GQA.
struct BiasInputs {
  at::Tensor k, v, bias;
};
BiasInputs bias_inputs(const AttnPlan& plan, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                       const AttentionParams& p, int64_t key_len, bool expand, bool bias, bool causal_in_bias);

// Our CPU kernel (attention_cpu_fused.cpp) for fused_attention(), fused_attention_grads() and
// fused_attention_backward(): CPU tensors of one dtype among float32, bfloat16 and float64.
bool cpu_fused_supported(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v);
AttentionOutput cpu_fused_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  const AttentionParams& p);
AttentionGrads cpu_fused_backward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& out,
                                  const at::Tensor& lse, const at::Tensor& dout, const AttentionParams& p,
                                  kernels::BackwardSchedule schedule = kernels::BackwardSchedule::kAuto);

}  // namespace drope::ops::backends
