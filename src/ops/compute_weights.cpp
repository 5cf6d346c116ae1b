#include "drope/ops/compute_weights.h"
#include "drope/core/environment.h"

#include <atomic>
#include <cctype>
#include <cstdlib>
#include <string>

#include <ATen/autocast_mode.h>
#include <ATen/native/CPUBlas.h>
#include <torch/torch.h>

#include "drope/core/numbers.h"
#include "drope/kernels/cpu_isa.h"

namespace drope::ops {

namespace {

std::atomic<ComputeWeights*> g_installed{nullptr};

std::vector<const void*> key_of(at::TensorList ws) {
  std::vector<const void*> k;
  for (const auto& w : ws) k.push_back(w.data_ptr());
  return k;
}

// y = x · copyᵀ for x (N, K) and the bf16 copy (ΣO, K) of the masters; one GEMM forward, two backward (dx, and the
// masters' gradients as one (ΣO, K) product split by rows). Autograd sees the masters as inputs, the copy as a
// constant.
class Bf16LinearFunction : public torch::autograd::Function<Bf16LinearFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& copy,
                            at::TensorList masters) {
    const auto xb = x.to(at::kBFloat16);
    ctx->save_for_backward({xb, copy});
    ctx->saved_data["x_dtype"] = int64_t(x.scalar_type());
    std::vector<int64_t> rows;
    for (const auto& m : masters) rows.push_back(m.size(0));
    ctx->saved_data["rows"] = rows;
    return at::mm(xb, copy.t());
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto& xb = saved[0];
    const auto& copy = saved[1];
    const auto rows = ctx->saved_data["rows"].toIntVector();
    torch::autograd::variable_list out(2 + rows.size());  // x, the copy, then the masters
    if (!grads[0].defined()) return out;
    const auto dy = grads[0].to(at::kBFloat16);
    if (ctx->needs_input_grad(0))
      out[0] = at::mm(dy, copy).to(static_cast<at::ScalarType>(ctx->saved_data["x_dtype"].toInt()));  // dy · W
    bool want_w = false;
    for (size_t i = 0; i < rows.size(); ++i) want_w |= ctx->needs_input_grad(2 + i);
    if (!want_w) return out;
    const auto dw = at::mm(dy.t(), xb).to(at::kFloat);  // dyᵀ · x, (ΣO, K), float32 for the masters
    int64_t row = 0;
    for (size_t i = 0; i < rows.size(); ++i) {
      if (ctx->needs_input_grad(2 + i)) out[2 + i] = dw.narrow(0, row, rows[i]);
      row += rows[i];
    }
    return out;
  }
};

}  // namespace

at::Tensor ComputeWeights::get(at::TensorList masters) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto key = key_of(masters);
  auto it = entries_.find(key);
  if (it != entries_.end()) return it->second.copy;
  Entry e;
  e.masters = masters.vec();
  torch::NoGradGuard ng;
  e.copy = (masters.size() == 1 ? masters[0] : at::cat(masters, 0)).to(at::kBFloat16).contiguous();
  return entries_.emplace(std::move(key), std::move(e)).first->second.copy;
}

void ComputeWeights::refresh() {
  std::lock_guard<std::mutex> lock(mutex_);
  torch::NoGradGuard ng;
  for (auto& [key, e] : entries_) {
    int64_t row = 0;
    for (const auto& m : e.masters) {
      e.copy.narrow(0, row, m.size(0)).copy_(m);
      row += m.size(0);
    }
  }
}

int64_t ComputeWeights::bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  int64_t n = 0;
  for (const auto& [key, e] : entries_) n += e.copy.numel() * 2;
  return n;
}

ComputeWeights* install_compute_weights(ComputeWeights* w) { return g_installed.exchange(w); }

ComputeWeights* compute_weights_for(const at::Tensor& x, at::TensorList weights) {
  ComputeWeights* cw = g_installed.load();
  if (!cw || !at::autocast::is_autocast_enabled(at::kCPU) ||
      at::autocast::get_autocast_dtype(at::kCPU) != at::kBFloat16 || !x.defined() || !x.device().is_cpu() ||
      (x.scalar_type() != at::kFloat && x.scalar_type() != at::kBFloat16) || x.dim() < 1 || x.numel() == 0 ||
      weights.empty())
    return nullptr;
  for (const auto& w : weights)
    if (!w.defined() || !w.device().is_cpu() || w.scalar_type() != at::kFloat || w.dim() != 2 ||
        w.size(1) != x.size(-1))
      return nullptr;
  return cw;
}

at::Tensor bf16_projection(ComputeWeights& cw, const at::Tensor& x, at::TensorList weights, at::TensorList biases) {
  auto sizes = x.sizes().vec();
  sizes.back() = 0;
  for (const auto& w : weights) sizes.back() += w.size(0);
  auto y = Bf16LinearFunction::apply(x.reshape({-1, x.size(-1)}), cw.get(weights), weights).view(sizes);
  bool any_bias = false;
  for (const auto& b : biases) any_bias |= b.defined();
  if (!any_bias) return y;
  std::vector<at::Tensor> bs;
  for (size_t i = 0; i < weights.size(); ++i)
    bs.push_back(i < biases.size() && biases[i].defined() ? biases[i]
                                                          : at::zeros({weights[i].size(0)}, weights[i].options()));
  return y + at::cat(bs, 0).to(at::kBFloat16);
}

bool cpu_bf16_tiles() {
  static const bool tiles = at::native::cpublas::could_pack(at::kBFloat16);
  return tiles && kernels::cpu_isa() == kernels::Isa::kAvx512;
}

namespace {

// Whether oneDNN's instruction-set cap (ONEDNN_MAX_CPU_ISA, or its older name DNNL_MAX_CPU_ISA: oneDNN's "CPU
// dispatcher control") leaves its AVX512-BF16 kernels on: unset, DEFAULT, ALL or a level from AVX512_CORE_BF16 up.
// Listed: the levels below it, in oneDNN's order.
bool onednn_cap_allows_bf16_dot() {
  const char* value = env::get("ONEDNN_MAX_CPU_ISA");
  if (value == nullptr) value = env::get("DNNL_MAX_CPU_ISA");
  if (value == nullptr) return true;
  std::string cap(value);
  for (auto& c : cap) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  for (const char* below : {"SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2", "AVX512_CORE", "AVX512_CORE_VNNI"}) {
    if (cap == below) return false;
  }
  return true;
}

}  // namespace

bool cpu_bf16_dot() {
  static const bool dot = kernels::cpu_has_avx512_bf16() && onednn_cap_allows_bf16_dot();
  return dot && kernels::cpu_isa() == kernels::Isa::kAvx512;
}

bool bf16_emulation_forced() {
  static const bool forced = switch_value(env::get("DROPE_BF16_EMULATED")) == SwitchValue::kOn;
  return forced;
}

bool bf16_pays(c10::DeviceType device) {
  return device != c10::DeviceType::CPU || cpu_bf16_tiles() || cpu_bf16_dot() || bf16_emulation_forced();
}

}  // namespace drope::ops
