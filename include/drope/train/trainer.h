// The training loop behind `drope-train`: phases (pretrain, drope, finetune, drop_at_step), gradient
// accumulation, data parallelism, logging, validation, checkpoints and exact resume.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

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

TrainOutcome run_training(const RunConfig& cfg, const TrainOptions& opt);

// Makes SIGTERM/SIGINT ask the loop to finish the current step, save and exit: blocks them in the calling
// thread (and so in every thread started later) and takes them on a dedicated sigwait thread. Call it first
// thing in main, before any other thread exists.
void install_stop_handlers();

}  // namespace drope::train
