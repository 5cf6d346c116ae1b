// The registry of attention backends (include/drope/ops/attention_registry.h): the dispatch table, which is also
// the list of backends, and the plan (geometry, arguments, choice), pure functions of the call's description.
#include "drope/ops/attention_registry.h"

#include <algorithm>
#include <cstring>

#include "attention_common.h"

namespace drope::ops {

namespace backends {

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

// The dispatch table, in order of preference, and the list of backends. ROUTE(backend, devices, takes, listed):
// for a call on one of `devices`, the record backends::<backend>_backend() (defined in the backend's file,
// src/ops/attention_*.cpp) runs it when it does not refuse it and `takes` gives a reason; otherwise the
// next row decides. `listed` is the backend's place in attn_backends(), the same on each of its rows (a new
// backend takes the next number). The rows declare the records: a backend is named nowhere else.
#define DROPE_ATTN_ROUTES(ROUTE)                         \
  ROUTE(reference, kAttnCuda, float64_only, 9)           \
  ROUTE(reference, kAttnCuda, no_fused, 9)               \
  ROUTE(cudnn_graph, kAttnCuda, graph_where_measured, 4) \
  ROUTE(cudnn, kAttnCuda, cudnn_on_hopper, 3)            \
  ROUTE(flash, kAttnCuda, flash_maps, 1)                 \
  ROUTE(mem_efficient, kAttnCuda, small_bias, 2)         \
  ROUTE(own_cuda, kAttnCuda, bias_too_large, 6)          \
  ROUTE(mem_efficient, kAttnCuda, large_bias, 2)         \
  ROUTE(sdpa, kAttnCuda, last_fused, 5)                  \
  ROUTE(decode, kAttnCpu, one_query_inference, 8)        \
  ROUTE(cpu_fused, kAttnCpu, cpu_kernel, 7)              \
  ROUTE(reference, kAttnCpu | kAttnCuda, last_resort, 9)

namespace backends {
#define DROPE_ATTN_DECLARE(backend, devices, takes, listed) const AttnBackendDef& backend##_backend();
DROPE_ATTN_ROUTES(DROPE_ATTN_DECLARE)
#undef DROPE_ATTN_DECLARE
}  // namespace backends

const std::vector<AttnRoute>& attn_routes() {
#define DROPE_ATTN_ROUTE(backend, devices, takes, listed) AttnRoute{&be::backend##_backend(), devices, takes, listed},
  static const std::vector<AttnRoute> routes{DROPE_ATTN_ROUTES(DROPE_ATTN_ROUTE)};
#undef DROPE_ATTN_ROUTE
  return routes;
}

const std::vector<const AttnBackendDef*>& attn_backends() {
  static const std::vector<const AttnBackendDef*> list = [] {
    std::vector<const AttnRoute*> first;  // each backend's first row
    for (const auto& r : attn_routes())
      if (std::none_of(first.begin(), first.end(), [&](const AttnRoute* f) { return f->backend == r.backend; }))
        first.push_back(&r);
    std::stable_sort(first.begin(), first.end(),
                     [](const AttnRoute* a, const AttnRoute* b) { return a->listed < b->listed; });
    std::vector<const AttnBackendDef*> v;
    for (const auto* r : first) v.push_back(r->backend);
    return v;
  }();
  return list;
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
