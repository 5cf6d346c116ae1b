// The reference and decode backends: ops::reference_attention (plain ATen, float32 or float64 compute,
// differentiable by itself). decode is the same computation chosen for one-query CPU calls without gradients
// (KV-cache decoding), where its two grouped matrix products read each cached key and value once.
#include "attention_common.h"
#include "attention_internal.h"

namespace drope::ops::backends {

namespace {

const char* never(const AttnCall&, const AttnPlan&) { return nullptr; }

Forward reference_run(const AttnPlan&, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                      const AttentionParams& p, const BackendOps&) {
  const auto r = detail::reference_attention_unchecked(q, k, v, p);
  Forward f;
  f.out = r.out;
  f.lse = r.lse;
  return f;
}

}  // namespace

const AttnBackendDef& reference_backend() {
  static const AttnBackendDef d{"reference", "the reference", kAttnCpu | kAttnCuda, never, reference_run, nullptr,
                                nullptr,     nullptr};
  return d;
}

const AttnBackendDef& decode_backend() {
  static const AttnBackendDef d{"decode", "grouped decoding products", kAttnCpu, never, reference_run, nullptr, nullptr,
                                nullptr};
  return d;
}

}  // namespace drope::ops::backends
