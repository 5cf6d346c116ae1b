// The one dispatch of ops::attention (attention_registry.h) for CPU and CUDA calls, the forced-backend switches,
// and the one autograd Function of the backends with a backward of their own.
#include <mutex>
#include <set>
#include <string>

#include <torch/autograd.h>

#include "attention_common.h"
#include "attention_internal.h"
#include "drope/core/log.h"
#ifdef DROPE_WITH_CUDA
#include "cuda_glue.h"
#endif

namespace drope::ops {

namespace {

thread_local bool reference_forced = false;
thread_local const AttnBackendDef* forced_backend = nullptr;  // while a ForceAttentionBackend is alive

int device_sm(const at::Tensor& q) {
#ifdef DROPE_WITH_CUDA
  if (q.is_cuda()) return cuda_glue::device_sm(q);
#endif
  (void)q;
  return 0;
}

// A backend's refusal of the tensors themselves, logged once per process and reason.
void log_fallback_once(const AttnBackendDef& d, const std::string& why) {
  static std::mutex mu;
  static std::set<std::string> logged;
  std::lock_guard<std::mutex> lock(mu);
  if (logged.insert(std::string(d.name) + why).second)
    logging::warn("attention: {} not supported ({}); using the fallback plan for such calls", d.title, why);
}

// The plan of a forced backend; an error when it cannot run the call.
AttnPlan forced_plan(const AttnBackendDef& d, const AttnCall& c, const at::Tensor& q, const at::Tensor& k) {
  AttnPlan plan = route_attention(c);
  plan.backend = AttnBackend{d.name};
  plan.reason = "forced";
  const char* why = d.refuses(c, plan);
  TORCH_CHECK(!why, "attention: the forced backend ", d.name, " cannot run this call: ", why);
  std::string built_why;
  TORCH_CHECK(!d.builds || d.builds(plan, q, k, c.training, &built_why), "attention: the forced backend ", d.name,
              " cannot run this call: ", built_why);
  return plan;
}

// The saved call of AttentionFunction: the plan (with every argument the backward needs) and the parameters.
struct SavedCall : torch::CustomClassHolder {
  AttnPlan plan;
  AttentionParams params;
};

// Differentiable attention through a backend with a backward of its own: the backend's forward, and its backward
// from the state the forward saved.
class AttentionFunction : public torch::autograd::Function<AttentionFunction> {
 public:
  // q (B, H, T, D), k/v (B, H_kv, S, D) → out (B, H, T, D).
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k,
                            const at::Tensor& v, const AttnPlan* plan, const AttentionParams* p) {
    const AttnBackendDef& d = attn_backend_def(plan->backend);
    auto f = d.forward(*plan, q, k, v, *p, backends::aten_ops());
    ctx->save_for_backward({q, k, v, f.state.out, f.state.lse, f.state.rng0, f.state.rng1, f.state.bias});
    auto saved = c10::make_intrusive<SavedCall>();
    saved->plan = *plan;
    saved->params = *p;
    if (p->alibi_slopes.defined()) saved->params.alibi_slopes = p->alibi_slopes.detach();
    ctx->saved_data["call"] = at::IValue::make_capsule(std::move(saved));
    ctx->saved_data["backend"] = std::string(d.name);
    return f.out;
  }

  // dout (B, H, T, D) → dq, dk, dv (no gradient for the parameters).
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto s = ctx->get_saved_variables();
    const auto &q = s[0], &k = s[1], &v = s[2];
    if (!grads[0].defined())
      return {at::zeros_like(q), at::zeros_like(k), at::zeros_like(v), at::Tensor(), at::Tensor()};
    const auto capsule = ctx->saved_data["call"].toCapsule();
    const auto& call = *static_cast<const SavedCall*>(capsule.get());
    const std::string name = ctx->saved_data["backend"].toStringRef();
    const AttnBackendDef& d = attn_backend_def(AttnBackend{name.c_str()});
    const backends::NativeState state{s[3], s[4], s[5], s[6], s[7]};
    auto g = d.backward(call.plan, q, k, v, call.params, state, grads[0].to(q.scalar_type()), backends::aten_ops());
    return {g.dq, g.dk, g.dv, at::Tensor(), at::Tensor()};
  }
};

}  // namespace

namespace detail {

AttnPlan plan_call(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const AttentionParams& p,
                   bool training, bool reference_force) {
  if (reference_force && reference_forced) {
    AttnPlan plan;
    plan.backend = AttnBackend::kReference;
    plan.reason = "forced (ForceReferenceAttention)";
    return plan;
  }
  const AttnCall c = backends::make_call(q, k, v, p, training, device_sm(q));
  const unsigned device = c.cuda ? kAttnCuda : kAttnCpu;
  if (forced_backend && (forced_backend->devices & device)) return forced_plan(*forced_backend, c, q, k);
  const AttnBackendDef* excluded = nullptr;
  for (;;) {
    AttnPlan plan = route_attention(c, excluded);
    const AttnBackendDef& d = attn_backend_def(plan.backend);
    std::string why;
    if (!d.builds || d.builds(plan, q, k, training, &why)) return plan;
    log_fallback_once(d, why);
    TORCH_CHECK(!excluded, "attention: ", excluded->name, " and ", d.name, " both refused the call");
    excluded = &d;
  }
}

}  // namespace detail

AttnPlan attention_plan(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const AttentionParams& p,
                        bool training) {
  check_attention_shapes(q, k, v, p);
  return detail::plan_call(q, k, v, p, training, /*reference_force=*/true);
}

at::Tensor run_attention(const AttnPlan& plan, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                         const AttentionParams& p) {
  const AttnBackendDef& d = attn_backend_def(plan.backend);
  if (d.backward) return AttentionFunction::apply(q, k, v, &plan, &p);
  return d.forward(plan, q, k, v, p, backends::aten_ops()).out;  // differentiable by itself
}

bool uses_fused_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const AttentionParams& p) {
  // On the CPU the kernel's question: decode serves one-query calls only while no gradient is needed.
  const bool training = q.is_cuda() ? detail::needs_grad(q, k, v) : true;
  const auto b = detail::plan_call(q, k, v, p, training, /*reference_force=*/true).backend;
  return b != AttnBackend::kReference && b != AttnBackend::kDecode;
}

AttnPlan cuda_attention_plan(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const AttentionParams& p,
                             bool training) {
  check_attention_shapes(q, k, v, p);
  TORCH_CHECK(q.is_cuda(), "cuda_attention_plan: needs CUDA tensors, got ", q.device());
#ifdef DROPE_WITH_CUDA
  return detail::plan_call(q, k, v, p, training, /*reference_force=*/false);
#else
  (void)training;
  TORCH_CHECK(false, "cuda_attention_plan: this build has no CUDA support");
#endif
}

ForceAttentionBackend::ForceAttentionBackend(AttnBackend backend) : previous_(forced_backend) {
  forced_backend = &attn_backend_def(backend);
}

ForceAttentionBackend::~ForceAttentionBackend() { forced_backend = previous_; }

ForceReferenceAttention::ForceReferenceAttention() : previous_(reference_forced) { reference_forced = true; }

ForceReferenceAttention::~ForceReferenceAttention() { reference_forced = previous_; }

}  // namespace drope::ops
