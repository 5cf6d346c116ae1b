// The flash backend: LibTorch's FlashAttention-2 (at::_flash_attention_forward / _backward), its arguments
// (flash_args, attention_plan.h) and its glue: layout (B, T, H, D), keys sliced to key_len, varlen tables for
// left-padded inference.
#include <tuple>
#include <vector>

#include <ATen/ops/_flash_attention_backward.h>
#include <ATen/ops/_flash_attention_forward.h>

#include "attention_common.h"

namespace drope::ops {

FlashArgs flash_args(const AttnCall& c) {
  FlashArgs a;
  const AttnGeometry g = attn_geometry(c);
  // flash_api.cpp mha_fwd/mha_varlen_fwd: sm80+, fp16/bf16, head_size % 8 == 0 and <= 256.
  if (!backends::half_type(c.dtype)) return backends::refuse(a, "FA2 takes bfloat16/float16 only");
  if (c.sm < 80) return backends::refuse(a, "FA2 needs sm80 or newer");
  if (c.head_dim % 8 != 0 || c.head_dim > 256) return backends::refuse(a, "FA2 needs head dim % 8 == 0 and <= 256");
  if (const char* why = backends::common_reject(c, g)) return backends::refuse(a, why);
  // LibTorch's FA2 is built with FLASHATTENTION_DISABLE_ALIBI: flash_api.cpp set_params_alibi throws "This flash
  // attention build does not support alibi" (seen on an H100 with torch 2.11.0+cu130, docs/gpu.md), and its
  // _flash_attention_backward passes no slopes at all.
  if (c.alibi) return backends::refuse(a, "LibTorch's FA2 build has no ALiBi");
  if (c.training && c.key_start)
    return backends::refuse(a, "left padding runs through FA2's varlen forward only (inference)");
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
  if (c.window > 0 && a.window_left < 0)
    return backends::refuse(a, "window lower bound lies past FA2's bottom-right diagonal");
  a.is_causal = g.causal && g.delta == 0 && c.window == 0;
  if (a.is_causal) a.window_left = a.window_right = -1;  // mha_fwd sets window_right = 0 itself
  a.ok = true;
  return a;
}

namespace backends {

namespace {

// FA2 varlen tables of a left-padded call: one sequence per (batch, KV head), rows of k viewed as
// (rows, 1, D). Returns {k_rows, v_rows, cu_q, cu_k, seqused_k}.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> varlen_tables(const at::Tensor& q, at::Tensor k,
                                                                                     at::Tensor v,
                                                                                     const AttentionParams& p,
                                                                                     int64_t key_len) {
  const int64_t B = k.size(0), Hkv = k.size(1), T = q.size(2), D = k.size(3), N = B * Hkv;
  // A KV cache (B, Hkv, capacity, D) narrowed to its length is read in place: sequence (b, g) starts at row
  // (b·Hkv + g)·capacity. Anything else is made contiguous (capacity = S).
  auto rows_layout = [&](const at::Tensor& t) {
    return t.stride(3) == 1 && t.stride(2) == D && t.stride(1) % t.stride(2) == 0 && t.stride(0) == Hkv * t.stride(1);
  };
  if (!rows_layout(k) || !rows_layout(v) || k.stride(1) != v.stride(1)) {
    k = k.contiguous();
    v = v.contiguous();
  }
  const int64_t rows_per_seq = k.stride(1) / k.stride(2);
  TORCH_CHECK(N * rows_per_seq < (int64_t(1) << 31), "attention (FA2 varlen): ", N * rows_per_seq,
              " key rows overflow int32 sequence offsets");
  auto k_rows = k.as_strided({N * rows_per_seq, 1, D}, {D, D, 1}, k.storage_offset());
  auto v_rows = v.as_strided({N * rows_per_seq, 1, D}, {D, D, 1}, v.storage_offset());
  const auto ks = p.key_start.to(at::kCPU, at::kLong).contiguous();
  std::vector<int32_t> cu_q(static_cast<size_t>(N + 1)), cu_k(static_cast<size_t>(N + 1)), used(static_cast<size_t>(N));
  for (int64_t n = 0; n <= N; ++n) {
    cu_q[size_t(n)] = int32_t(n * T);
    if (n == N) {
      cu_k[size_t(n)] = int32_t(N * rows_per_seq);
      break;
    }
    const int64_t start = ks.data_ptr<int64_t>()[n / Hkv];
    cu_k[size_t(n)] = int32_t(n * rows_per_seq + start);
    used[size_t(n)] = int32_t(key_len - start);
  }
  auto i32 = at::TensorOptions().dtype(at::kInt);
  auto to_dev = [&](std::vector<int32_t>& x) {
    return at::from_blob(x.data(), {int64_t(x.size())}, i32).clone().to(q.device());
  };
  return {k_rows, v_rows, to_dev(cu_q), to_dev(cu_k), to_dev(used)};
}

Forward flash_forward(const AttnPlan& plan, const at::Tensor& q_, const at::Tensor& k_, const at::Tensor& v_,
                      const AttentionParams& p, const BackendOps& ops) {
  const FlashArgs& a = plan.flash;
  const auto q = unit_d(q_), k = unit_d(k_).narrow(2, 0, a.key_len), v = unit_d(v_).narrow(2, 0, a.key_len);
  const int64_t B = q.size(0), H = q.size(1), T = q.size(2), D = q.size(3), Hkv = k.size(1), G = H / Hkv;
  FlashFwdIn in;
  in.max_q = a.max_q;
  in.max_k = a.max_k;
  in.is_causal = a.is_causal;
  in.scale = a.scale;
  in.window_left = a.window_left;
  in.window_right = a.window_right;
  Forward f;
  at::Tensor lse;  // (B, H, T) in FA2's convention
  if (!a.varlen) {
    in.q = q.transpose(1, 2);  // (B, T, H, D)
    in.k = k.transpose(1, 2);  // (B, key_len, Hkv, D)
    in.v = v.transpose(1, 2);
    auto o = ops.flash_fwd(in);
    f.state = {o.out, o.lse, o.rng_state, o.unused, {}};
    f.out = o.out.transpose(1, 2);  // (B, H, T, D)
    lse = o.lse.reshape({B, H, T});
  } else {
    auto [k_rows, v_rows, cu_q, cu_k, used] = varlen_tables(q, k, v, p, a.key_len);
    // q rows n·T + t of sequence n = (b, g), its G query heads as FA2 heads.
    in.q = q.reshape({B, Hkv, G, T, D}).permute({0, 1, 3, 2, 4}).reshape({B * Hkv * T, G, D});
    in.k = k_rows;
    in.v = v_rows;
    in.cu_q = cu_q;
    in.cu_k = cu_k;
    in.seqused_k = used;
    auto o = ops.flash_fwd(in);
    f.state = {o.out, o.lse, o.rng_state, o.unused, {}};
    f.out = o.out.view({B, Hkv, T, G, D}).permute({0, 1, 3, 2, 4}).reshape({B, H, T, D});
    lse = o.lse.view({G, B, Hkv, T}).permute({1, 2, 0, 3}).reshape({B, H, T});  // (G, N·T) → (B, H, T)
  }
  f.lse = acc_lse(lse, q);
  return f;
}

AttentionGrads flash_backward(const AttnPlan& plan, const at::Tensor& q_, const at::Tensor& k_, const at::Tensor& v_,
                              const AttentionParams&, const NativeState& s, const at::Tensor& dout,
                              const BackendOps& ops) {
  const FlashArgs& a = plan.flash;
  TORCH_CHECK(!a.varlen, "attention (FA2): no backward for left-padded calls");
  const int64_t S = k_.size(2);
  const auto q = unit_d(q_), k = unit_d(k_).narrow(2, 0, a.key_len), v = unit_d(v_).narrow(2, 0, a.key_len);
  FlashBwdIn in;
  in.dout = dout.transpose(1, 2);
  in.q = q.transpose(1, 2);
  in.k = k.transpose(1, 2);
  in.v = v.transpose(1, 2);
  in.out = s.out;
  in.lse = s.lse;
  in.rng_state = s.rng0;
  in.unused = s.rng1;
  in.max_q = a.max_q;
  in.max_k = a.max_k;
  in.is_causal = a.is_causal;
  in.scale = a.scale;
  in.window_left = a.window_left;
  in.window_right = a.window_right;
  auto [dq, dk, dv] = ops.flash_bwd(in);
  return {dq.transpose(1, 2), pad_keys(dk.transpose(1, 2), S), pad_keys(dv.transpose(1, 2), S)};
}

void bind_flash(BackendOps& o) {
  o.flash_fwd = [](const FlashFwdIn& in) {
    auto [out, lse, rng, unused, dbg] = at::_flash_attention_forward(
        in.q, in.k, in.v, opt(in.cu_q), opt(in.cu_k), in.max_q, in.max_k, /*dropout_p=*/0.0, in.is_causal,
        /*return_debug_mask=*/false, in.scale, window_opt(in.window_left), window_opt(in.window_right),
        opt(in.seqused_k), /*alibi_slopes=*/std::nullopt);  // LibTorch builds FA2 without ALiBi
    (void)dbg;
    return FlashFwdOut{out, lse, rng, unused};
  };
  o.flash_bwd = [](const FlashBwdIn& in) {
    return at::_flash_attention_backward(in.dout, in.q, in.k, in.v, in.out, in.lse, at::Tensor(), at::Tensor(),
                                         in.max_q, in.max_k, /*dropout_p=*/0.0, in.is_causal, in.rng_state, in.unused,
                                         in.scale, window_opt(in.window_left), window_opt(in.window_right));
  };
}

const char* flash_refuses(const AttnCall&, const AttnPlan& p) { return refusal(p.flash); }

}  // namespace

const AttnBackendDef& flash_backend() {
  static const AttnBackendDef d{"flash",       "FlashAttention-2", kAttnCuda,  flash_refuses,
                                flash_forward, flash_backward,     bind_flash, nullptr};
  return d;
}

}  // namespace backends

}  // namespace drope::ops
