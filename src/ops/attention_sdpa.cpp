// The sdpa backend: at::scaled_dot_product_attention (LibTorch's own dispatcher, differentiable by itself; no
// log-sum-exp), its arguments (sdpa_args, attention_plan.h) and its glue: keys sliced to key_len, top-left
// is_causal or a dense additive mask, enable_gqa.
#include <ATen/ops/scaled_dot_product_attention.h>

#include "attention_common.h"

namespace drope::ops {

SdpaArgs sdpa_args(const AttnCall& c) {
  SdpaArgs a;
  const AttnGeometry g = attn_geometry(c);
  if (const char* why = backends::common_reject(c, g)) {
    a.why = why;
    return a;
  }
  a.key_len = g.key_len;
  a.scale = c.scale;
  const bool plain_causal = backends::top_left_causal_is_ours(c, g);  // is_causal is top-left
  a.mask = backends::needs_dense_bias(c, g, plain_causal);
  a.is_causal = plain_causal && !a.mask;
  a.enable_gqa = c.heads != c.kv_heads;
  a.mask_bytes = a.mask ? backends::dense_bias_bytes(c, g.key_len) : 0;
  a.ok = true;
  return a;
}

namespace backends {

namespace {

Forward sdpa_forward(const AttnPlan& plan, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                     const AttentionParams& p, const BackendOps& ops) {
  const SdpaArgs& a = plan.sdpa;
  SdpaIn in;
  in.q = q;
  in.k = k.narrow(2, 0, a.key_len);
  in.v = v.narrow(2, 0, a.key_len);
  if (a.mask) in.mask = dense_bias(q, p, plan.geometry, a.key_len, !a.is_causal);
  in.is_causal = a.is_causal;
  in.scale = a.scale;
  in.enable_gqa = a.enable_gqa;
  Forward f;
  f.out = ops.sdpa(in);
  return f;
}

void bind_sdpa(BackendOps& o) {
  o.sdpa = [](const SdpaIn& in) {
    return at::scaled_dot_product_attention(in.q, in.k, in.v, opt(in.mask), /*dropout_p=*/0.0, in.is_causal, in.scale,
                                            in.enable_gqa);
  };
}

const char* sdpa_refuses(const AttnCall&, const AttnPlan& p) { return refusal(p.sdpa); }

}  // namespace

const AttnBackendDef& sdpa_backend() {
  static const AttnBackendDef d{
      "sdpa", "scaled_dot_product_attention", kAttnCuda, sdpa_refuses, sdpa_forward, nullptr, bind_sdpa, nullptr};
  return d;
}

}  // namespace backends

}  // namespace drope::ops
