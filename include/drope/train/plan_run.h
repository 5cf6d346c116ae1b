// `drope-train CONFIG --plan`: a run config's memory plan per rank for every shard mode, printed without
// allocating anything (the plan itself: memory_plan.h).
#pragma once

#include "drope/train/run_config.h"

namespace drope::train {

struct PlanRun {
  int world = 1;             // data-parallel ranks
  double gpu_mem_gb = 80;    // device memory per rank: the largest micro-batch that fits it
  bool json = false;         // one JSON object per shard mode (bytes) instead of the Markdown table
};

// Prints the plan of `cfg` on stdout: the batch geometry and activation checkpointing are checked as the
// trainer checks them; the model is the config's own or that of run.init.
void run_plan(const RunConfig& cfg, const PlanRun& r);

}  // namespace drope::train
