#include "drope/ops/layers.h"
#include "drope/core/environment.h"

#include <cstdlib>
#include <string>
#include <tuple>
#include <vector>

#include <ATen/autocast_mode.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/torch.h>

#include "drope/core/numbers.h"
#include "drope/kernels/layers_cpu.h"
#include "drope/ops/compute_weights.h"

namespace drope::ops {

namespace {

// DROPE_COMPOSITE_LAYERS=1 takes the plain-ATen path everywhere (for A/B timing of whole runs); the tools
// refuse a value other than 0 or 1 at start (drope::app::run), so none reaches this initialiser.
thread_local bool force_composite = switch_value(env::get("DROPE_COMPOSITE_LAYERS")) == SwitchValue::kOn;

// bf16 tensors the fused float32 kernels take through a float32 copy (one conversion each way): fewer passes than
// the plain-ATen composite in bf16.
bool bf16_cpu(const at::Tensor& t) { return t.defined() && t.device().is_cpu() && t.scalar_type() == at::kBFloat16; }

at::Tensor rms_norm_composite(const at::Tensor& x, const at::Tensor& weight, double eps) {
  auto h = x.to(x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat);
  auto var = h.pow(2).mean(-1, /*keepdim=*/true);
  h = h * at::rsqrt(var + eps);
  return weight * h.to(x.scalar_type());
}

at::Tensor rotary_composite(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const int64_t half = x.size(-1) / 2;
  auto x1 = x.narrow(-1, 0, half);
  auto x2 = x.narrow(-1, half, half);
  auto rotated = at::cat({-x2, x1}, -1);
  return x * cos.to(x.dtype()) + rotated * sin.to(x.dtype());
}

// Calls f(T{}) for x's dtype (float32 or float64, the fused layer kernels' types).
template <typename F>
void for_dtype(const at::Tensor& t, const F& f) {
  if (t.scalar_type() == at::kDouble) return f(double{});
  TORCH_CHECK(t.scalar_type() == at::kFloat, "fused layer kernels take float32 or float64, got ", t.scalar_type());
  f(float{});
}

// Fused RMSNorm forward over the last dim: y and rstd (one per row, x's dtype).
std::tuple<at::Tensor, at::Tensor> rms_norm_forward(const at::Tensor& x_in, const at::Tensor& weight, double eps) {
  const auto x = x_in.contiguous(), w = weight.contiguous();
  auto y = at::empty_like(x);
  auto shape = x.sizes().vec();
  shape.pop_back();
  auto rstd = at::empty(shape, x.options());
  for_dtype(x, [&](auto tag) {
    using T = decltype(tag);
    const int64_t n = x.size(-1), rows = n == 0 ? 0 : x.numel() / n;
    kernels::rms_norm_forward_cpu(kernels::RmsNormForwardArgs<T>{x.data_ptr<T>(), w.data_ptr<T>(), y.data_ptr<T>(),
                                                                 rstd.data_ptr<T>(), rows, n, eps});
  });
  return {y, rstd};
}

// Its gradients (dx, dweight) from the forward's x and rstd.
std::tuple<at::Tensor, at::Tensor> rms_norm_backward(const at::Tensor& dy_in, const at::Tensor& x_in,
                                                     const at::Tensor& weight, const at::Tensor& rstd_in) {
  const auto dy = dy_in.contiguous(), x = x_in.contiguous(), w = weight.contiguous(), rstd = rstd_in.contiguous();
  auto dx = at::empty_like(x);
  auto parts = at::zeros({at::get_num_threads(), x.size(-1)}, x.options());
  for_dtype(x, [&](auto tag) {
    using T = decltype(tag);
    const int64_t n = x.size(-1), rows = n == 0 ? 0 : x.numel() / n;
    kernels::rms_norm_backward_cpu(kernels::RmsNormBackwardArgs<T>{dy.data_ptr<T>(), x.data_ptr<T>(), w.data_ptr<T>(),
                                                                   rstd.data_ptr<T>(), dx.data_ptr<T>(),
                                                                   parts.data_ptr<T>(), parts.size(0), rows, n});
  });
  return {dx, parts.sum(0).to(weight.scalar_type())};
}

// Fused rotary embedding of x (B, H, T, D), cos/sin (T, D) of x's dtype; inverse = its transpose.
at::Tensor rotary_fused(const at::Tensor& x_in, const at::Tensor& cos_in, const at::Tensor& sin_in, bool inverse) {
  const auto x = x_in.stride(3) == 1 ? x_in : x_in.contiguous();
  const auto c = cos_in.contiguous(), s = sin_in.contiguous();
  auto y = at::empty({x.size(0), x.size(1), x.size(2), x.size(3)}, x.options());
  for_dtype(x, [&](auto tag) {
    using T = decltype(tag);
    kernels::rotary_cpu(kernels::RotaryArgs<T>{x.data_ptr<T>(),
                                               y.data_ptr<T>(),
                                               c.data_ptr<T>(),
                                               s.data_ptr<T>(),
                                               x.size(0),
                                               x.size(1),
                                               x.size(2),
                                               x.size(3),
                                               {x.stride(0), x.stride(1), x.stride(2)},
                                               inverse});
  });
  return y;
}

class RmsNormFunction : public torch::autograd::Function<RmsNormFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            double eps) {
    auto [y, rstd] = rms_norm_forward(x, weight, eps);
    ctx->save_for_backward({x, weight, rstd});
    return y;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    if (!grads[0].defined()) return {at::Tensor(), at::Tensor(), at::Tensor()};
    auto [dx, dw] = rms_norm_backward(grads[0], saved[0], saved[1], saved[2]);
    return {dx, dw, at::Tensor()};
  }
};

class RotaryFunction : public torch::autograd::Function<RotaryFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& cos,
                            const at::Tensor& sin) {
    ctx->save_for_backward({cos, sin});
    return rotary_fused(x, cos, sin, /*inverse=*/false);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    if (!grads[0].defined()) return {at::Tensor(), at::Tensor(), at::Tensor()};
    return {rotary_fused(grads[0], saved[0], saved[1], /*inverse=*/true), at::Tensor(), at::Tensor()};
  }
};

// LibTorch's oneDNN linear (registered by the wheel's CPU library; absent in builds without mkldnn).
const c10::OperatorHandle* onednn_linear_op() {
  static const c10::OperatorHandle* op = []() -> const c10::OperatorHandle* {
    if (!at::hasMKLDNN()) return nullptr;
    auto h = c10::Dispatcher::singleton().findSchema({"mkldnn::_linear_pointwise", ""});
    return h ? new c10::OperatorHandle(*h) : nullptr;
  }();
  return op;
}

thread_local int force_onednn = -1;  // ForceOneDnnLinear on this thread: 1 on, 0 off, -1 the process default

bool onednn_usable(const at::Tensor& a, const at::Tensor& b) {
  return !force_composite && onednn_linear_enabled() && onednn_linear_op() && a.device().is_cpu() &&
         b.device().is_cpu() && a.scalar_type() == at::kFloat && b.scalar_type() == at::kFloat &&
         !at::autocast::is_autocast_enabled(at::kCPU);
}

// a (M, K) · b (N, K)ᵀ on oneDNN; a and b may be strided views (transposes are read in place).
at::Tensor onednn_nt(const at::Tensor& a, const at::Tensor& b) {
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  torch::jit::Stack stack{a,
                          b,
                          c10::IValue(),
                          c10::IValue(std::string("none")),
                          c10::IValue(c10::List<std::optional<at::Scalar>>()),
                          c10::IValue(std::string(""))};
  onednn_linear_op()->callBoxed(&stack);
  return stack[0].toTensor();
}

class LinearFunction : public torch::autograd::Function<LinearFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight) {
    ctx->save_for_backward({x, weight});
    return onednn_nt(x, weight);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto& dy = grads[0];
    if (!dy.defined()) return {at::Tensor(), at::Tensor()};
    at::Tensor dx, dw;
    if (ctx->needs_input_grad(0)) dx = onednn_nt(dy, saved[1].t());      // dy · W
    if (ctx->needs_input_grad(1)) dw = onednn_nt(dy.t(), saved[0].t());  // dyᵀ · x
    return {dx, dw};
  }
};

// Weights (O_i, K) one after another: (ΣO_i, K).
at::Tensor stack_rows(const std::vector<at::Tensor>& ws) { return ws.size() == 1 ? ws[0] : at::cat(ws, 0); }

// y = x · [w_0; w_1; …]ᵀ for x (N, K): the projections of one input by several weights as one GEMM, forward
// and backward (dx in one GEMM over the stacked weights, the weights' gradients in one, then split by rows).
// The weights are stacked again in the backward rather than kept stacked from the forward.
class StackedLinearFunction : public torch::autograd::Function<StackedLinearFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, at::TensorList weights) {
    std::vector<at::Tensor> saved{x};
    saved.insert(saved.end(), weights.begin(), weights.end());
    ctx->save_for_backward(saved);
    return matmul_nt(x, stack_rows(weights.vec()));
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto& x = saved[0];
    const std::vector<at::Tensor> weights(saved.begin() + 1, saved.end());
    const size_t n = weights.size();
    torch::autograd::variable_list out(1 + n);  // x, then the weights
    const auto& dy = grads[0];
    if (!dy.defined()) return out;
    if (ctx->needs_input_grad(0)) out[0] = matmul_nt(dy, stack_rows(weights).t());  // dy · W
    bool want_w = false;
    for (size_t i = 0; i < n; ++i) want_w |= ctx->needs_input_grad(1 + i);
    if (!want_w) return out;
    const at::Tensor dw = matmul_nt(dy.t(), x.t());  // dyᵀ · x, (ΣO_i, K)
    int64_t row = 0;
    for (size_t i = 0; i < n; ++i) {
      if (ctx->needs_input_grad(1 + i)) out[1 + i] = dw.narrow(0, row, weights[i].size(0));
      row += weights[i].size(0);
    }
    return out;
  }
};

// The SwiGLU kernel on bf16 rows: h = silu(gate) · up (…, F) from gu (…, 2F), or with dh its gradient (…, 2F).
at::Tensor swiglu_bf16_rows(const at::Tensor& gu_in, const at::Tensor& dh_in) {
  const auto gu = gu_in.contiguous();
  const int64_t n = gu.size(-1) / 2;
  auto shape = gu.sizes().vec();
  if (!dh_in.defined()) shape.back() = n;
  auto out = at::empty(shape, gu.options());
  const auto dh = dh_in.defined() ? dh_in.contiguous() : at::Tensor();
  const auto bits = [](const at::Tensor& t) { return static_cast<uint16_t*>(t.data_ptr()); };
  kernels::swiglu_bf16_cpu(
      {bits(gu), dh.defined() ? bits(dh) : nullptr, bits(out), n == 0 ? 0 : gu.numel() / (2 * n), n});
  return out;
}

// SwiGLU of stacked gate/up projections gu (…, 2F) → silu(gate) · up (…, F), one pass forward and backward.
class SwiGluFunction : public torch::autograd::Function<SwiGluFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& gu_in) {
    if (gu_in.scalar_type() == at::kBFloat16) {  // bf16 in and out; each row runs in float32 inside the kernel
      ctx->save_for_backward({gu_in});
      return swiglu_bf16_rows(gu_in, {});
    }
    const auto gu = gu_in.contiguous();
    const int64_t n = gu.size(-1) / 2;
    auto shape = gu.sizes().vec();
    shape.back() = n;
    auto h = at::empty(shape, gu.options());
    for_dtype(gu, [&](auto tag) {
      using T = decltype(tag);
      kernels::swiglu_cpu(
          kernels::SwiGluArgs<T>{gu.data_ptr<T>(), nullptr, h.data_ptr<T>(), n == 0 ? 0 : h.numel() / n, n});
    });
    ctx->save_for_backward({gu});
    return h;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    if (!grads[0].defined()) return {at::Tensor()};
    const auto gu = ctx->get_saved_variables()[0];
    if (gu.scalar_type() == at::kBFloat16) return {swiglu_bf16_rows(gu, grads[0].to(at::kBFloat16))};
    const auto dh = grads[0].contiguous();
    const int64_t n = gu.size(-1) / 2;
    auto dgu = at::empty_like(gu);
    for_dtype(gu, [&](auto tag) {
      using T = decltype(tag);
      kernels::swiglu_cpu(kernels::SwiGluArgs<T>{gu.data_ptr<T>(), dh.data_ptr<T>(), dgu.data_ptr<T>(),
                                                 n == 0 ? 0 : dh.numel() / n, n});
    });
    return {dgu};
  }
};

// Whether x's projections by these weights (and biases) take StackedLinearFunction: CPU, float32 or float64
// throughout, no autocast, two or more weights (K columns each), a non-empty input.
bool stacked_usable(const at::Tensor& x, at::TensorList weights, at::TensorList biases) {
  if (force_composite || at::autocast::is_autocast_enabled(at::kCPU) || weights.size() < 2 ||
      !(biases.empty() || biases.size() == weights.size()) || !layers_cpu_supported({x}) || x.dim() < 1 ||
      x.numel() == 0)
    return false;
  for (size_t i = 0; i < weights.size(); ++i) {
    const auto& w = weights[i];
    if (!layers_cpu_supported({x, w}) || w.dim() != 2 || w.size(1) != x.size(-1)) return false;
    if (!biases.empty() && biases[i].defined() &&
        (!layers_cpu_supported({x, biases[i]}) || biases[i].dim() != 1 || biases[i].size(0) != w.size(0)))
      return false;
  }
  return true;
}

// The stacked projections of x (…, K) → (…, ΣO_i) (stacked_usable holds). The biases, if any, are added
// after the GEMM as linear() adds its bias (zeros stand in for an undefined one beside defined ones).
at::Tensor stacked_linear(const at::Tensor& x, at::TensorList weights, at::TensorList biases) {
  auto sizes = x.sizes().vec();
  sizes.back() = 0;
  for (const auto& w : weights) sizes.back() += w.size(0);
  auto y = StackedLinearFunction::apply(x.reshape({-1, x.size(-1)}), weights).view(sizes);
  bool any_bias = false;
  for (const auto& b : biases) any_bias |= b.defined();
  if (!any_bias) return y;
  std::vector<at::Tensor> bs;
  for (size_t i = 0; i < weights.size(); ++i)
    bs.push_back(biases[i].defined() ? biases[i] : at::zeros({weights[i].size(0)}, weights[i].options()));
  return y + at::cat(bs, 0);
}

}  // namespace

at::Tensor linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  if (auto* cw = force_composite ? nullptr : compute_weights_for(x, {weight}))
    return bf16_projection(*cw, x, {weight}, {bias});
  if (!onednn_usable(x, weight) || (bias.defined() && bias.scalar_type() != at::kFloat) || x.dim() < 1 ||
      weight.dim() != 2 || x.size(-1) != weight.size(1) || x.numel() == 0)
    return torch::linear(x, weight, bias);
  auto sizes = x.sizes().vec();
  sizes.back() = weight.size(0);
  auto y = LinearFunction::apply(x.reshape({-1, x.size(-1)}), weight).view(sizes);
  return bias.defined() ? y + bias : y;
}

std::vector<at::Tensor> linear_split(const at::Tensor& x, at::TensorList weights, at::TensorList biases) {
  auto bias = [&](size_t i) { return i < biases.size() ? biases[i] : at::Tensor(); };
  std::vector<at::Tensor> out;
  std::vector<int64_t> rows;
  for (const auto& w : weights) rows.push_back(w.size(0));
  if (auto* cw = force_composite ? nullptr : compute_weights_for(x, weights))
    return bf16_projection(*cw, x, weights, biases).split_with_sizes(rows, -1);
  if (!stacked_usable(x, weights, biases)) {
    for (size_t i = 0; i < weights.size(); ++i) out.push_back(linear(x, weights[i], bias(i)));
    return out;
  }
  return stacked_linear(x, weights, biases).split_with_sizes(rows, -1);
}

at::Tensor swiglu(const at::Tensor& x, const at::Tensor& gate_weight, const at::Tensor& gate_bias,
                  const at::Tensor& up_weight, const at::Tensor& up_bias) {
  if (auto* cw = force_composite ? nullptr : compute_weights_for(x, {gate_weight, up_weight});
      cw && gate_weight.size(0) == up_weight.size(0))
    return SwiGluFunction::apply(bf16_projection(*cw, x, {gate_weight, up_weight}, {gate_bias, up_bias}));
  if (!stacked_usable(x, {gate_weight, up_weight}, {gate_bias, up_bias}) || gate_weight.size(0) != up_weight.size(0))
    return at::silu(linear(x, gate_weight, gate_bias)) * linear(x, up_weight, up_bias);
  return SwiGluFunction::apply(stacked_linear(x, {gate_weight, up_weight}, {gate_bias, up_bias}));
}

at::Tensor matmul_nt(const at::Tensor& a, const at::Tensor& b) {
  if (!onednn_usable(a, b) || a.numel() == 0 || b.numel() == 0) return at::mm(a, b.t());
  return onednn_nt(a, b);
}

bool onednn_linear_available() { return onednn_linear_op() != nullptr; }

bool onednn_linear_enabled() {
  static const bool chosen = [] {
    __builtin_cpu_init();
    return onednn_linear_default(env::get("DROPE_ONEDNN_LINEAR"), __builtin_cpu_is("intel"));
  }();
  return force_onednn >= 0 ? force_onednn == 1 : chosen;
}

bool onednn_linear_default(const char* env, bool intel_cpu) {
  // Unset: on, except on Intel CPUs, where LibTorch's own GEMM (MKL's sgemm) is faster; on AMD CPUs MKL takes
  // its AVX2 paths and oneDNN is faster (docs/benchmarks.md#defaults-chosen-by-measurement).
  return parse_switch("DROPE_ONEDNN_LINEAR", env, "oneDNN except on Intel CPUs").value_or(!intel_cpu);
}

ForceOneDnnLinear::ForceOneDnnLinear(bool on) : previous_(force_onednn) { force_onednn = on ? 1 : 0; }
ForceOneDnnLinear::~ForceOneDnnLinear() { force_onednn = previous_; }

bool layers_cpu_supported(std::initializer_list<at::Tensor> tensors) {
  const at::Tensor* first = nullptr;
  for (const auto& t : tensors) {
    if (!t.defined() || !t.device().is_cpu()) return false;
    if (t.scalar_type() != at::kFloat && t.scalar_type() != at::kDouble) return false;
    if (first && t.scalar_type() != first->scalar_type()) return false;
    first = &t;
  }
  return first != nullptr;
}

ForceCompositeLayers::ForceCompositeLayers() : previous_(force_composite) { force_composite = true; }
ForceCompositeLayers::~ForceCompositeLayers() { force_composite = previous_; }

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  if (force_composite || !layers_cpu_supported({x, weight}) || x.size(-1) != weight.numel())
    return rms_norm_composite(x, weight, eps);
  return RmsNormFunction::apply(x, weight, eps);
}

at::Tensor rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  if (!force_composite && x.dim() == 4 && bf16_cpu(x) && cos.dim() == 2 && !cos.requires_grad() &&
      !sin.requires_grad() && x.size(-1) % 2 == 0 && cos.device().is_cpu())
    return rotary(x.to(at::kFloat), cos.to(at::kFloat), sin.to(at::kFloat)).to(at::kBFloat16);
  if (force_composite || x.dim() != 4 || cos.dim() != 2 || cos.requires_grad() || sin.requires_grad() ||
      x.size(-1) % 2 != 0 || !layers_cpu_supported({x}) || !cos.device().is_cpu())
    return rotary_composite(x, cos, sin);
  TORCH_CHECK(cos.size(0) == x.size(2) && cos.size(1) == x.size(3) && sin.sizes() == cos.sizes(),
              "rotary: cos/sin must be (", x.size(2), ", ", x.size(3), "), got ", cos.sizes(), " and ", sin.sizes());
  return RotaryFunction::apply(x, cos.to(x.dtype()), sin.to(x.dtype()));
}

}  // namespace drope::ops
