// The training loop behind `drope-train`: phases (pretrain, drope, finetune, drop_at_step), gradient
// accumulation, data parallelism, logging, validation, checkpoints and exact resume.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include "drope/core/files.h"
#include "drope/eval/probe.h"
#include "drope/formats/checkpoint_state.h"
#include "drope/model/transformer.h"
#include "drope/train/data.h"
#include "drope/train/distributed.h"
#include "drope/train/metrics.h"
#include "drope/train/optimizer.h"
#include "drope/train/run_config.h"

namespace drope::train {

struct TrainOptions {
  bool resume = false;      // continue from the newest checkpoint in the run directory, if any
  std::string run_yaml;     // resolved config text written with every checkpoint
  bool quiet = false;       // no console lines (tests)
  bool force = false;       // write into a non-empty out_dir that is not a run directory of ours
};

struct TrainOutcome {
  std::vector<std::pair<int64_t, double>> losses;  // (step, global mean training loss) of steps run here
  double val_loss = 0;                              // final validation loss (nats/token)
  std::string last_checkpoint;
  int64_t resumed_from = -1;                        // step of the checkpoint we resumed from (-1: fresh)
  bool stopped = false;                             // stopped early by SIGTERM/SIGINT (checkpoint written)
};

class Trainer;

// Something that acts on every training step without being part of the loop (drope.drop_at_step, test-only
// fault injection). `step` is the 1-based number of the step: state().step + 1 while it runs.
class StepHook {
 public:
  virtual ~StepHook() = default;
  // Before the step's first forward; may swap the model (Trainer::replace_model).
  virtual void before_step(Trainer& /*trainer*/, int64_t /*step*/) {}
  // Each micro-batch's loss before its backward; returns the loss to backpropagate.
  virtual torch::Tensor on_loss(int64_t /*step*/, const torch::Tensor& loss) { return loss; }
  // After the step's optimizer update (not called for a step skipped as non-finite).
  virtual void after_update(Trainer& /*trainer*/, int64_t /*step*/) {}
};

// One training run. run() builds everything (device, data, model, optimizer; resumed from the newest
// checkpoint with TrainOptions::resume), then repeats train_step, log, validate and checkpoint until
// train.steps or a stop request (install_stop_handlers), and ends with a validation and a checkpoint.
class Trainer {
 public:
  Trainer(RunConfig cfg, TrainOptions opt);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Hooks run in the order they were added; run() adds drop_at_step and fault injection after these.
  void add_hook(std::unique_ptr<StepHook> hook);
  TrainOutcome run();

  // For hooks.
  const RunConfig& config() const { return cfg_; }
  DecoderLM& model() { return model_; }
  const TrainState& state() const { return state_; }
  bool console() const { return say_; }  // progress goes to the logger (which picks the ranks that print)
  // Continues with `model` (moved to the training device); the optimizer keeps the moments of parameters
  // whose names stay.
  void replace_model(DecoderLM model);

 private:
  struct StepResult {
    double loss = 0, lr = 0, grad_norm = 0;
    bool finite = false;
  };

  // What resume() found in the run directory.
  struct ResumePoint {
    std::optional<std::string> newest;      // the newest checkpoint there (found with or without --resume)
    std::optional<std::string> checkpoint;  // the one this start continues from (--resume); none: a fresh start
    int64_t step = -1;                      // its step and the tokens trained up to it (-1, 0: fresh)
    int64_t tokens = 0;
    bool complete = false;  // it ends a complete run: nothing left to do
    double val_loss = 0;    // that run's final validation loss
  };

  // build: false when resume() found the run already complete (nothing left to do).
  bool build();
  void build_device();
  void build_data();
  ResumePoint resume();
  void build_model();
  void build_optimizer();
  void open_run_dir();
  void add_default_hooks();

  StepResult train_step();
  // train.cuda_graphs: the forward and backward of step `s` (0-based) from a CUDA graph, the loss returned.
  torch::Tensor graph_forward_backward(int64_t s);
  void skip_step(const StepResult& r);
  torch::Tensor loss_of(const torch::Tensor& batch, const torch::Tensor& mask);
  void log(const StepResult& r);
  double validate();
  // eval.*: the long-context probes of the model now, logged at the current step.
  void probe_long_context();
  void checkpoint();
  bool stop_requested();
  void finish();

  RunConfig cfg_;
  TrainOptions opt_;
  DirLock run_lock_;  // rank 0's claim on the run directory, released last
  TrainOutcome out_;
  std::vector<std::unique_ptr<StepHook>> hooks_;

  // Device and ranks.
  torch::Device device_{torch::kCPU};
  std::unique_ptr<Distributed> dist_;
  bool main_rank_ = false, say_ = false;
  int world_ = 1;
  // Batch geometry: batch = accum · micro · world.
  int64_t batch_ = 0, seq_len_ = 0, micro_ = 0, accum_ = 0;
  // Data (the samplers read the sources).
  std::unique_ptr<BlockSource> train_src_, val_src_;
  std::unique_ptr<BlockSampler> sampler_, val_sampler_;
  // Model and optimizer; what a resumed checkpoint holds for the optimizer.
  ResumePoint resumed_;
  DecoderLM model_{nullptr};
  TrainState state_;
  Consensus data_parts_;  // the data's fingerprints, read once: compared across ranks, recorded in checkpoints
  MomentReader moment_;
  int64_t opt_steps_ = 0;
  std::unique_ptr<Optimizer> optimizer_;
  struct GraphStep;  // train.cuda_graphs: the captured forward + backward and its static tensors (CUDA builds)
  std::unique_ptr<GraphStep> graph_;
  ForwardOptions fwd_;  // how decoder blocks run in training (activation checkpointing, sharded weights)
  int64_t n_params_ = 0;
  int64_t bad_steps_ = 0;  // non-finite steps in a row
  RunMetrics metrics_;     // log.jsonl, TensorBoard, the console's step lines and progress
  std::unique_ptr<eval::LengthProbe> probe_;  // eval.lengths / eval.niah_lengths (null: none)
};

// Makes SIGTERM/SIGINT ask the loop to finish the current step, save and exit: blocks them in the calling
// thread (and so in every thread started later) and takes them on a dedicated sigwait thread. Call it first
// thing in main, before any other thread exists.
void install_stop_handlers();

}  // namespace drope::train
