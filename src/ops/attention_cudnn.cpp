// The cudnn backend: LibTorch's cuDNN attention (at::_scaled_dot_product_cudnn_attention(+_backward)), its
// arguments (cudnn_args, attention_plan.h) and its glue: layout (B, H, T, D), top-left causality or a dense
// additive bias, K/V heads expanded for GQA.
#include <ATen/ops/_scaled_dot_product_cudnn_attention.h>
#include <ATen/ops/_scaled_dot_product_cudnn_attention_backward.h>

#include "attention_common.h"

namespace drope::ops {

CudnnArgs cudnn_args(const AttnCall& c) {
  CudnnArgs a;
  const AttnGeometry g = attn_geometry(c);
  if (!backends::half_type(c.dtype)) return backends::refuse(a, "cuDNN attention takes bfloat16/float16 only");
  if (c.sm < 80) return backends::refuse(a, "cuDNN attention needs sm80 or newer");
  if (c.head_dim % 8 != 0 || c.head_dim > 128)
    return backends::refuse(a, "cuDNN attention needs head dim % 8 == 0 and <= 128");
  if (const char* why = backends::common_reject(c, g)) return backends::refuse(a, why);
  a.key_len = g.key_len;
  a.scale = c.scale;
  a.is_causal = backends::top_left_causal_is_ours(c, g);  // its causal mask is top-left
  a.bias = backends::needs_dense_bias(c, g, a.is_causal);
  a.expand_kv = c.heads != c.kv_heads;
  a.bias_bytes = a.bias ? backends::dense_bias_bytes(c, g.key_len) : 0;
  a.ok = true;
  return a;
}

namespace backends {

namespace {

Forward cudnn_forward(const AttnPlan& plan, const at::Tensor& q_, const at::Tensor& k, const at::Tensor& v,
                      const AttentionParams& p, const BackendOps& ops) {
  const CudnnArgs& a = plan.cudnn;
  const auto q = unit_d(q_);
  auto in3 = bias_inputs(plan, q, k, v, p, a.key_len, a.expand_kv, a.bias, !a.is_causal);
  CudnnFwdIn in{q, in3.k, in3.v, in3.bias, a.is_causal, a.scale};
  auto o = ops.cudnn_fwd(in);
  Forward f;
  f.state = {o.out, o.lse, o.seed, o.offset, in3.bias};
  f.out = o.out;
  f.lse = acc_lse(o.lse.reshape({q.size(0), q.size(1), q.size(2)}), q);
  return f;
}

AttentionGrads cudnn_backward(const AttnPlan& plan, const at::Tensor& q_, const at::Tensor& k, const at::Tensor& v,
                              const AttentionParams& p, const NativeState& s, const at::Tensor& dout,
                              const BackendOps& ops) {
  const CudnnArgs& a = plan.cudnn;
  const auto q = unit_d(q_);
  const int64_t G = a.expand_kv ? q.size(1) / k.size(1) : 1;
  auto in3 = bias_inputs(plan, q, k, v, p, a.key_len, a.expand_kv, false, false);
  CudnnBwdIn in{dout, q, in3.k, in3.v, s.out, s.lse, s.rng0, s.rng1, s.bias, a.is_causal, a.scale};
  auto [dq, dk, dv] = ops.cudnn_bwd(in);
  const int64_t S = k.size(2);
  return {dq, pad_keys(reduce_heads(dk, G), S), pad_keys(reduce_heads(dv, G), S)};
}

void bind_cudnn(BackendOps& o) {
  o.cudnn_fwd = [](const CudnnFwdIn& in) {
    auto r = at::_scaled_dot_product_cudnn_attention(in.q, in.k, in.v, opt(in.bias), /*compute_log_sumexp=*/true,
                                                     /*dropout_p=*/0.0, in.is_causal,
                                                     /*return_debug_mask=*/false, in.scale);
    return CudnnFwdOut{std::get<0>(r), std::get<1>(r), std::get<6>(r), std::get<7>(r)};
  };
  o.cudnn_bwd = [](const CudnnBwdIn& in) {
    return at::_scaled_dot_product_cudnn_attention_backward(
        in.dout, in.q, in.k, in.v, in.out, in.lse, in.seed, in.offset, in.bias, at::Tensor(), at::Tensor(),
        in.q.size(2), in.k.size(2), /*dropout_p=*/0.0, in.is_causal, in.scale);
  };
}

const char* cudnn_refuses(const AttnCall&, const AttnPlan& p) { return refusal(p.cudnn); }

}  // namespace

const AttnBackendDef& cudnn_backend() {
  static const AttnBackendDef d{"cudnn",       "cuDNN attention", kAttnCuda,  cudnn_refuses,
                                cudnn_forward, cudnn_backward,    bind_cudnn, nullptr};
  return d;
}

}  // namespace backends

}  // namespace drope::ops
