// Runs an attention plan (include/drope/ops/attention_plan.h) on tensors through the backends of the registry
// (attention_registry.h), whose files hold the glue: layouts, sliced keys, dense biases, varlen sequence tables,
// log-sum-exp conversion and gradient reduction around LibTorch's fused attention ops. The ops themselves come
// in through BackendOps, so the same glue runs against the real ATen ops on a GPU and against CPU emulations of
// their documented semantics in tests/test_attention_plan.cpp.
#pragma once

#include <functional>
#include <tuple>

#include <ATen/ATen.h>

#include "drope/ops/attention.h"
#include "drope/ops/attention_plan.h"

namespace drope::ops::backends {

// at::_flash_attention_forward: q (B, T, H, D) or varlen (total_q, H, D); k/v likewise.
struct FlashFwdIn {
  at::Tensor q, k, v;
  at::Tensor cu_q, cu_k, seqused_k;  // int32; undefined unless varlen
  int64_t max_q = 0, max_k = 0;
  bool is_causal = false;
  double scale = 0;
  int64_t window_left = -1, window_right = -1;
};
struct FlashFwdOut {
  at::Tensor out, lse, rng_state, unused;  // out like q; lse (B, H, T) dense, (H, total_q) varlen
};
// at::_flash_attention_backward (dense layout only).
struct FlashBwdIn {
  at::Tensor dout, q, k, v, out, lse, rng_state, unused;
  int64_t max_q = 0, max_k = 0;
  bool is_causal = false;
  double scale = 0;
  int64_t window_left = -1, window_right = -1;
};
// at::_efficient_attention_forward/backward: q (B, T, H, D), k/v (B, S, H, D), bias (B, H, T, S) or undefined.
struct MemEffFwdIn {
  at::Tensor q, k, v, bias;
  int64_t custom_mask_type = 0;
  double scale = 0;
};
struct MemEffFwdOut {
  at::Tensor out, lse, seed, offset;  // out (B, T, H, D); lse (B, H, ⌈T/32⌉·32)
};
struct MemEffBwdIn {
  at::Tensor dout, q, k, v, bias, out, lse, seed, offset;
  int64_t custom_mask_type = 0;
  double scale = 0;
};
// at::_scaled_dot_product_cudnn_attention(+_backward): q (B, H, T, D), k/v (B, H, S, D), bias (B, H, T, S).
struct CudnnFwdIn {
  at::Tensor q, k, v, bias;
  bool is_causal = false;
  double scale = 0;
};
struct CudnnFwdOut {
  at::Tensor out, lse, seed, offset;  // out (B, H, T, D); lse (B, H, T, 1)
};
struct CudnnBwdIn {
  at::Tensor dout, q, k, v, out, lse, seed, offset, bias;
  bool is_causal = false;
  double scale = 0;
};
// cuDNN's SDPA graph (src/ops/cudnn_graph.cpp): q (B, H, T, D), k/v (B, H_kv, key_len, D) as they are (GQA
// native), the attributes of cudnn_graph_args; stats always generated.
struct CudnnGraphFwdIn {
  at::Tensor q, k, v;
  CudnnGraphArgs args;
};
struct CudnnGraphFwdOut {
  at::Tensor out, stats;  // out (B, H, T, D); stats (B, H, T, 1) float32, cuDNN's log-sum-exp
};
struct CudnnGraphBwdIn {
  at::Tensor dout, q, k, v, out, stats;
  CudnnGraphArgs args;
};

// at::scaled_dot_product_attention: q (B, H, T, D), k/v (B, H_kv, S, D), mask (B, H, T, S) additive.
struct SdpaIn {
  at::Tensor q, k, v, mask;
  bool is_causal = false;
  double scale = 0;
  bool enable_gqa = false;
};

using Grads3 = std::tuple<at::Tensor, at::Tensor, at::Tensor>;

// The fused-attention ops a plan calls.
struct BackendOps {
  std::function<FlashFwdOut(const FlashFwdIn&)> flash_fwd;
  std::function<Grads3(const FlashBwdIn&)> flash_bwd;
  std::function<MemEffFwdOut(const MemEffFwdIn&)> mem_eff_fwd;
  std::function<Grads3(const MemEffBwdIn&)> mem_eff_bwd;
  std::function<CudnnFwdOut(const CudnnFwdIn&)> cudnn_fwd;
  std::function<Grads3(const CudnnBwdIn&)> cudnn_bwd;
  std::function<CudnnGraphFwdOut(const CudnnGraphFwdIn&)> cudnn_graph_fwd;  // unset without cudnn-frontend
  std::function<Grads3(const CudnnGraphBwdIn&)> cudnn_graph_bwd;            // dk, dv with H_kv heads
  std::function<at::Tensor(const SdpaIn&)> sdpa;
};

// LibTorch's ATen ops (they run on CUDA tensors only), and cuDNN graphs where the build has them: what each
// backend's record binds.
const BackendOps& aten_ops();

// Whether this build runs cuDNN graphs (cudnn-frontend found at configure time) and DROPE_CUDNN_GRAPH is not 0.
bool cudnn_graph_enabled();

// The plan's view of a validated call; training: a backward will follow; sm: the device's capability × 10.
// alibi_builtin compares the slopes with cuDNN's (one host copy per slopes tensor and version, cached);
// cudnn_graph is cudnn_graph_enabled(); cuda and uniform come from the tensors.
AttnCall make_call(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const AttentionParams& p,
                   bool training, int sm);

// What a backend's backward needs from its forward (its own layouts).
struct NativeState {
  at::Tensor out, lse, rng0, rng1, bias;
};

struct Forward {
  at::Tensor out;  // (B, H, T, D), q's dtype
  at::Tensor lse;  // (B, H, T) float32 (float64 for float64 inputs), our convention; undefined for SDPA
  NativeState state;
};

// Forward of the plan's backend (its record's forward).
Forward run_forward(const AttnPlan& plan, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                    const AttentionParams& p, const BackendOps& ops);

// Backward of the plan's backend from run_forward's state: dq, dk, dv shaped like q, k, v (an error for a
// backend differentiable by itself: sdpa, decode, reference).
AttentionGrads run_backward(const AttnPlan& plan, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const AttentionParams& p, const NativeState& state, const at::Tensor& dout,
                            const BackendOps& ops);

// The dense additive bias (B, H, T, key_len) of a call (stride 0 over what it does not depend on; rows
// padded to 16 elements): −slope·(i − j) with ALiBi, −inf where the window, left padding or (causal_in_bias)
// causality hides a key.
at::Tensor dense_bias(const at::Tensor& q, const AttentionParams& p, const AttnGeometry& g, int64_t key_len,
                      bool causal_in_bias);

}  // namespace drope::ops::backends
