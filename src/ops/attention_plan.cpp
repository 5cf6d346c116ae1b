// The CUDA attention plan (include/drope/ops/attention_plan.h): backend choice and argument mapping, pure.
#include "drope/ops/attention_plan.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace drope::ops {

namespace {

using kernels::AttnDType;

bool half_type(AttnDType d) { return d == AttnDType::kBFloat16 || d == AttnDType::kFloat16; }

int64_t elem_bytes(AttnDType d) {
  switch (d) {
    case AttnDType::kFloat64: return 8;
    case AttnDType::kFloat32: return 4;
    default: return 2;
  }
}

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// Bytes of the dense (B or 1, H or 1, T, key_len) additive bias, rows padded to 16 elements (the
// memory-efficient kernel loads bias rows in 128-bit pieces; PyTorch pads the same way).
int64_t dense_bias_bytes(const AttnCall& c, int64_t key_len) {
  return (c.key_start ? c.batch : 1) * (c.alibi ? c.heads : 1) * c.q_len * round_up(key_len, 16) * elem_bytes(c.dtype);
}

// Reasons shared by every fused backend.
const char* common_reject(const AttnCall& c, const AttnGeometry& g) {
  if (c.alibi_trainable) return "trainable ALiBi slopes need the reference's autograd";
  if (g.empty_rows) return "some query sees no key (reference semantics: NaN rows)";
  return nullptr;
}

}  // namespace

const char* attn_backend_name(AttnBackend b) {
  switch (b) {
    case AttnBackend::kFlash: return "flash";
    case AttnBackend::kMemEfficient: return "mem_efficient";
    case AttnBackend::kCudnn: return "cudnn";
    case AttnBackend::kCudnnGraph: return "cudnn_graph";
    case AttnBackend::kSdpa: return "sdpa";
    case AttnBackend::kOwnCuda: return "own_cuda";
    case AttnBackend::kReference: return "reference";
  }
  return "?";
}

bool parse_attn_backend(const char* name, AttnBackend* out) {
  for (auto b : {AttnBackend::kFlash, AttnBackend::kMemEfficient, AttnBackend::kCudnn, AttnBackend::kCudnnGraph,
                 AttnBackend::kSdpa, AttnBackend::kOwnCuda, AttnBackend::kReference})
    if (std::strcmp(name, attn_backend_name(b)) == 0) {
      *out = b;
      return true;
    }
  return false;
}

AttnGeometry attn_geometry(const AttnCall& c) {
  AttnGeometry g;
  const int64_t T = c.q_len, S = c.kv_len, o = c.q_offset;
  // Every key precedes the first query: causal masking hides nothing, so the call is causal.
  g.causal = c.causal || o >= S - 1;
  // Causal: keys after the last query (position o + T − 1) are invisible to every query.
  g.key_len = g.causal ? std::min(S, o + T) : S;
  g.delta = o - (g.key_len - T);
  // Visible keys of row t: [max(key_start, o + t − W + 1), hi(t)] with hi = min(o + t, S − 1) causal, S − 1
  // otherwise. Both bounds grow with t, so row 0 (left padding) and row T − 1 (window) are the extreme rows.
  const int64_t hi0 = g.causal ? std::min(o, S - 1) : S - 1;
  g.empty_rows = c.max_key_start > hi0 || (c.window > 0 && o + T - c.window > S - 1);
  return g;
}

FlashArgs flash_args(const AttnCall& c) {
  FlashArgs a;
  const AttnGeometry g = attn_geometry(c);
  auto fail = [&](const char* why) {
    a.ok = false;
    a.why = why;
    return a;
  };
  // flash_api.cpp mha_fwd/mha_varlen_fwd: sm80+, fp16/bf16, head_size % 8 == 0 and <= 256.
  if (!half_type(c.dtype)) return fail("FA2 takes bfloat16/float16 only");
  if (c.sm < 80) return fail("FA2 needs sm80 or newer");
  if (c.head_dim % 8 != 0 || c.head_dim > 256) return fail("FA2 needs head dim % 8 == 0 and <= 256");
  if (const char* why = common_reject(c, g)) return fail(why);
  // LibTorch's FA2 is built with FLASHATTENTION_DISABLE_ALIBI: flash_api.cpp set_params_alibi throws "This flash
  // attention build does not support alibi" (seen on an H100 with torch 2.11.0+cu130, docs/gpu.md), and its
  // _flash_attention_backward passes no slopes at all.
  if (c.alibi) return fail("LibTorch's FA2 build has no ALiBi");
  if (c.training && c.key_start) return fail("left padding runs through FA2's varlen forward only (inference)");
  a.key_len = g.key_len;
  a.scale = c.scale;
  a.max_q = c.q_len;
  a.max_k = g.key_len;
  a.varlen = c.key_start;
  // FA2 row r is at absolute position r + sk − sq + delta (bottom-right alignment), so
  //   ours j ≤ i  ⇔ c ≤ r + sk − sq + delta      → window_right = delta (0: plain causal);
  //   ours j > i − W ⇔ c ≥ r + sk − sq + delta − W + 1 → window_left = W − 1 − delta (must be ≥ 0).
  // With left padding both sides shift by key_start[b] (keys and sk are counted from it), which cancels.
  a.window_right = g.causal ? g.delta : -1;
  a.window_left = c.window > 0 ? c.window - 1 - g.delta : -1;
  if (c.window > 0 && a.window_left < 0) return fail("window lower bound lies past FA2's bottom-right diagonal");
  a.is_causal = g.causal && g.delta == 0 && c.window == 0;
  if (a.is_causal) a.window_left = a.window_right = -1;  // mha_fwd sets window_right = 0 itself
  a.ok = true;
  return a;
}

MemEffArgs mem_eff_args(const AttnCall& c) {
  MemEffArgs a;
  const AttnGeometry g = attn_geometry(c);
  auto fail = [&](const char* why) {
    a.ok = false;
    a.why = why;
    return a;
  };
  if (c.dtype == AttnDType::kFloat64) return fail("memory-efficient attention takes float32/bfloat16/float16");
  if (c.sm < 50) return fail("memory-efficient attention needs sm50 or newer");
  // sdp_utils.cpp check_head_dim_size_mem_efficient: head dim a multiple of 8 (16-bit) or 4 (float32).
  const int64_t align = half_type(c.dtype) ? 8 : 4;
  if (c.head_dim % align != 0 || c.head_dim > 256)
    return fail("memory-efficient attention needs an aligned head dim <= 256");
  if (const char* why = common_reject(c, g)) return fail(why);
  a.key_len = g.key_len;
  a.scale = c.scale;
  a.custom_mask_type = g.causal && g.delta == 0 ? 2 : 0;
  a.bias = c.alibi || c.window > 0 || c.key_start || (g.causal && a.custom_mask_type == 0);
  a.expand_kv = c.heads != c.kv_heads;
  a.lse_cols = round_up(c.q_len, 32);
  a.bias_bytes = a.bias ? dense_bias_bytes(c, g.key_len) : 0;
  a.ok = true;
  return a;
}

CudnnArgs cudnn_args(const AttnCall& c) {
  CudnnArgs a;
  const AttnGeometry g = attn_geometry(c);
  auto fail = [&](const char* why) {
    a.ok = false;
    a.why = why;
    return a;
  };
  if (!half_type(c.dtype)) return fail("cuDNN attention takes bfloat16/float16 only");
  if (c.sm < 80) return fail("cuDNN attention needs sm80 or newer");
  if (c.head_dim % 8 != 0 || c.head_dim > 128) return fail("cuDNN attention needs head dim % 8 == 0 and <= 128");
  if (const char* why = common_reject(c, g)) return fail(why);
  a.key_len = g.key_len;
  a.scale = c.scale;
  // Its causal mask is top-left (row r sees c ≤ r): ours only when T == key_len and delta == 0 (q_offset 0).
  a.is_causal = g.causal && g.delta == 0 && c.q_len == g.key_len;
  a.bias = c.alibi || c.window > 0 || c.key_start || (g.causal && !a.is_causal);
  a.expand_kv = c.heads != c.kv_heads;
  a.bias_bytes = a.bias ? dense_bias_bytes(c, g.key_len) : 0;
  a.ok = true;
  return a;
}

std::vector<float> cudnn_alibi_slopes(int64_t heads) {
  // get_alibi_slope's float32 arithmetic, step by step.
  std::vector<float> s;
  if (heads <= 0) return s;
  const int n = 1 << static_cast<int>(std::log2(static_cast<double>(heads)));
  for (int i = 0; i < n; ++i) s.push_back(float(i + 1.0));
  for (int64_t i = 0; i < 2 * (heads - n); i += 2) s.push_back(static_cast<float>(i + 1) * 0.5f);
  for (float& e : s) {
    e *= -8.0f;
    e /= static_cast<float>(n);
    e = std::pow(2.0f, e);
  }
  return s;
}

bool alibi_matches_cudnn(const float* slopes, int64_t heads) {
  const auto ref = cudnn_alibi_slopes(heads);
  for (int64_t h = 0; h < heads; ++h)
    if (!(std::fabs(double(slopes[h]) - double(ref[size_t(h)])) <= 1e-6 * double(ref[size_t(h)]))) return false;
  return heads > 0;
}

CudnnGraphArgs cudnn_graph_args(const AttnCall& c) {
  CudnnGraphArgs a;
  const AttnGeometry g = attn_geometry(c);
  auto fail = [&](const char* why) {
    a.ok = false;
    a.why = why;
    return a;
  };
  if (!half_type(c.dtype)) return fail("cuDNN graph attention takes bfloat16/float16 only");
  if (c.sm < 80) return fail("cuDNN graph attention needs sm80 or newer");
  if (c.head_dim % 8 != 0 || c.head_dim > 128) return fail("cuDNN graph attention needs head dim % 8 == 0 and <= 128");
  if (const char* why = common_reject(c, g)) return fail(why);
  if (c.key_start) return fail("left padding (cuDNN's padding mask hides keys on the right)");
  const int64_t T = c.q_len, L = g.key_len, o = c.q_offset;
  a.key_len = L;
  a.q_heads = c.heads;
  a.kv_heads = c.kv_heads;
  a.scale = c.scale;
  if (c.alibi) {
    if (!c.alibi_builtin) return fail("the ALiBi slopes are not cuDNN's built-in ones");
    // cuDNN adds slope·(col − row) and takes ALiBi only with right bound 0, top-left: row r is our query r,
    // at position r, only when the queries start at position 0 (then the bias is ours exactly, stats included).
    if (!g.causal) return fail("cuDNN's ALiBi needs the causal mask");
    if (o != 0) return fail("cuDNN's ALiBi is top-left aligned: the queries must start at position 0");
    a.alibi = true;
  }
  if (c.window > 0 && T > L) return fail("cuDNN's sliding window needs no more queries than keys");
  // Our query r sits at position i = o + r; the alignment puts row r's diagonal at column r + base, so our
  // diagonal lies d = o − base columns right of it: causal j ≤ i is c ≤ r + base + d (right bound d), the window
  // j > i − W is c > r + base − (W − d) (left bound W − d).
  int64_t base = 0;
  if (o != 0 && T <= L && (g.causal || c.window > 0)) {
    a.align = DiagonalAlign::kBottomRight;  // KV-cache chunks: d = delta, 0 unless queries pass the last key
    base = L - T;
  }
  const int64_t d = o - base;
  if (g.causal) a.right_bound = d;
  if (c.window > 0) {
    a.left_bound = c.window - d;
    if (a.left_bound < 1) return fail("the window's lower bound lies past cuDNN's diagonal (left bound < 1)");
  }
  if (c.training && T == 1 && L == 1) return fail("cuDNN's SDPA backward refuses s_q = s_kv = 1");
  a.ok = true;
  return a;
}

SdpaArgs sdpa_args(const AttnCall& c) {
  SdpaArgs a;
  const AttnGeometry g = attn_geometry(c);
  if (const char* why = common_reject(c, g)) {
    a.why = why;
    return a;
  }
  a.key_len = g.key_len;
  a.scale = c.scale;
  // is_causal is top-left (the documented tril(ones(L, S)) mask): ours when T == key_len and delta == 0.
  const bool plain_causal = g.causal && g.delta == 0 && c.q_len == g.key_len;
  a.mask = c.alibi || c.window > 0 || c.key_start || (g.causal && !plain_causal);
  a.is_causal = plain_causal && !a.mask;
  a.enable_gqa = c.heads != c.kv_heads;
  a.mask_bytes = a.mask ? dense_bias_bytes(c, g.key_len) : 0;
  a.ok = true;
  return a;
}

bool own_cuda_supports(const AttnCall& c, const char** why) {
  const char* r = nullptr;
  if (!half_type(c.dtype)) r = "our CUDA kernels take bfloat16/float16 only";
  else if (c.head_dim != 64 && c.head_dim != 128) r = "our CUDA kernels take head dim 64 or 128";
  else if (c.key_start) r = "our CUDA kernels have no left padding";
  else if (c.alibi_trainable) r = "trainable ALiBi slopes need the reference's autograd";
  if (why) *why = r ? r : "";
  return r == nullptr;
}

AttnPlan plan_attention(const AttnCall& c) {
  AttnPlan p;
  p.geometry = attn_geometry(c);
  p.flash = flash_args(c);
  p.mem_eff = mem_eff_args(c);
  p.cudnn = cudnn_args(c);
  p.cudnn_graph = cudnn_graph_args(c);
  p.sdpa = sdpa_args(c);
  auto pick = [&](AttnBackend b, const char* reason) {
    p.backend = b;
    p.reason = reason;
    return p;
  };
  if (c.dtype == AttnDType::kFloat64) return pick(AttnBackend::kReference, "float64: the reference");
  if (const char* why = common_reject(c, p.geometry)) return pick(AttnBackend::kReference, why);
  // cuDNN's graph: causal, windows, ALiBi and GQA without a dense bias or expanded K/V. Not yet measured against
  // FA2 on sm80, so there only for ALiBi (instead of a dense bias).
  if (c.cudnn_graph && p.cudnn_graph.ok && (c.sm >= 90 || c.alibi))
    return pick(AttnBackend::kCudnnGraph, "cuDNN graph (sm90+, or ALiBi without a dense bias)");
  // Hopper: cuDNN's fused attention is what LibTorch's SDPA itself picks there, and it is faster than FA2 there
  // (causal and GQA, D = 64/128, forward and backward; docs/gpu.md). Only calls it takes without a dense bias (GQA K/V
  // are expanded per call, transiently: the backward re-expands them).
  if (c.sm >= 90 && p.cudnn.ok && !p.cudnn.bias) return pick(AttnBackend::kCudnn, "cuDNN attention (sm90+)");
  if (p.flash.ok) return pick(AttnBackend::kFlash, "FlashAttention-2 maps the call");
  if (p.mem_eff.ok && p.mem_eff.bias_bytes <= kMaxDenseBiasBytes)
    return pick(AttnBackend::kMemEfficient, "FA2 cannot; memory-efficient attention with a dense bias");
  if (own_cuda_supports(c)) return pick(AttnBackend::kOwnCuda, "FA2 cannot and the dense bias is too large");
  if (p.mem_eff.ok) return pick(AttnBackend::kMemEfficient, "FA2 cannot; memory-efficient attention (large bias)");
  return pick(AttnBackend::kSdpa, "no fused kernel takes the call");
}

AttnPlan plan_attention_forced(const AttnCall& c, AttnBackend forced, bool* ok, const char** why) {
  AttnPlan p = plan_attention(c);
  p.backend = forced;
  p.reason = "forced";
  switch (forced) {
    case AttnBackend::kFlash: *ok = p.flash.ok, *why = p.flash.why; break;
    case AttnBackend::kMemEfficient: *ok = p.mem_eff.ok, *why = p.mem_eff.why; break;
    case AttnBackend::kCudnn: *ok = p.cudnn.ok, *why = p.cudnn.why; break;
    case AttnBackend::kCudnnGraph:
      *ok = c.cudnn_graph && p.cudnn_graph.ok;
      *why = !c.cudnn_graph ? "this build has no cuDNN graphs (cudnn-frontend)" : p.cudnn_graph.why;
      break;
    case AttnBackend::kSdpa: *ok = p.sdpa.ok, *why = p.sdpa.why; break;
    case AttnBackend::kOwnCuda: *ok = own_cuda_supports(c, why); break;
    case AttnBackend::kReference: *ok = true, *why = ""; break;
  }
  return p;
}

}  // namespace drope::ops
