// `drope-train plot RUN_DIR`: the loss and learning-rate curves of a run, read from its log.jsonl.
#pragma once

#include <string>
#include <vector>

namespace drope::train {

// Reads `run_dir`/log.jsonl (the trainer's step record) and draws two panels, training and validation
// loss vs step and learning rate vs step, to `out_prefix`.png and `out_prefix`.svg (default prefix:
// `run_dir`/curves). Both renderings are made before either file is written, and each file is written
// atomically. Fails naming the directory or file:line when run_dir is not a directory, log.jsonl is
// missing, not a regular file or malformed (invalid JSON, a step or value of the wrong type or not
// finite), or no training step is logged yet. Returns the paths written.
std::vector<std::string> plot_training_curves(const std::string& run_dir, std::string out_prefix = "");

}  // namespace drope::train
