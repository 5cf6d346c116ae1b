#include "drope/train/adamw.h"

#include <cmath>

#include <ATen/ops/_fused_adamw.h>

#include "drope/core/error.h"

namespace drope::train {

AdamW::AdamW(std::vector<std::pair<std::string, torch::Tensor>> params, AdamWConfig cfg) : cfg_(cfg) {
  for (auto& [name, p] : params) {
    Slot s{name, p, torch::zeros_like(p, torch::MemoryFormat::Preserve),
           torch::zeros_like(p, torch::MemoryFormat::Preserve), decays(name, p)};
    slots_.push_back(std::move(s));
  }
}

AdamW AdamW::from_pieces(std::vector<Piece> pieces, AdamWConfig cfg) {
  AdamW a(std::vector<std::pair<std::string, torch::Tensor>>{}, cfg);
  for (auto& pc : pieces)
    a.slots_.push_back(Slot{pc.name, pc.param, torch::zeros_like(pc.param, torch::MemoryFormat::Preserve),
                            torch::zeros_like(pc.param, torch::MemoryFormat::Preserve), pc.decay});
  return a;
}

bool AdamW::decays(const std::string& name, const torch::Tensor& t) const {
  if (name.find("embed_tokens") != std::string::npos || name == "lm_head.weight") return cfg_.decay_embeddings;
  if (t.dim() < 2) return cfg_.decay_norms_and_biases;
  return true;
}

void AdamW::zero_grad() {
  for (auto& s : slots_)
    if (s.param.grad().defined()) s.param.mutable_grad() = torch::Tensor();
}

void AdamW::step(double lr) {
  torch::NoGradGuard ng;
  ++step_;
  // LibTorch's fused AdamW kernel (one pass over param, grad and both moments; CPU and CUDA) per decay
  // group, when every tensor of the group is dense, contiguous and of one dtype and device. Otherwise the
  // same update in separate ops (torch.optim.AdamW's single-tensor form).
  for (const bool decay : {true, false}) {
    std::vector<at::Tensor> params, grads, m, v;
    bool fusable = true;
    for (auto& s : slots_) {
      if (s.decay != decay || !s.param.grad().defined()) continue;
      const auto& g = s.param.grad();
      params.push_back(s.param);
      grads.push_back(g);
      m.push_back(s.exp_avg);
      v.push_back(s.exp_avg_sq);
      fusable = fusable && !g.is_sparse() && g.is_contiguous() && s.param.is_contiguous() &&
                g.scalar_type() == s.param.scalar_type() && g.device() == s.param.device() &&
                s.param.scalar_type() == params.front().scalar_type() && s.param.device() == params.front().device() &&
                at::isFloatingType(s.param.scalar_type());
    }
    if (params.empty()) continue;
    const double wd = decay ? cfg_.weight_decay : 0.0;
    if (fusable && cfg_.fused && !force_unfused_) {
      // The kernel only reads the step count: one tensor serves every parameter of the group.
      const auto step = at::full({}, double(step_), params.front().options().dtype(at::kFloat));
      const std::vector<at::Tensor> steps(params.size(), step);
      at::_fused_adamw_(params, grads, m, v, {}, steps, lr, cfg_.beta1, cfg_.beta2, wd, cfg_.eps, /*amsgrad=*/false,
                        /*maximize=*/false);
      continue;
    }
    const double bc1 = 1.0 - std::pow(cfg_.beta1, double(step_));
    const double bc2 = 1.0 - std::pow(cfg_.beta2, double(step_));
    const double step_size = lr / bc1;
    const double bc2_sqrt = std::sqrt(bc2);
    for (size_t i = 0; i < params.size(); ++i) {
      if (wd != 0.0) params[i].mul_(1.0 - lr * wd);
      m[i].lerp_(grads[i], 1.0 - cfg_.beta1);
      v[i].mul_(cfg_.beta2).addcmul_(grads[i], grads[i], 1.0 - cfg_.beta2);
      auto denom = (v[i].sqrt() / bc2_sqrt).add_(cfg_.eps);
      params[i].addcdiv_(m[i], denom, -step_size);
    }
  }
}

std::vector<std::pair<std::string, torch::Tensor>> AdamW::state_tensors() const {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& s : slots_) {
    out.emplace_back("exp_avg." + s.name, s.exp_avg);
    out.emplace_back("exp_avg_sq." + s.name, s.exp_avg_sq);
  }
  return out;
}

void AdamW::load_state(const std::map<std::string, torch::Tensor>& t, int64_t steps, const std::string& source) {
  torch::NoGradGuard ng;
  for (auto& s : slots_) {
    for (auto* dst : {&s.exp_avg, &s.exp_avg_sq}) {
      const std::string key = (dst == &s.exp_avg ? "exp_avg." : "exp_avg_sq.") + s.name;
      auto it = t.find(key);
      if (it == t.end()) fail("{}: optimizer state has no tensor '{}'", source, key);
      if (it->second.sizes() != dst->sizes())
        fail("{}: optimizer tensor '{}' has shape {}, the model needs {}", source, key, c10::str(it->second.sizes()),
             c10::str(dst->sizes()));
      dst->copy_(it->second);
    }
  }
  step_ = steps;
}

}  // namespace drope::train
