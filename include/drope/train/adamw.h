// AdamW with decoupled weight decay (same arithmetic as torch.optim.AdamW, foreach=False) with
// explicit, serialisable state. The engines that run it over a model (replicated or sharded) are in
// optimizer.h; the learning rate it is given each step comes from lr_schedule.h.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

namespace drope::train {

struct AdamWConfig {
  double lr = 3e-4;            // peak learning rate
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;   // decoupled; applied to matrices only (see decays())
  bool decay_embeddings = false;
  bool decay_norms_and_biases = false;
  bool fused = true;           // LibTorch's fused kernel (_fused_adamw_) where it applies; false: separate ops
};

class AdamW {
 public:
  AdamW(std::vector<std::pair<std::string, torch::Tensor>> params, AdamWConfig cfg);
  // With the weight-decay decision given per tensor (pieces of parameters, e.g. a rank's shard).
  struct Piece {
    std::string name;
    torch::Tensor param;
    bool decay;
  };
  static AdamW from_pieces(std::vector<Piece> pieces, AdamWConfig cfg);
  // One update with learning rate `lr` (the schedule's value for this step).
  void step(double lr);
  void zero_grad();
  int64_t steps_taken() const { return step_; }
  // Moments by parameter name ("exp_avg.<name>", "exp_avg_sq.<name>") for checkpoints.
  std::vector<std::pair<std::string, torch::Tensor>> state_tensors() const;
  // Restores moments and the step count; every parameter must have its moments, same shapes.
  void load_state(const std::map<std::string, torch::Tensor>& tensors, int64_t steps, const std::string& source);
  // Whether weight decay applies to parameter `name` of shape `t`.
  bool decays(const std::string& name, const torch::Tensor& t) const;
  // Take the separate-ops update even where LibTorch's fused kernel applies (for comparisons).
  void set_force_unfused(bool on) { force_unfused_ = on; }

 private:
  struct Slot {
    std::string name;
    torch::Tensor param, exp_avg, exp_avg_sq;
    bool decay;
  };
  std::vector<Slot> slots_;
  AdamWConfig cfg_;
  int64_t step_ = 0;
  bool force_unfused_ = false;
};

}  // namespace drope::train
