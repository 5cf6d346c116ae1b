// Which kernel runs an attention call on CUDA, and that kernel's exact arguments: pure functions of the call's
// sizes and options (no tensors, no CUDA), so the whole mapping is unit-tested on the CPU
// (tests/test_attention_plan.cpp emulates each backend's documented semantics in float64). The backends
// themselves, CPU and CUDA, are records of a registry (attention_registry.h), one file each
// (src/ops/attention_<backend>.cpp, which also defines the backend's x_args mapping declared here).
//
// Our semantics (include/drope/ops/attention.h): query t sits at absolute position i = q_offset + t; key j is
// visible iff j < S, (causal ⇒ j ≤ i), (window W > 0 ⇒ j > i − W), j ≥ key_start[b]; logit
// scale·q·k − slope_h·(i − j). Layout (B, H, T, D) for q, (B, H_kv, S, D) for k and v.
//
// The CUDA backends (LibTorch 2.11's ATen ops; see docs/gpu.md for the sources each rule was read from):
//  - flash: at::_flash_attention_forward/backward (FlashAttention-2, layout (B, T, H, D), bottom-right causal
//    alignment, window_size_left/right, ALiBi in the forward only, GQA, variable lengths + seqused_k);
//  - mem_efficient: at::_efficient_attention_forward/backward (CUTLASS memory-efficient attention, layout
//    (B, T, H, D), an additive bias in the input dtype, custom_mask_type 2 = bottom-right causal, no GQA);
//  - cudnn: at::_scaled_dot_product_cudnn_attention(+_backward) (layout (B, H, T, D), additive bias);
//  - cudnn_graph: cuDNN's SDPA node through cudnn-frontend graphs (src/ops/cudnn_graph.cpp, CUDA builds with
//    the frontend's headers): causal and sliding window as diagonal bands, cuDNN's built-in ALiBi, GQA with K/V
//    read as they are, layout (B, H, T, D);
//  - sdpa: at::scaled_dot_product_attention with a dense additive mask (its own dispatcher; no log-sum-exp);
//  - own_cuda: our kernels (src/kernels/cuda), which compute ALiBi and windows in the kernel;
//  - reference: ops::reference_attention (plain ATen, differentiable).
// On the CPU: cpu_fused (our CPU kernel), decode (one query per row without gradients: the reference's grouped
// matrix products) and the reference.
#pragma once

#include <cstdint>
#include <cstring>
#include <ostream>
#include <vector>

#include "drope/kernels/attention_math.h"

namespace drope::ops {

// A backend of the registry (attention_registry.h), by its registered name. The built-in backends have
// constants; any registered name is a backend.
struct AttnBackend {
  const char* name = "reference";
  static const AttnBackend kFlash, kMemEfficient, kCudnn, kCudnnGraph, kSdpa, kOwnCuda, kCpuFused, kDecode, kReference;
};
inline constexpr AttnBackend AttnBackend::kFlash{"flash"};
inline constexpr AttnBackend AttnBackend::kMemEfficient{"mem_efficient"};
inline constexpr AttnBackend AttnBackend::kCudnn{"cudnn"};
inline constexpr AttnBackend AttnBackend::kCudnnGraph{"cudnn_graph"};
inline constexpr AttnBackend AttnBackend::kSdpa{"sdpa"};
inline constexpr AttnBackend AttnBackend::kOwnCuda{"own_cuda"};
inline constexpr AttnBackend AttnBackend::kCpuFused{"cpu_fused"};
inline constexpr AttnBackend AttnBackend::kDecode{"decode"};
inline constexpr AttnBackend AttnBackend::kReference{"reference"};
inline bool operator==(AttnBackend a, AttnBackend b) { return std::strcmp(a.name, b.name) == 0; }
inline bool operator!=(AttnBackend a, AttnBackend b) { return !(a == b); }
inline std::ostream& operator<<(std::ostream& o, AttnBackend b) { return o << b.name; }

// The backend's name ("flash", "mem_efficient", "cudnn", "cudnn_graph", "sdpa", "own_cuda", "cpu_fused",
// "decode", "reference", or a backend registered since).
inline const char* attn_backend_name(AttnBackend b) { return b.name; }
// The registered backend of that name; false for an unknown name.
bool parse_attn_backend(const char* name, AttnBackend* out);

// One attention call as the plan sees it: sizes and options, resolved (scale > 0, q_offset >= 0).
struct AttnCall {
  kernels::AttnDType dtype = kernels::AttnDType::kBFloat16;
  int sm = 90;                  // compute capability × 10 of the device (80: A100, 90: H100)
  int64_t batch = 1, heads = 1, kv_heads = 1, q_len = 1, kv_len = 1, head_dim = 64;
  bool causal = true;
  int64_t window = 0;           // > 0: key j visible only if j > i − window
  bool alibi = false;           // slopes given
  bool alibi_trainable = false; // slopes require gradients (only the reference differentiates them)
  double scale = 0.125;         // logit scale (resolved)
  int64_t q_offset = 0;         // absolute position of query 0 (resolved)
  bool key_start = false;       // left padding present
  int64_t max_key_start = 0;    // largest key_start[b] (0 without padding)
  bool training = false;        // gradients needed (a backward will follow)
  bool alibi_builtin = false;   // the slopes equal cuDNN's built-in ones for `heads` (alibi_matches_cudnn)
  bool cudnn_graph = false;     // the build has cuDNN graphs (cudnn-frontend) and they are not switched off
  bool cuda = true;             // CUDA tensors (false: CPU tensors)
  bool uniform = true;          // k and v share q's device and dtype, one of the four of AttnDType
};

// The visible-key geometry every backend mapping starts from.
struct AttnGeometry {
  bool causal = true;   // a non-causal call whose keys all precede its first query counts as causal
  int64_t key_len = 0;  // keys the backend is given, [0, key_len): causal calls drop keys after the last query
  int64_t delta = 0;    // q_offset − (key_len − T): queries past FlashAttention's bottom-right alignment
  bool empty_rows = false;  // some query sees no key (the reference gives NaN rows): no fused backend
};
AttnGeometry attn_geometry(const AttnCall& c);

// at::_flash_attention_forward / _backward arguments. FA2 (mask.h, block_info.h): sequence lengths sq, sk
// (per varlen sequence: sk = seqused_k), query row r sees key column c iff
//   c ≥ r + sk − sq − window_left (when window_left ≥ 0) and c ≤ r + sk − sq + window_right (when ≥ 0);
// is_causal is window_right = 0 with window_left unbounded. No ALiBi: LibTorch builds FA2 without it.
struct FlashArgs {
  bool ok = false;
  const char* why = "";      // reason when !ok
  bool varlen = false;       // left padding: one variable-length sequence per (batch, KV head), see below
  bool is_causal = false;
  int64_t window_left = -1;  // −1: unbounded
  int64_t window_right = -1;
  double scale = 0;
  int64_t key_len = 0;       // k/v passed: keys [0, key_len)
  int64_t max_q = 0, max_k = 0;
};
// Varlen layout (inference with key_start): sequence n = b·H_kv + g holds the G = H/H_kv query heads of KV
// head g as FA2 "heads" (q rows n·T + t), and one KV head; its keys start at row
// cu_seqlens_k[n] = n·rows_per_seq + key_start[b] of k viewed as (rows, 1, D) and seqused_k[n] =
// key_len − key_start[b] of them are used (block_info.h: actual_seqlen_k = seqused_k); lse comes back as
// (G, N·T) (flash_fwd_kernel.h get_lse_tile, unpadded_lse).
FlashArgs flash_args(const AttnCall& c);

// at::_efficient_attention_forward / _backward arguments: logits scale·q·k + bias, keys masked by
// custom_mask_type 2 (bottom-right causal: c ≤ r + sk − sq, kernel_forward.h) where used; log-sum-exp comes
// back as (B, H, ⌈T/32⌉·32) (kAlignLSE = 32).
struct MemEffArgs {
  bool ok = false;
  const char* why = "";
  int64_t custom_mask_type = 0;  // 0 none, 2 causal from bottom right
  int64_t key_len = 0;
  double scale = 0;
  bool bias = false;             // a dense additive bias (ALiBi, window, padding, causal when not a mask type)
  bool expand_kv = false;        // GQA: k/v repeated to H heads (no GQA in this kernel), dK/dV summed back
  int64_t lse_cols = 0;          // ⌈T/32⌉·32
  int64_t bias_bytes = 0;        // memory of the dense bias
};
MemEffArgs mem_eff_args(const AttnCall& c);

// at::_scaled_dot_product_cudnn_attention arguments: is_causal only where top-left and bottom-right agree
// (T == key_len), everything else as an additive bias; log-sum-exp (B, H, T, 1).
struct CudnnArgs {
  bool ok = false;
  const char* why = "";
  bool is_causal = false;
  int64_t key_len = 0;
  double scale = 0;
  bool bias = false;
  bool expand_kv = false;
  int64_t bias_bytes = 0;
};
CudnnArgs cudnn_args(const AttnCall& c);

// cuDNN's SDPA node (cudnn-frontend graph_properties.h SDPA_attributes, node/scaled_dot_product_flash_attention.h,
// utils/attn_score_modifiers.h, node/diagonal_band_mask.h): q (B, h_q, s_q, D), k/v (B, h_kv, s_kv, D), query head
// h reads KV head h / (h_q / h_kv); logits attn_scale·q·k, then with alibi_mask + slope_h·(col − row) (slopes
// built in, cudnn_alibi_slopes(h_q)), then the diagonal band. With a = 0 (kTopLeft) or s_kv − s_q (kBottomRight),
// row r keeps column c iff c ≤ r + a + right_bound (when a right bound is set: causal) and c > r + a − left_bound
// (when a left bound is set: the window; exclusive, unlike FA2's window_size_left). Stats: the natural
// log-sum-exp (B, h_q, s_q, 1) float32 of those logits. Support rules (9.19, the validate functions): ALiBi needs
// right_bound == 0 and top-left alignment (bottom-right causal refuses ALiBi and bias), left_bound ≥ 1, any bound
// with bottom-right or a left bound needs s_q ≤ s_kv, head dim % 8 == 0 and ≤ 128 (sm80; 256 on sm90 forward),
// the backward refuses s_q = s_kv = 1.
enum class DiagonalAlign { kTopLeft, kBottomRight };
struct CudnnGraphArgs {
  bool ok = false;
  const char* why = "";
  int64_t key_len = 0;           // k/v passed: keys [0, key_len)
  int64_t q_heads = 0, kv_heads = 0;
  double scale = 0;              // set_attn_scale
  bool alibi = false;            // set_alibi_mask(true)
  DiagonalAlign align = DiagonalAlign::kTopLeft;  // set_diagonal_alignment
  int64_t right_bound = -1;      // ≥ 0: set_diagonal_band_right_bound (causal)
  int64_t left_bound = -1;       // ≥ 1: set_diagonal_band_left_bound (window)
};
CudnnGraphArgs cudnn_graph_args(const AttnCall& c);

// The ALiBi slopes cuDNN builds in for h query heads (cudnn_frontend_utils.h get_alibi_slope: n = 2^⌊log2 h⌋,
// 2^(−8k/n) for k = 1..n, then 2^(−8(k − ½)/n) for k = 1..h − n), computed in float32 as cuDNN does. They equal
// Press et al.'s (ours, ops::alibi_slopes) for every h, powers of two or not.
std::vector<float> cudnn_alibi_slopes(int64_t heads);
// Whether `slopes` (h of them) are cuDNN's built-in ones to within 8 float32 ulps (relative 1e-6).
bool alibi_matches_cudnn(const float* slopes, int64_t heads);

// at::scaled_dot_product_attention arguments: is_causal (top-left) only for T == key_len with nothing else
// masked, otherwise a dense additive mask; enable_gqa for H_kv < H.
struct SdpaArgs {
  bool ok = false;
  const char* why = "";
  bool is_causal = false;
  int64_t key_len = 0;
  double scale = 0;
  bool mask = false;
  bool enable_gqa = false;
  int64_t mask_bytes = 0;
};
SdpaArgs sdpa_args(const AttnCall& c);

// Whether our CUDA kernels take the call (bfloat16/float16, head dim 64 or 128, no left padding).
bool own_cuda_supports(const AttnCall& c, const char** why = nullptr);

// The chosen backend with all argument sets (those of other backends are informational).
struct AttnPlan {
  AttnBackend backend = AttnBackend::kReference;
  const char* reason = "";
  AttnGeometry geometry;
  FlashArgs flash;
  MemEffArgs mem_eff;
  CudnnArgs cudnn;
  CudnnGraphArgs cudnn_graph;
  SdpaArgs sdpa;
};

// Largest dense bias the plan materialises for a bias backend before it prefers our kernels (bytes).
constexpr int64_t kMaxDenseBiasBytes = int64_t(512) << 20;

// The default choice for a CUDA call (the routes of src/ops/attention_registry.cpp, measured on an H100,
// docs/gpu.md): where the build has cuDNN graphs
// (c.cudnn_graph), the cuDNN graph on sm90+ wherever it maps the call, and on sm80 for ALiBi (no dense bias); then
// on sm90+ cuDNN attention wherever it takes the call without a dense bias; else FlashAttention-2 wherever it maps the
// call; memory-efficient attention with a dense bias where FA2 cannot (ALiBi, left padding in training, queries past
// the keys) while the bias stays under kMaxDenseBiasBytes; our kernels past that; SDPA for what no fused kernel takes
// (float32, head dims FA2/ours lack); the reference for float64, trainable slopes and rows without keys.
AttnPlan plan_attention(const AttnCall& c);

// The plan of a CUDA call with the backend forced (benchmarks, tests); `ok` false with `why` (the backend's
// refusal) when it cannot run the call.
AttnPlan plan_attention_forced(const AttnCall& c, AttnBackend forced, bool* ok, const char** why);

}  // namespace drope::ops
