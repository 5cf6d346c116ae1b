#include "drope/train/recompute.h"

#include <ATen/autocast_mode.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>

#include "drope/core/error.h"

namespace drope::train {

namespace {

// The autocast state of the forward, restored around the recomputation: backward runs with autocast off,
// and a recomputed bf16 block must see the casts the forward saw.
struct AutocastState {
  c10::DeviceType device = c10::DeviceType::CPU;
  bool enabled = false;
  at::ScalarType dtype = at::kBFloat16;
  static AutocastState capture(c10::DeviceType d) {
    return {d, at::autocast::is_autocast_enabled(d), at::autocast::get_autocast_dtype(d)};
  }
};

class AutocastRestore {
 public:
  explicit AutocastRestore(const AutocastState& s) : set_(s), prev_(AutocastState::capture(s.device)) {
    at::autocast::set_autocast_enabled(s.device, s.enabled);
    at::autocast::set_autocast_dtype(s.device, s.dtype);
  }
  ~AutocastRestore() {
    at::autocast::set_autocast_enabled(prev_.device, prev_.enabled);
    at::autocast::set_autocast_dtype(prev_.device, prev_.dtype);
    if (set_.enabled) at::autocast::clear_cache();
  }

 private:
  AutocastState set_, prev_;
};

// The backward node: next edges are x's and (without param_grads) the block parameters'.
struct RecomputeBlock final : torch::autograd::Node {
  DecoderLayerImpl* block = nullptr;  // owned by the model, which outlives the step's graph
  torch::Tensor x;                    // the block input (detached)
  bool x_requires_grad = false;
  PositionContext ctx;
  AutocastState autocast;
  std::shared_ptr<const BlockHooks> hooks;
  std::vector<torch::Tensor> params;  // the parameters differentiated (inputs of the node without hooks)

  std::string name() const override { return "drope::RecomputeBlock"; }

  torch::autograd::variable_list apply(torch::autograd::variable_list&& grads) override {
    if (hooks && hooks->gather) hooks->gather();
    std::vector<torch::Tensor> ps = hooks ? block->parameters() : params;
    torch::Tensor xi = x.detach().requires_grad_(x_requires_grad);
    torch::Tensor y;
    {
      torch::AutoGradMode on(true);
      AutocastRestore ac(autocast);
      y = block->forward(xi, ctx);
    }
    std::vector<torch::Tensor> wrt;
    if (x_requires_grad) wrt.push_back(xi);
    for (const auto& p : ps)
      if (p.requires_grad()) wrt.push_back(p);
    torch::autograd::variable_list g;
    if (!wrt.empty() && grads[0].defined())
      g = torch::autograd::grad({y}, wrt, {grads[0]}, /*retain_graph=*/false, /*create_graph=*/false,
                                /*allow_unused=*/true);
    y = torch::Tensor();
    torch::autograd::variable_list out;
    size_t k = 0;
    out.push_back(x_requires_grad && !g.empty() ? g[k] : torch::Tensor());
    if (x_requires_grad) ++k;
    std::vector<torch::Tensor> pg;
    for (const auto& p : ps) {
      torch::Tensor gp;
      if (p.requires_grad() && !g.empty()) gp = g[k++];
      if (!gp.defined()) gp = torch::zeros_like(p);
      pg.push_back(std::move(gp));
    }
    if (hooks && hooks->param_grads) {
      hooks->param_grads(std::move(pg));
    } else {
      for (auto& gp : pg) out.push_back(std::move(gp));
    }
    if (hooks && hooks->release) hooks->release();
    return out;
  }
  void release_variables() override {
    x = torch::Tensor();
    params.clear();
  }
};

}  // namespace

torch::Tensor checkpointed_block(DecoderLayerImpl& block, const torch::Tensor& x, const PositionContext& ctx,
                                 std::shared_ptr<const BlockHooks> hooks) {
  auto node = std::shared_ptr<RecomputeBlock>(new RecomputeBlock(), torch::autograd::deleteNode);
  node->block = &block;
  node->x = x.detach();
  node->x_requires_grad = x.requires_grad();
  node->ctx = ctx;
  node->autocast = AutocastState::capture(x.device().type());
  node->hooks = hooks;
  const bool own_grads = hooks && hooks->param_grads;
  if (!own_grads) node->params = block.parameters();
  torch::Tensor y;
  {
    if (hooks && hooks->gather) hooks->gather();
    torch::NoGradGuard ng;
    y = block.forward(x, ctx);
    if (hooks && hooks->release) hooks->release();
  }
  const bool needs_grad =
      torch::GradMode::is_enabled() &&
      (x.requires_grad() || own_grads ||
       std::any_of(node->params.begin(), node->params.end(), [](const auto& p) { return p.requires_grad(); }));
  if (!needs_grad) return y;
  torch::autograd::variable_list inputs{x};
  for (const auto& p : node->params) inputs.push_back(p);
  node->set_next_edges(torch::autograd::collect_next_edges(inputs));
  torch::autograd::set_history(y, node);
  return y;
}

void check_activation_checkpointing(int64_t every, int64_t num_layers, const std::string& source) {
  if (every > num_layers)
    fail("{}: train.activation_checkpointing {} is more than the model's {} layers, so no block would be recomputed "
         "(use full, or K <= {})",
         source, every, num_layers, num_layers);
}

}  // namespace drope::train
