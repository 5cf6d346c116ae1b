// The cpu_fused backend: our CPU kernel (include/drope/kernels/attention_cpu.h; flash-style forward, the
// FlashAttention-2 backward) for CPU tensors of one dtype among float32, bfloat16 and float64, and its glue:
// kernel parameters, slopes in the accumulation dtype, outputs.
#include <c10/util/BFloat16.h>

#include "attention_common.h"
#include "attention_internal.h"

namespace drope::ops::backends {

namespace {

kernels::AttnDType cpu_dtype(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kDouble: return kernels::AttnDType::kFloat64;
    case at::kBFloat16: return kernels::AttnDType::kBFloat16;
    default: return kernels::AttnDType::kFloat32;
  }
}

// CPU forward: out (B, H, T, D) in q's dtype and lse (B, H, T) in the accumulation dtype.
template <typename acc_t>
AttentionOutput cpu_forward_as(const at::Tensor& q_, const at::Tensor& k_, const at::Tensor& v_,
                               const AttentionParams& a) {
  // q/out contiguous; k/v only need unit stride in D, so KV-cache views are read in place.
  const auto q = q_.contiguous(), k = unit_d(k_), v = unit_d(v_);
  const auto acc = c10::CppTypeToScalarType<acc_t>::value;
  const at::Tensor slopes = detail::kernel_slopes(a, at::kCPU, acc);
  kernels::AttnForwardArgs<acc_t> f;
  f.p = detail::kernel_params<acc_t>(q, k, v, a, slopes.defined() ? slopes.data_ptr<acc_t>() : nullptr);
  f.dtype = cpu_dtype(q);
  auto out = at::empty_like(q);
  at::Tensor lse = at::empty({q.size(0), q.size(1), q.size(2)}, q.options().dtype(acc));
  f.q = q.data_ptr();
  f.k = k.data_ptr();
  f.v = v.data_ptr();
  f.out = out.data_ptr();
  f.lse = lse.data_ptr<acc_t>();
  kernels::attention_forward_cpu(f);
  return {out, lse};
}

template <typename acc_t>
AttentionGrads cpu_backward_as(const at::Tensor& q_, const at::Tensor& k_, const at::Tensor& v_, const at::Tensor& out_,
                               const at::Tensor& lse_, const at::Tensor& dout_, const AttentionParams& a,
                               kernels::BackwardSchedule schedule) {
  const auto dt = q_.scalar_type();
  const auto acc = c10::CppTypeToScalarType<acc_t>::value;
  const auto q = q_.contiguous(), k = k_.contiguous(), v = v_.contiguous();
  const at::Tensor out = out_.to(dt).contiguous(), dout = dout_.to(dt).contiguous(), lse = lse_.to(acc).contiguous();
  const at::Tensor slopes = detail::kernel_slopes(a, at::kCPU, acc);
  kernels::AttnBackwardArgs<acc_t> b;
  b.p = detail::kernel_params<acc_t>(q, k, v, a, slopes.defined() ? slopes.data_ptr<acc_t>() : nullptr);
  b.dtype = cpu_dtype(q);
  b.schedule = schedule;
  at::Tensor rowdot = at::empty_like(lse);
  AttentionGrads g{at::empty_like(q), at::empty_like(k), at::empty_like(v)};
  b.q = q.data_ptr();
  b.k = k.data_ptr();
  b.v = v.data_ptr();
  b.out = out.data_ptr();
  b.dout = dout.data_ptr();
  b.lse = lse.data_ptr<acc_t>();
  b.rowdot = rowdot.data_ptr<acc_t>();
  b.dq = g.dq.data_ptr();
  b.dk = g.dk.data_ptr();
  b.dv = g.dv.data_ptr();
  kernels::attention_backward_cpu(b);
  return g;
}

const char* cpu_refuses(const AttnCall& c, const AttnPlan&) {
  if (c.cuda || !c.uniform || c.dtype == kernels::AttnDType::kFloat16)
    return "our CPU kernel takes CPU tensors of one dtype among float32, bfloat16 and float64";
  if (c.key_start) return "left padding: the reference (batched decode)";
  if (c.alibi_trainable) return "trainable ALiBi slopes need the reference's autograd";
  return nullptr;
}

Forward cpu_fused_run(const AttnPlan&, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                      const AttentionParams& p, const BackendOps&) {
  const auto r = cpu_fused_forward(q, k, v, p);
  Forward f;
  f.out = r.out;
  f.lse = r.lse;
  f.state = {r.out, r.lse, {}, {}, {}};
  return f;
}

AttentionGrads cpu_fused_run_backward(const AttnPlan&, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                      const AttentionParams& p, const NativeState& s, const at::Tensor& dout,
                                      const BackendOps&) {
  return cpu_fused_backward(q, k, v, s.out, s.lse, dout, p);
}

}  // namespace

bool cpu_fused_supported(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  const auto dt = q.scalar_type();
  return q.device().is_cpu() && k.device().is_cpu() && v.device().is_cpu() && k.scalar_type() == dt &&
         v.scalar_type() == dt && (dt == at::kFloat || dt == at::kBFloat16 || dt == at::kDouble);
}

AttentionOutput cpu_fused_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  const AttentionParams& p) {
  return q.scalar_type() == at::kDouble ? cpu_forward_as<double>(q, k, v, p) : cpu_forward_as<float>(q, k, v, p);
}

AttentionGrads cpu_fused_backward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& out,
                                  const at::Tensor& lse, const at::Tensor& dout, const AttentionParams& p,
                                  kernels::BackwardSchedule schedule) {
  if (q.scalar_type() == at::kDouble) return cpu_backward_as<double>(q, k, v, out, lse, dout, p, schedule);
  return cpu_backward_as<float>(q, k, v, out, lse, dout, p, schedule);
}

const AttnBackendDef& cpu_fused_backend() {
  static const AttnBackendDef d{"cpu_fused",   "our CPU kernel",       kAttnCpu, cpu_refuses,
                                cpu_fused_run, cpu_fused_run_backward, nullptr,  nullptr};
  return d;
}

}  // namespace drope::ops::backends
