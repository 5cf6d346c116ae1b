// Tile math of the fused attention op shared by the CPU and CUDA kernels: parameters, key visibility
// (causal / sliding window), ALiBi bias, tile skipping and the online-softmax update. Plain C++ with no
// torch types and no STL containers, so that device code can include it.
#pragma once

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define DROPE_HOST_DEVICE __host__ __device__
#else
#define DROPE_HOST_DEVICE
#endif

namespace drope::kernels {

// Raw sizes, strides (in elements; the head dimension is contiguous) and options of one attention call.
// q (B, H, T, D), k/v (B, H_kv, S, D), out (B, H, T, D). acc_t is the accumulation type.
template <typename acc_t>
struct AttnParams {
  int64_t batch = 0, heads = 0, kv_heads = 0, q_len = 0, kv_len = 0, head_dim = 0;
  int64_t q_stride[3] = {0, 0, 0};  // batch, head, token
  int64_t k_stride[3] = {0, 0, 0};
  int64_t v_stride[3] = {0, 0, 0};
  int64_t o_stride[3] = {0, 0, 0};
  int64_t q_offset = 0;                  // absolute position of query 0 (resolved, >= 0)
  int64_t window = 0;                    // > 0: key j visible only if j > i − window
  bool causal = true;                    // key j visible only if j <= i
  acc_t scale = 1;                       // logit scale (resolved, > 0)
  const acc_t* alibi_slopes = nullptr;   // (H) or null: logit bias −slope_h · (i − j)
};

// Element type of q, k, v, out and the gradients (float32/bfloat16/float64 on CPU, float16/bfloat16 on CUDA).
enum class AttnDType { kFloat32, kBFloat16, kFloat16, kFloat64 };

// One forward call of a fused kernel: q (B, H, T, D) and out contiguous with p.o_stride = p.q_stride, k/v
// (B, H_kv, S, D) with unit stride in D; p.alibi_slopes holds H values on the kernel's device, or is null;
// lse receives (B, H, T) contiguous log-sum-exps of the scaled, biased, masked logits.
template <typename acc_t>
struct AttnForwardArgs {
  AttnParams<acc_t> p;
  AttnDType dtype = AttnDType::kFloat32;
  const void *q = nullptr, *k = nullptr, *v = nullptr;
  void* out = nullptr;
  acc_t* lse = nullptr;
};

// How the CPU backward splits its work over threads.
enum class BackwardSchedule {
  kAuto,       // kPerKVHead when the (batch, KV head) pairs keep every thread busy, else kTwoPass
  kPerKVHead,  // one sweep per (batch, KV head) pair computes its dK, dV and its query heads' dQ
  kTwoPass,    // dK/dV over (batch, KV head, key tile), then dQ over (batch, head, query tile)
};

// The FlashAttention-2 backward from the forward's out and lse. Every buffer contiguous: q, out, dout, dq
// (B, H, T, D), k, v, dk, dv (B, H_kv, S, D), lse and the scratch rowdot (B, H, T).
template <typename acc_t>
struct AttnBackwardArgs {
  AttnParams<acc_t> p;
  AttnDType dtype = AttnDType::kFloat32;
  const void *q = nullptr, *k = nullptr, *v = nullptr, *out = nullptr, *dout = nullptr;
  const acc_t* lse = nullptr;
  acc_t* rowdot = nullptr;
  void *dq = nullptr, *dk = nullptr, *dv = nullptr;
  acc_t* dq_accum = nullptr;                           // CUDA: scratch (B, H, T, D), zeroed by the caller
  BackwardSchedule schedule = BackwardSchedule::kAuto;  // CPU: the work split
};

// KV head read by query head h (grouped-query attention).
template <typename acc_t>
DROPE_HOST_DEVICE inline int64_t kv_head_of(const AttnParams<acc_t>& p, int64_t h) {
  return h / (p.heads / p.kv_heads);
}

// Absolute position of query row t.
template <typename acc_t>
DROPE_HOST_DEVICE inline int64_t query_pos(const AttnParams<acc_t>& p, int64_t t) {
  return p.q_offset + t;
}

// Whether key j is visible to the query at absolute position i.
template <typename acc_t>
DROPE_HOST_DEVICE inline bool key_visible(const AttnParams<acc_t>& p, int64_t i, int64_t j) {
  return j >= 0 && j < p.kv_len && (!p.causal || j <= i) && (p.window == 0 || j > i - p.window);
}

// First visible key of the query at position i (visible keys form the range [lo, hi)).
template <typename acc_t>
DROPE_HOST_DEVICE inline int64_t visible_lo(const AttnParams<acc_t>& p, int64_t i) {
  const int64_t lo = p.window > 0 ? i - p.window + 1 : 0;
  return lo > 0 ? lo : 0;
}

// One past the last visible key of the query at position i.
template <typename acc_t>
DROPE_HOST_DEVICE inline int64_t visible_hi(const AttnParams<acc_t>& p, int64_t i) {
  const int64_t hi = p.causal ? i + 1 : p.kv_len;
  return hi < p.kv_len ? (hi > 0 ? hi : 0) : p.kv_len;
}

// Keys [lo, hi) visible to at least one query of positions [i0, i1); the bounds are monotone in i and
// consecutive rows' ranges touch, so the union is one range. Empty when lo >= hi.
template <typename acc_t>
DROPE_HOST_DEVICE inline void key_band(const AttnParams<acc_t>& p, int64_t i0, int64_t i1, int64_t* lo, int64_t* hi) {
  *lo = visible_lo(p, i0);
  *hi = i1 > i0 ? visible_hi(p, i1 - 1) : *lo;
}

// Whether the key tile [j0, j1) is invisible to every query of positions [i0, i1) (the tile can be skipped).
template <typename acc_t>
DROPE_HOST_DEVICE inline bool tile_fully_masked(const AttnParams<acc_t>& p, int64_t i0, int64_t i1, int64_t j0,
                                                int64_t j1) {
  int64_t lo, hi;
  key_band(p, i0, i1, &lo, &hi);
  return lo >= hi || j1 <= lo || j0 >= hi;
}

// Query rows [t_lo, t_hi) that see at least one key of [j0, j1) (inverse of key_band); empty when t_lo >= t_hi.
template <typename acc_t>
DROPE_HOST_DEVICE inline void query_band(const AttnParams<acc_t>& p, int64_t j0, int64_t j1, int64_t* t_lo,
                                         int64_t* t_hi) {
  int64_t i_lo = p.causal ? j0 : 0;                                  // causal: i >= j
  int64_t i_hi = p.window > 0 ? (j1 - 1) + p.window : INT64_MAX / 2;  // window: i < j + window
  if (i_lo < p.q_offset) i_lo = p.q_offset;
  if (i_hi > p.q_offset + p.q_len) i_hi = p.q_offset + p.q_len;
  *t_lo = i_lo - p.q_offset;
  *t_hi = i_hi > i_lo ? i_hi - p.q_offset : *t_lo;
}

// Scaled, biased logit from the raw dot product q·k and the distance i − j: scale·dot − slope·(i − j)
// (slope 0 without ALiBi). V is the scalar type or a SIMD vector of it.
template <typename V, typename S>
DROPE_HOST_DEVICE inline V attn_logit(V dot, S scale, S slope, V dist) {
  return dot * scale - slope * dist;
}

DROPE_HOST_DEVICE inline float exp_of(float x) { return expf(x); }
DROPE_HOST_DEVICE inline double exp_of(double x) { return exp(x); }
DROPE_HOST_DEVICE inline float log_of(float x) { return logf(x); }
DROPE_HOST_DEVICE inline double log_of(double x) { return log(x); }

// Negative infinity of acc_t.
template <typename acc_t>
DROPE_HOST_DEVICE inline acc_t neg_inf() {
  return -acc_t(INFINITY);
}

// Online softmax: folds a tile whose largest visible logit is tile_max into the running max m. Returns the
// factor by which the running sum and output accumulator must be multiplied; afterwards the tile's
// probabilities are exp(s − m). A state that has seen no visible logit keeps m = −inf and factor 1.
template <typename acc_t>
DROPE_HOST_DEVICE inline acc_t online_softmax_rescale(acc_t* m, acc_t tile_max) {
  const acc_t m_new = tile_max > *m ? tile_max : *m;
  if (m_new == neg_inf<acc_t>()) return acc_t(1);
  const acc_t factor = exp_of(*m - m_new);  // exp(−inf) = 0 for the first visible tile
  *m = m_new;
  return factor;
}

// Log-sum-exp of a finished row from its running max and sum; −inf when no key was visible.
template <typename acc_t>
DROPE_HOST_DEVICE inline acc_t softmax_lse(acc_t m, acc_t l) {
  return l > acc_t(0) ? m + log_of(l) : neg_inf<acc_t>();
}

// Probability of a visible logit s given the row's log-sum-exp (backward recomputation).
template <typename acc_t>
DROPE_HOST_DEVICE inline acc_t softmax_prob(acc_t s, acc_t lse) {
  return exp_of(s - lse);
}

// Softmax-gradient of one logit: p · (dp − Σ_d dout·out). V is the scalar type or a SIMD vector of it.
template <typename V, typename S>
DROPE_HOST_DEVICE inline V softmax_grad(V p, V dp, S row_dot) {
  return p * (dp - row_dot);
}

}  // namespace drope::kernels
