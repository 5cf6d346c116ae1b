// The optimizer of a training run as the Trainer drives it, one interface over the two engines:
//  - replicated AdamW (train.shard none): every rank holds the weights and moments; gradients are averaged
//    over ranks by an all-reduce overlapped with the last micro-batch's backward (GradSync);
//  - the sharded engine (train.shard optimizer | grads | params, sharding.h): each rank updates its chunk.
// Both also decide how the model's decoder blocks run in training (activation checkpointing, gathering
// sharded weights) and how a checkpoint of the model and its optimizer state is written.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include "drope/formats/checkpoint_state.h"
#include "drope/model/transformer.h"
#include "drope/train/adamw.h"
#include "drope/train/distributed.h"
#include "drope/train/run_config.h"

namespace drope::train {

// Elements [start, start + len) of parameter `name`'s flattened moment `kind` ("exp_avg" / "exp_avg_sq"),
// as a loaded checkpoint serves them (LoadedCheckpoint::moment).
using MomentReader =
    std::function<torch::Tensor(const std::string& kind, const std::string& name, int64_t start, int64_t len)>;

class Optimizer {
 public:
  virtual ~Optimizer() = default;

  // How decoder blocks run in training forward passes; empty: the model's plain forward.
  virtual BlockRunner block_runner() = 0;
  virtual void zero_grad() = 0;
  // Around each micro-batch's backward (`last`: the step's last micro-batch).
  virtual void before_backward(bool last) = 0;
  virtual void after_backward(bool last) = 0;
  // After the step's last backward: every rank holds the gradients averaged over ranks.
  virtual void finish_backward() = 0;
  // The global gradient norm; scales the gradients to at most `max_norm` (<= 0: no clipping).
  virtual double clip_grad_norm(double max_norm) = 0;
  // One update with learning rate `lr`.
  virtual void step(double lr) = 0;
  virtual int64_t steps_taken() const = 0;

  // Restores the moments and the step count from a checkpoint (`source` names it in errors).
  virtual void load_state(const MomentReader& moment, int64_t steps, const std::string& source) = 0;
  // Whether every rank writes a part of each checkpoint (else rank 0 writes it alone).
  virtual bool every_rank_saves() const = 0;
  // Writes `<run_dir>/checkpoints/step-<step>/` (model, optimizer state, state.json, run.yaml), keeps the
  // newest `keep_last`, and returns the directory. Called on rank 0, or on every rank when every_rank_saves().
  virtual std::string save_checkpoint(const std::string& run_dir, const TrainState& st, const std::string& run_yaml,
                                      int64_t keep_last) = 0;
  // Adds what a training log line reports of this engine (memory held, gradient buckets).
  virtual void add_log_fields(nlohmann::json& line) const = 0;
  // Continues with another model (drope.drop_at_step): parameters that keep their names keep their moments,
  // new ones start from zero moments.
  virtual void replace_model(DecoderLM model) = 0;
};

// Replicated AdamW for train.shard none, else the sharded engine, over `model` (on `device` already).
std::unique_ptr<Optimizer> make_optimizer(Distributed& dist, DecoderLM model, const TrainLoopConfig& train,
                                          const AdamWConfig& cfg, const torch::Device& device);

}  // namespace drope::train
