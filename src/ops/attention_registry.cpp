// The registry of attention backends (include/drope/ops/attention_registry.h): the list of backends, the
// dispatch table and the plan (geometry, arguments, choice), pure functions of the call's description.
#include "drope/ops/attention_registry.h"

#include <algorithm>
#include <cstring>

#include "attention_common.h"

namespace drope::ops {

namespace backends {

// The records, one per file (src/ops/attention_<backend>.cpp).
const AttnBackendDef& flash_backend();
const AttnBackendDef& mem_efficient_backend();
const AttnBackendDef& cudnn_backend();
const AttnBackendDef& cudnn_graph_backend();
const AttnBackendDef& sdpa_backend();
const AttnBackendDef& own_cuda_backend();
const AttnBackendDef& cpu_fused_backend();
const AttnBackendDef& decode_backend();
const AttnBackendDef& reference_backend();

int64_t dense_bias_bytes(const AttnCall& c, int64_t key_len) {
  int64_t elem = 2;
  if (c.dtype == kernels::AttnDType::kFloat64) elem = 8;
  if (c.dtype == kernels::AttnDType::kFloat32) elem = 4;
  return (c.key_start ? c.batch : 1) * (c.alibi ? c.heads : 1) * c.q_len * round_up(key_len, 16) * elem;
}

const char* common_reject(const AttnCall& c, const AttnGeometry& g) {
  if (c.alibi_trainable) return "trainable ALiBi slopes need the reference's autograd";
  if (g.empty_rows) return "some query sees no key (reference semantics: NaN rows)";
  return nullptr;
}

}  // namespace backends

namespace {

using kernels::AttnDType;
namespace be = backends;

// The reasons of the routes: each returns why its row takes the call, or nullptr to leave it to the next row.
const char* float64_only(const AttnCall& c, const AttnPlan&) {
  return c.dtype == AttnDType::kFloat64 ? "float64: the reference" : nullptr;
}
const char* no_fused(const AttnCall& c, const AttnPlan& p) { return be::common_reject(c, p.geometry); }
// cuDNN's graph: causal, windows, ALiBi and GQA without a dense bias or expanded K/V. Not yet measured against
// FA2 on sm80, so there only for ALiBi (instead of a dense bias).
const char* graph_where_measured(const AttnCall& c, const AttnPlan&) {
  return c.sm >= 90 || c.alibi ? "cuDNN graph (sm90+, or ALiBi without a dense bias)" : nullptr;
}
// Hopper: cuDNN's fused attention is what LibTorch's SDPA itself picks there, and it is faster than FA2 there
// (causal and GQA, D = 64/128, forward and backward; docs/gpu.md). Only calls it takes without a dense bias (GQA
// K/V are expanded per call, transiently: the backward re-expands them).
const char* cudnn_on_hopper(const AttnCall& c, const AttnPlan& p) {
  return c.sm >= 90 && !p.cudnn.bias ? "cuDNN attention (sm90+)" : nullptr;
}
const char* flash_maps(const AttnCall&, const AttnPlan&) { return "FlashAttention-2 maps the call"; }
const char* small_bias(const AttnCall&, const AttnPlan& p) {
  return p.mem_eff.bias_bytes <= kMaxDenseBiasBytes ? "FA2 cannot; memory-efficient attention with a dense bias"
                                                    : nullptr;
}
const char* bias_too_large(const AttnCall&, const AttnPlan&) { return "FA2 cannot and the dense bias is too large"; }
const char* large_bias(const AttnCall&, const AttnPlan&) {
  return "FA2 cannot; memory-efficient attention (large bias)";
}
const char* last_fused(const AttnCall&, const AttnPlan&) { return "no fused kernel takes the call"; }
// CPU, one query per row (decoding from a KV cache), no gradients: two grouped matrix products read each cached
// key and value once, where the kernel's per-(batch, head) items would read them G times.
const char* one_query_inference(const AttnCall& c, const AttnPlan&) {
  return c.q_len == 1 && !c.training ? "one query per row without gradients (KV-cache decoding)" : nullptr;
}
const char* cpu_kernel(const AttnCall&, const AttnPlan&) { return "our CPU kernel takes the call"; }
const char* last_resort(const AttnCall&, const AttnPlan&) { return "no kernel takes the call"; }

AttnCall cuda_view(const AttnCall& c) {
  AttnCall r = c;
  r.cuda = true;
  return r;
}

}  // namespace

const std::vector<const AttnBackendDef*>& attn_backends() {
  static const std::vector<const AttnBackendDef*> list{
      &be::flash_backend(),       &be::mem_efficient_backend(), &be::cudnn_backend(),
      &be::cudnn_graph_backend(), &be::sdpa_backend(),          &be::own_cuda_backend(),
      &be::cpu_fused_backend(),   &be::decode_backend(),        &be::reference_backend()};
  return list;
}

const std::vector<AttnRoute>& attn_routes() {
  static const std::vector<AttnRoute> routes{
      {&be::reference_backend(), kAttnCuda, float64_only},
      {&be::reference_backend(), kAttnCuda, no_fused},
      {&be::cudnn_graph_backend(), kAttnCuda, graph_where_measured},
      {&be::cudnn_backend(), kAttnCuda, cudnn_on_hopper},
      {&be::flash_backend(), kAttnCuda, flash_maps},
      {&be::mem_efficient_backend(), kAttnCuda, small_bias},
      {&be::own_cuda_backend(), kAttnCuda, bias_too_large},
      {&be::mem_efficient_backend(), kAttnCuda, large_bias},
      {&be::sdpa_backend(), kAttnCuda, last_fused},
      {&be::decode_backend(), kAttnCpu, one_query_inference},
      {&be::cpu_fused_backend(), kAttnCpu, cpu_kernel},
      {&be::reference_backend(), kAttnCpu | kAttnCuda, last_resort},
  };
  return routes;
}

const AttnBackendDef& attn_backend_def(AttnBackend b) {
  for (const auto* d : attn_backends())
    if (std::strcmp(d->name, b.name) == 0) return *d;
  TORCH_CHECK(false, "attention: no backend is registered as ", b.name);
}

bool parse_attn_backend(const char* name, AttnBackend* out) {
  for (const auto* d : attn_backends())
    if (std::strcmp(name, d->name) == 0) {
      *out = AttnBackend{d->name};
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

AttnPlan route_attention(const AttnCall& c, const AttnBackendDef* excluded) {
  AttnPlan p;
  p.geometry = attn_geometry(c);
  if (c.cuda) {
    p.flash = flash_args(c);
    p.mem_eff = mem_eff_args(c);
    p.cudnn = cudnn_args(c);
    p.cudnn_graph = cudnn_graph_args(c);
    p.sdpa = sdpa_args(c);
  }
  const unsigned device = c.cuda ? kAttnCuda : kAttnCpu;
  for (const auto& r : attn_routes()) {
    if (!(r.devices & device) || !(r.backend->devices & device) || r.backend == excluded) continue;
    if (r.backend->refuses(c, p)) continue;
    if (const char* why = r.takes(c, p)) {
      p.backend = AttnBackend{r.backend->name};
      p.reason = why;
      return p;
    }
  }
  TORCH_CHECK(false, "attention: no backend takes the call");
}

AttnPlan plan_attention(const AttnCall& c) { return route_attention(cuda_view(c)); }

AttnPlan plan_attention_forced(const AttnCall& c, AttnBackend forced, bool* ok, const char** why) {
  const AttnCall call = cuda_view(c);
  AttnPlan p = route_attention(call);
  const AttnBackendDef& d = attn_backend_def(forced);
  p.backend = AttnBackend{d.name};
  p.reason = "forced";
  const char* r = d.refuses(call, p);
  *ok = r == nullptr;
  *why = r ? r : "";
  return p;
}

}  // namespace drope::ops
