// The mem_efficient backend: LibTorch's CUTLASS memory-efficient attention (at::_efficient_attention_forward /
// _backward), its arguments (mem_eff_args, attention_plan.h) and its glue: layout (B, T, H, D), a dense additive
// bias for what its mask types cannot say, K/V heads expanded for GQA.
#include <ATen/ops/_efficient_attention_backward.h>
#include <ATen/ops/_efficient_attention_forward.h>

#include "attention_common.h"

namespace drope::ops {

MemEffArgs mem_eff_args(const AttnCall& c) {
  MemEffArgs a;
  const AttnGeometry g = attn_geometry(c);
  if (c.dtype == kernels::AttnDType::kFloat64)
    return backends::refuse(a, "memory-efficient attention takes float32/bfloat16/float16");
  if (c.sm < 50) return backends::refuse(a, "memory-efficient attention needs sm50 or newer");
  // sdp_utils.cpp check_head_dim_size_mem_efficient: head dim a multiple of 8 (16-bit) or 4 (float32).
  const int64_t align = backends::half_type(c.dtype) ? 8 : 4;
  if (c.head_dim % align != 0 || c.head_dim > 256)
    return backends::refuse(a, "memory-efficient attention needs an aligned head dim <= 256");
  if (const char* why = backends::common_reject(c, g)) return backends::refuse(a, why);
  a.key_len = g.key_len;
  a.scale = c.scale;
  a.custom_mask_type = g.causal && g.delta == 0 ? 2 : 0;  // 2: causal from the bottom right, ours when delta == 0
  a.bias = backends::needs_dense_bias(c, g, a.custom_mask_type != 0);
  a.expand_kv = c.heads != c.kv_heads;
  a.lse_cols = backends::round_up(c.q_len, 32);
  a.bias_bytes = a.bias ? backends::dense_bias_bytes(c, g.key_len) : 0;
  a.ok = true;
  return a;
}

namespace backends {

namespace {

Forward mem_eff_forward(const AttnPlan& plan, const at::Tensor& q_, const at::Tensor& k, const at::Tensor& v,
                        const AttentionParams& p, const BackendOps& ops) {
  const MemEffArgs& a = plan.mem_eff;
  const auto q = unit_d(q_);
  auto in3 = bias_inputs(plan, q, k, v, p, a.key_len, a.expand_kv, a.bias, a.custom_mask_type == 0);
  MemEffFwdIn in;
  in.q = q.transpose(1, 2);
  in.k = in3.k.transpose(1, 2);
  in.v = in3.v.transpose(1, 2);
  in.bias = in3.bias;
  in.custom_mask_type = a.custom_mask_type;
  in.scale = a.scale;
  auto o = ops.mem_eff_fwd(in);
  Forward f;
  f.state = {o.out, o.lse, o.seed, o.offset, in3.bias};
  f.out = o.out.transpose(1, 2);
  f.lse = acc_lse(o.lse.narrow(2, 0, q.size(2)), q);
  return f;
}

AttentionGrads mem_eff_backward(const AttnPlan& plan, const at::Tensor& q_, const at::Tensor& k, const at::Tensor& v,
                                const AttentionParams& p, const NativeState& s, const at::Tensor& dout,
                                const BackendOps& ops) {
  const MemEffArgs& a = plan.mem_eff;
  const auto q = unit_d(q_);
  const int64_t G = a.expand_kv ? q.size(1) / k.size(1) : 1;
  auto in3 = bias_inputs(plan, q, k, v, p, a.key_len, a.expand_kv, false, false);
  MemEffBwdIn in;
  in.dout = dout.transpose(1, 2);
  in.q = q.transpose(1, 2);
  in.k = in3.k.transpose(1, 2);
  in.v = in3.v.transpose(1, 2);
  in.bias = s.bias;
  in.out = s.out;
  in.lse = s.lse;
  in.seed = s.rng0;
  in.offset = s.rng1;
  in.custom_mask_type = a.custom_mask_type;
  in.scale = a.scale;
  auto [dq, dk, dv] = ops.mem_eff_bwd(in);
  const int64_t S = k.size(2);
  return {dq.transpose(1, 2), pad_keys(reduce_heads(dk.transpose(1, 2), G), S),
          pad_keys(reduce_heads(dv.transpose(1, 2), G), S)};
}

void bind_mem_eff(BackendOps& o) {
  o.mem_eff_fwd = [](const MemEffFwdIn& in) {
    auto [out, lse, seed, offset, mq, mk] = at::_efficient_attention_forward(
        in.q, in.k, in.v, opt(in.bias), std::nullopt, std::nullopt, std::nullopt, std::nullopt,
        /*dropout_p=*/0.0, in.custom_mask_type, /*compute_log_sumexp=*/true, in.scale);
    (void)mq, (void)mk;
    return MemEffFwdOut{out, lse, seed, offset};
  };
  o.mem_eff_bwd = [](const MemEffBwdIn& in) {
    auto [dq, dk, dv, db] = at::_efficient_attention_backward(
        in.dout, in.q, in.k, in.v, opt(in.bias), in.out, std::nullopt, std::nullopt, in.q.size(1), in.k.size(1), in.lse,
        /*dropout_p=*/0.0, in.seed, in.offset, in.custom_mask_type, /*bias_requires_grad=*/false, in.scale);
    (void)db;
    return Grads3{dq, dk, dv};
  };
}

const char* mem_eff_refuses(const AttnCall&, const AttnPlan& p) { return refusal(p.mem_eff); }

}  // namespace

const AttnBackendDef& mem_efficient_backend() {
  static const AttnBackendDef d{"mem_efficient", "memory-efficient attention",
                                kAttnCuda,       mem_eff_refuses,
                                mem_eff_forward, mem_eff_backward,
                                bind_mem_eff,    nullptr};
  return d;
}

}  // namespace backends

}  // namespace drope::ops
