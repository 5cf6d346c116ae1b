// The fused attention op: routes validated calls to the CPU kernel (kernels/attention_cpu.h) or, for CUDA
// tensors, to the CUDA glue (cuda_glue.h), with the kernels' FlashAttention-2 backward under autograd.
#include <mutex>
#include <set>
#include <string>
#include <tuple>

#include <c10/util/BFloat16.h>
#include <torch/autograd.h>

#include "attention_internal.h"
#include "drope/kernels/attention_cpu.h"
#include "drope/ops/attention.h"
#include "drope/ops/attention_backends.h"
#include "drope/ops/attention_plan.h"
#ifdef DROPE_WITH_CUDA
#include "cuda_glue.h"
#endif
#include "cudnn_graph.h"
#include "drope/core/log.h"

namespace drope::ops {

namespace {

// CPU tensors of one dtype among float32, bfloat16 and float64.
bool cpu_supported(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  const auto dt = q.scalar_type();
  return q.device().is_cpu() && k.device().is_cpu() && v.device().is_cpu() && k.scalar_type() == dt &&
         v.scalar_type() == dt && (dt == at::kFloat || dt == at::kBFloat16 || dt == at::kDouble);
}

// Whether the CUDA kernels take these inputs (always false without them).
bool cuda_supported(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
#ifdef DROPE_WITH_CUDA
  return cuda_glue::supported(q, k, v);
#else
  (void)q, (void)k, (void)v;
  return false;
#endif
}

kernels::AttnDType cpu_dtype(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kDouble: return kernels::AttnDType::kFloat64;
    case at::kBFloat16: return kernels::AttnDType::kBFloat16;
    default: return kernels::AttnDType::kFloat32;
  }
}

// q/out contiguous; k/v only need unit stride in D, so KV-cache views are read in place.
at::Tensor unit_d(const at::Tensor& t) { return t.stride(3) == 1 ? t : t.contiguous(); }

// CPU forward: out (B, H, T, D) in q's dtype and lse (B, H, T) in the accumulation dtype.
template <typename acc_t>
AttentionOutput cpu_forward_as(const at::Tensor& q_, const at::Tensor& k_, const at::Tensor& v_,
                               const AttentionParams& a) {
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

AttentionOutput cpu_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const AttentionParams& a) {
  return q.scalar_type() == at::kDouble ? cpu_forward_as<double>(q, k, v, a) : cpu_forward_as<float>(q, k, v, a);
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

AttentionGrads cpu_backward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& out,
                            const at::Tensor& lse, const at::Tensor& dout, const AttentionParams& a,
                            kernels::BackwardSchedule schedule = kernels::BackwardSchedule::kAuto) {
  if (q.scalar_type() == at::kDouble) return cpu_backward_as<double>(q, k, v, out, lse, dout, a, schedule);
  return cpu_backward_as<float>(q, k, v, out, lse, dout, a, schedule);
}

thread_local bool reference_forced = false;
thread_local int forced_backend = -1;  // an AttnBackend while a ForceAttentionBackend is alive

// Whether a backward will follow (autograd records the call).
bool needs_grad(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  return at::GradMode::is_enabled() && (q.requires_grad() || k.requires_grad() || v.requires_grad());
}

// Differentiable fused attention: the CPU (or, for CUDA tensors, the CUDA) kernel's forward, and its
// FlashAttention-2 backward.
class FusedAttentionFunction : public torch::autograd::Function<FusedAttentionFunction> {
 public:
  // q (B, H, T, D), k/v (B, H_kv, S, D) → out (B, H, T, D).
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k,
                            const at::Tensor& v, const AttentionParams* p) {
#ifdef DROPE_WITH_CUDA
    auto res = q.is_cuda() ? cuda_glue::forward(q, k, v, *p) : cpu_forward(q, k, v, *p);
#else
    auto res = cpu_forward(q, k, v, *p);
#endif
    ctx->save_for_backward({q, k, v, res.out, res.lse});
    ctx->saved_data["causal"] = p->causal;
    ctx->saved_data["window"] = p->window;
    ctx->saved_data["scale"] = p->scale;
    ctx->saved_data["q_offset"] = p->q_offset;
    ctx->saved_data["alibi_slopes"] = p->alibi_slopes.defined() ? p->alibi_slopes.detach() : at::Tensor();
    return res.out;
  }

  // dout (B, H, T, D) → dq, dk, dv (no gradient for the parameters).
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &q = saved[0], &k = saved[1], &v = saved[2], &out = saved[3], &lse = saved[4];
    AttentionParams p;
    p.causal = ctx->saved_data["causal"].toBool();
    p.window = ctx->saved_data["window"].toInt();
    p.scale = ctx->saved_data["scale"].toDouble();
    p.q_offset = ctx->saved_data["q_offset"].toInt();
    p.alibi_slopes = ctx->saved_data["alibi_slopes"].toTensor();
    if (!grads[0].defined()) return {at::zeros_like(q), at::zeros_like(k), at::zeros_like(v), at::Tensor()};
#ifdef DROPE_WITH_CUDA
    if (q.is_cuda()) {
      auto [dq, dk, dv] = cuda_glue::backward(q, k, v, out, lse, grads[0], p);
      return {dq, dk, dv, at::Tensor()};
    }
#endif
    auto g = cpu_backward(q, k, v, out, lse, grads[0], p);
    return {g.dq, g.dk, g.dv, at::Tensor()};
  }
};

#ifdef DROPE_WITH_CUDA
// The plan of a validated CUDA call (forced backend while a ForceAttentionBackend is alive).
// Whether cuDNN builds the graphs of a kCudnnGraph plan (check_support, cached per shape); *why: its reason.
bool cudnn_graph_builds(const at::Tensor& q, const at::Tensor& k, const AttnPlan& plan, bool training,
                        std::string* why) {
#ifdef DROPE_WITH_CUDNN_FRONTEND
  return cudnn_graph::supported(q, k, plan.cudnn_graph, training, why);
#else
  (void)q, (void)k, (void)plan, (void)training;
  *why = "this build has no cuDNN graphs";
  return false;
#endif
}

// A reason cuDNN gave for refusing a graph, logged once per process.
void log_cudnn_fallback_once(const std::string& why) {
  static std::mutex mu;
  static std::set<std::string> logged;
  std::lock_guard<std::mutex> lock(mu);
  if (logged.insert(why).second)
    logging::warn("attention: cuDNN graph not supported ({}); using the fallback plan for such calls", why);
}

AttnPlan cuda_plan(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const AttentionParams& p,
                   bool training) {
  auto call = backends::make_call(q, k, v, p, training, cuda_glue::device_sm(q));
  std::string graph_why;
  if (forced_backend < 0) {
    auto plan = plan_attention(call);
    if (plan.backend != AttnBackend::kCudnnGraph || cudnn_graph_builds(q, k, plan, training, &graph_why)) return plan;
    log_cudnn_fallback_once(graph_why);
    call.cudnn_graph = false;  // today's plan
    return plan_attention(call);
  }
  bool ok = false;
  const char* why = "";
  const auto b = static_cast<AttnBackend>(forced_backend);
  auto plan = plan_attention_forced(call, b, &ok, &why);
  TORCH_CHECK(ok, "attention: the forced backend ", attn_backend_name(b), " cannot run this call: ", why);
  TORCH_CHECK(b != AttnBackend::kCudnnGraph || cudnn_graph_builds(q, k, plan, training, &graph_why),
              "attention: the forced backend cudnn_graph cannot run this call: ", graph_why);
  return plan;
}

// Differentiable attention through one of LibTorch's fused kernels (FlashAttention-2, memory-efficient,
// cuDNN) or a cuDNN graph as the plan maps it; the backward recomputes the same plan from the saved call.
class PlannedAttentionFunction : public torch::autograd::Function<PlannedAttentionFunction> {
 public:
  // q (B, H, T, D), k/v (B, H_kv, S, D) → out (B, H, T, D).
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k,
                            const at::Tensor& v, const AttentionParams* p, const AttnPlan* plan) {
    auto f = backends::run_forward(*plan, q, k, v, *p, backends::aten_ops());
    ctx->save_for_backward({q, k, v, f.state.out, f.state.lse, f.state.rng0, f.state.rng1, f.state.bias});
    ctx->saved_data["backend"] = int64_t(plan->backend);
    ctx->saved_data["causal"] = p->causal;
    ctx->saved_data["window"] = p->window;
    ctx->saved_data["scale"] = p->scale;
    ctx->saved_data["q_offset"] = p->q_offset;
    ctx->saved_data["alibi_slopes"] = p->alibi_slopes.defined() ? p->alibi_slopes.detach() : at::Tensor();
    ctx->saved_data["key_start"] = p->key_start.defined() ? p->key_start : at::Tensor();
    return f.out;
  }

  // dout (B, H, T, D) → dq, dk, dv.
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto s = ctx->get_saved_variables();
    const auto &q = s[0], &k = s[1], &v = s[2];
    if (!grads[0].defined())
      return {at::zeros_like(q), at::zeros_like(k), at::zeros_like(v), at::Tensor(), at::Tensor()};
    AttentionParams p;
    p.causal = ctx->saved_data["causal"].toBool();
    p.window = ctx->saved_data["window"].toInt();
    p.scale = ctx->saved_data["scale"].toDouble();
    p.q_offset = ctx->saved_data["q_offset"].toInt();
    p.alibi_slopes = ctx->saved_data["alibi_slopes"].toTensor();
    p.key_start = ctx->saved_data["key_start"].toTensor();
    const auto b = static_cast<AttnBackend>(ctx->saved_data["backend"].toInt());
    bool ok = false;
    const char* why = "";
    const auto call = backends::make_call(q, k, v, p, /*training=*/true, cuda_glue::device_sm(q));
    const auto plan = plan_attention_forced(call, b, &ok, &why);
    TORCH_CHECK(ok, "attention backward: ", attn_backend_name(b), " cannot run this call: ", why);
    const backends::NativeState state{s[3], s[4], s[5], s[6], s[7]};
    auto g = backends::run_backward(plan, q, k, v, p, state, grads[0].to(q.scalar_type()), backends::aten_ops());
    return {g.dq, g.dk, g.dv, at::Tensor(), at::Tensor()};
  }
};
#endif  // DROPE_WITH_CUDA

void check_fused_supported(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const char* who) {
  TORCH_CHECK(cpu_supported(q, k, v) || cuda_supported(q, k, v), who,
              ": needs CPU tensors of one dtype among "
              "float32, bfloat16 and float64, or CUDA bfloat16/float16 with head dim 64 or 128; got ",
              q.scalar_type(), "/", k.scalar_type(), "/", v.scalar_type(), " on ", q.device());
}

}  // namespace

namespace detail {

at::Tensor fused_attention_autograd_unchecked(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                              const AttentionParams& p) {
  return FusedAttentionFunction::apply(q, k, v, &p);
}

bool cuda_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const AttentionParams& p,
                    at::Tensor* out) {
#ifdef DROPE_WITH_CUDA
  if (!q.is_cuda() || reference_forced) return false;
  const auto plan = cuda_plan(q, k, v, p, needs_grad(q, k, v));
  switch (plan.backend) {
    case AttnBackend::kReference: return false;
    case AttnBackend::kOwnCuda: *out = FusedAttentionFunction::apply(q, k, v, &p); return true;
    case AttnBackend::kSdpa:  // differentiable by itself
      *out = backends::run_forward(plan, q, k, v, p, backends::aten_ops()).out;
      return true;
    default: *out = PlannedAttentionFunction::apply(q, k, v, &p, &plan); return true;
  }
#else
  (void)q, (void)k, (void)v, (void)p, (void)out;
  return false;
#endif
}

}  // namespace detail

AttentionOutput fused_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                const AttentionParams& p) {
  check_attention_shapes(q, k, v, p);
  check_fused_supported(q, k, v, "fused_attention");
  at::NoGradGuard no_grad;
#ifdef DROPE_WITH_CUDA
  if (q.is_cuda()) {
    const auto plan = cuda_plan(q, k, v, p, /*training=*/false);
    switch (plan.backend) {
      case AttnBackend::kFlash:
      case AttnBackend::kMemEfficient:
      case AttnBackend::kCudnn:
      case AttnBackend::kCudnnGraph: {
        auto f = backends::run_forward(plan, q, k, v, p, backends::aten_ops());
        return {f.out, f.lse.to(at::kFloat)};
      }
      case AttnBackend::kOwnCuda: return cuda_glue::forward(q, k, v, p);
      default: return detail::reference_attention_unchecked(q, k, v, p);  // SDPA returns no log-sum-exp
    }
  }
#endif
  auto res = cpu_forward(q, k, v, p);
  return {res.out, res.lse.to(at::kFloat)};
}

AttentionGrads fused_attention_grads(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                     const at::Tensor& dout, const AttentionParams& p,
                                     kernels::BackwardSchedule schedule) {
  check_attention_shapes(q, k, v, p);
  TORCH_CHECK(cpu_supported(q, k, v),
              "fused_attention_grads: needs CPU tensors of one dtype among float32, "
              "bfloat16 and float64; got ",
              q.scalar_type(), " on ", q.device());
  TORCH_CHECK(dout.sizes() == q.sizes(), "fused_attention_grads: dout ", dout.sizes(), " must match q ", q.sizes());
  at::NoGradGuard no_grad;
  const auto fwd = cpu_forward(q, k, v, p);
  return cpu_backward(q, k, v, fwd.out, fwd.lse, dout, p, schedule);
}

AttentionGrads fused_attention_backward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                        const at::Tensor& out, const at::Tensor& lse, const at::Tensor& dout,
                                        const AttentionParams& p) {
  check_attention_shapes(q, k, v, p);
  check_fused_supported(q, k, v, "fused_attention_backward");
  TORCH_CHECK(out.sizes() == q.sizes() && dout.sizes() == q.sizes(), "fused_attention_backward: out ", out.sizes(),
              " and dout ", dout.sizes(), " must match q ", q.sizes());
  TORCH_CHECK(lse.dim() == 3 && lse.sizes() == q.sizes().slice(0, 3), "fused_attention_backward: lse ", lse.sizes(),
              " must be (B, H, T) of q ", q.sizes());
  at::NoGradGuard no_grad;
#ifdef DROPE_WITH_CUDA
  if (q.is_cuda()) {
    auto [dq, dk, dv] = cuda_glue::backward(q, k, v, out, lse, dout, p);
    return {dq, dk, dv};
  }
#endif
  return cpu_backward(q, k, v, out, lse, dout, p);
}

at::Tensor fused_attention_autograd(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                    const AttentionParams& p) {
  check_attention_shapes(q, k, v, p);
  check_fused_supported(q, k, v, "fused_attention_autograd");
  return detail::fused_attention_autograd_unchecked(q, k, v, p);
}

bool uses_fused_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const AttentionParams& p) {
  if (reference_forced) return false;
#ifdef DROPE_WITH_CUDA
  if (q.is_cuda()) return cuda_plan(q, k, v, p, needs_grad(q, k, v)).backend != AttnBackend::kReference;
#endif
  if (!cpu_supported(q, k, v)) return false;
  if (p.key_start.defined()) return false;  // padding masks: the reference (batched decode, T = 1)
  // Trainable slopes need the reference's autograd.
  return !(p.alibi_slopes.defined() && p.alibi_slopes.requires_grad());
}

AttnPlan cuda_attention_plan(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const AttentionParams& p,
                             bool training) {
  check_attention_shapes(q, k, v, p);
  TORCH_CHECK(q.is_cuda(), "cuda_attention_plan: needs CUDA tensors, got ", q.device());
#ifdef DROPE_WITH_CUDA
  return cuda_plan(q, k, v, p, training);
#else
  (void)training;
  TORCH_CHECK(false, "cuda_attention_plan: this build has no CUDA support");
#endif
}

ForceAttentionBackend::ForceAttentionBackend(AttnBackend backend) : previous_(forced_backend) {
  forced_backend = int(backend);
}

ForceAttentionBackend::~ForceAttentionBackend() { forced_backend = previous_; }

ForceReferenceAttention::ForceReferenceAttention() : previous_(reference_forced) { reference_forced = true; }

ForceReferenceAttention::~ForceReferenceAttention() { reference_forced = previous_; }

}  // namespace drope::ops
