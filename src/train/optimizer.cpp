#include "drope/train/optimizer.h"

#include <map>
#include <utility>
#include <vector>

#include "drope/core/error.h"
#include "drope/core/log.h"
#include "drope/ops/compute_weights.h"
#include "drope/train/checkpoint.h"
#include "drope/train/recompute.h"
#include "drope/train/sharding.h"

namespace drope::train {

namespace {

std::vector<std::pair<std::string, torch::Tensor>> named(DecoderLM& m) {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (auto& kv : m->named_parameters()) out.emplace_back(kv.key(), kv.value());
  return out;
}

// train.shard none: AdamW over the whole model on every rank, gradients all-reduced by GradSync.
class ReplicatedAdamW final : public Optimizer {
 public:
  ReplicatedAdamW(Distributed& dist, DecoderLM model, const TrainLoopConfig& train, const AdamWConfig& cfg,
                  const torch::Device& device)
      : dist_(dist),
        model_(std::move(model)),
        cfg_(cfg),
        device_(device),
        recompute_every_(train.activation_checkpointing),
        bucket_bytes_(static_cast<int64_t>(train.allreduce_bucket_mb * (1 << 20))) {
    adamw_ = std::make_unique<AdamW>(named(model_), cfg_);
    sync_ = std::make_unique<GradSync>(dist_, model_->parameters(), bucket_bytes_);
    if (train.dtype == TrainDType::kBFloat16 && device.is_cpu()) use_compute_weights();
  }
  ~ReplicatedAdamW() override {
    if (compute_) ops::install_compute_weights(nullptr);
  }

  BlockRunner block_runner() override {
    if (recompute_every_ == 0) return {};
    return [every = recompute_every_](size_t layer, DecoderLayerImpl& block, const torch::Tensor& x,
                                      const PositionContext& ctx) {
      return checkpoints_layer(every, layer) ? checkpointed_block(block, x, ctx) : block.forward(x, ctx);
    };
  }
  void zero_grad() override { adamw_->zero_grad(); }
  void before_backward(bool last) override {
    if (last) sync_->arm();  // the last micro-batch's backward reduces gradients as they finish
  }
  void after_backward(bool /*last*/) override {}
  void finish_backward() override { sync_->finish(); }
  double clip_grad_norm(double max_norm) override {
    return max_norm > 0 ? torch::nn::utils::clip_grad_norm_(model_->parameters(), max_norm)
                        : torch::nn::utils::clip_grad_norm_(model_->parameters(), 1e30);
  }
  void step(double lr) override {
    adamw_->step(lr);
    if (compute_) compute_->refresh();  // the bf16 copies follow the masters once per step
  }
  int64_t steps_taken() const override { return adamw_->steps_taken(); }

  void load_state(const MomentReader& moment, int64_t steps, const std::string& source) override {
    std::map<std::string, torch::Tensor> state;
    for (auto& [name, p] : named(model_))
      for (const char* kind : {"exp_avg", "exp_avg_sq"})
        state[std::string(kind) + "." + name] = moment(kind, name, 0, p.numel()).view(p.sizes()).to(device_);
    adamw_->load_state(state, steps, source);
  }
  bool every_rank_saves() const override { return false; }
  std::string save_checkpoint(const std::string& run_dir, const TrainState& st, const std::string& run_yaml,
                              int64_t keep_last) override {
    return train::save_checkpoint(run_dir, model_, *adamw_, st, run_yaml, keep_last);
  }
  void add_log_fields(nlohmann::json& j) const override {
    if (dist_.grouped()) {  // how many gradient buckets started their all-reduce while backward was still running
      j["allreduce_buckets"] = sync_->buckets();
      j["allreduce_overlapped"] = sync_->overlapped();
    }
  }

  void replace_model(DecoderLM model) override {
    auto moments = adamw_->state_tensors();
    const int64_t steps_taken = adamw_->steps_taken();
    model_ = std::move(model);
    adamw_ = std::make_unique<AdamW>(named(model_), cfg_);
    std::map<std::string, torch::Tensor> carry(moments.begin(), moments.end());
    for (auto& [name, p] : named(model_)) {
      if (!carry.count("exp_avg." + name)) {
        carry["exp_avg." + name] = torch::zeros_like(p);
        carry["exp_avg_sq." + name] = torch::zeros_like(p);
      }
    }
    adamw_->load_state(carry, steps_taken, "drop_at_step");
    sync_.reset();  // hooks on the old parameters go first
    sync_ = std::make_unique<GradSync>(dist_, model_->parameters(), bucket_bytes_);
    if (compute_) {  // copies of the new model's weights, made on first use
      compute_ = std::make_unique<ops::ComputeWeights>();
      ops::install_compute_weights(compute_.get());
    }
  }

 private:
  // train.dtype bfloat16 on the CPU: bf16 compute copies of the weights where the CPU multiplies bf16 natively
  // (AMX tiles or AVX512-BF16); elsewhere bf16 GEMMs are emulated, and the trainer computes in float32
  // (ops::bf16_pays; said here).
  void use_compute_weights() {
    if (!ops::bf16_pays(c10::DeviceType::CPU)) {
      logging::warn("train.dtype bfloat16: this CPU has neither AMX bf16 tiles nor AVX512-BF16 in use (absent, or "
                    "capped by ONEDNN_MAX_CPU_ISA / DROPE_CPU_ISA); its bf16 GEMMs are emulated, many times slower "
                    "than float32 ones, so this run computes in float32, the faster dtype here (docs/cpu-isa.md)");
      return;
    }
    if (!ops::cpu_bf16_tiles() && !ops::cpu_bf16_dot()) {
      logging::warn("train.dtype bfloat16: computing in bf16 with emulated bf16 GEMMs (DROPE_BF16_EMULATED=1), "
                    "many times slower than float32 on this CPU");
    } else if (!ops::cpu_bf16_tiles()) {
      logging::info("train.dtype bfloat16: bf16 GEMMs on AVX512-BF16 (no AMX tiles in use: the fused attention "
                    "multiplies on its FMA path; docs/cpu-isa.md)");
    }
    compute_ = std::make_unique<ops::ComputeWeights>();
    ops::install_compute_weights(compute_.get());
  }

  Distributed& dist_;
  DecoderLM model_;
  AdamWConfig cfg_;
  torch::Device device_;
  int64_t recompute_every_;
  int64_t bucket_bytes_;
  std::unique_ptr<AdamW> adamw_;
  std::unique_ptr<GradSync> sync_;
  std::unique_ptr<ops::ComputeWeights> compute_;  // bf16 copies of the weights (train.dtype bfloat16, AMX)
};

// train.shard optimizer | grads | params: the sharded engine owns the weights and the moments.
class ShardedAdamW final : public Optimizer {
 public:
  ShardedAdamW(Distributed& dist, DecoderLM model, const TrainLoopConfig& train, const AdamWConfig& cfg)
      : dist_(dist), model_(model), sdp_(dist, model, train.shard, cfg, train.activation_checkpointing) {}

  BlockRunner block_runner() override { return sdp_.block_runner(); }
  void zero_grad() override { sdp_.zero_grad(); }
  void before_backward(bool last) override { sdp_.before_backward(last); }
  void after_backward(bool last) override { sdp_.after_backward(last); }
  void finish_backward() override {}  // gradients were reduce-scattered or all-reduced in after_backward
  double clip_grad_norm(double max_norm) override { return sdp_.clip_grad_norm(max_norm); }
  void step(double lr) override { sdp_.step(lr); }
  int64_t steps_taken() const override { return sdp_.steps_taken(); }

  void load_state(const MomentReader& moment, int64_t steps, const std::string& source) override {
    const auto& names = sdp_.names();
    sdp_.load_optimizer([&](const std::string& kind, int64_t i, int64_t start,
                            int64_t len) { return moment(kind, names[i], start, len); },
                        steps, source);
  }
  bool every_rank_saves() const override { return true; }  // every rank writes its shard
  std::string save_checkpoint(const std::string& run_dir, const TrainState& st, const std::string& run_yaml,
                              int64_t keep_last) override {
    return save_sharded_checkpoint(dist_, run_dir, model_, sdp_, st, run_yaml, keep_last);
  }
  void add_log_fields(nlohmann::json& j) const override {
    // What this rank holds: parameters, gradient chunks, optimizer moments; whole blocks at once.
    const auto b = sdp_.bytes();
    j["shard_bytes"] = {{"params", b.params},
                        {"grads", b.grads},
                        {"optimizer", b.optimizer},
                        {"gathered_peak", b.gathered_peak},
                        {"prefetch_hits", b.prefetch_hits},
                        {"prefetch_wasted", b.prefetch_wasted}};
  }
  void replace_model(DecoderLM /*model*/) override {
    fail("drope.drop_at_step needs train.shard none (drop first, then recalibrate with phase drope and any shard "
         "mode)");
  }

 private:
  Distributed& dist_;
  DecoderLM model_;
  ShardedDataParallel sdp_;
};

}  // namespace

std::unique_ptr<Optimizer> make_optimizer(Distributed& dist, DecoderLM model, const TrainLoopConfig& train,
                                          const AdamWConfig& cfg, const torch::Device& device) {
  if (train.shard == ShardMode::kNone)
    return std::make_unique<ReplicatedAdamW>(dist, std::move(model), train, cfg, device);
  return std::make_unique<ShardedAdamW>(dist, std::move(model), train, cfg);
}

}  // namespace drope::train
