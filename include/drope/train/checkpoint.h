// Training checkpoints: a model directory (drope.yaml + model.safetensors [+ config.json], loadable by
// every tool) plus optimizer.safetensors, state.json and the run's resolved config, written atomically
// as a directory; the last K are kept.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "drope/model/transformer.h"
#include "drope/train/checkpoint_state.h"
#include "drope/train/optim.h"

namespace drope::train {

// Writes `<run>/checkpoints/step-<step>/` atomically, then deletes all but the newest `keep_last`.
std::string save_checkpoint(const std::string& run_dir, DecoderLM& model, const AdamW& opt, const TrainState& st,
                            const std::string& run_yaml, int64_t keep_last);

// Removes what an interrupted run left behind: our temp files/directories (drope::temp_path_for names of
// processes that no longer run) in the run directory and in checkpoints/; a user's files are never
// touched. Returns how many entries were removed.
int remove_stale_run_temporaries(const std::string& run_dir);

// The newest complete checkpoint directory of a run, if any (leftover temp directories are ignored).
std::optional<std::string> latest_checkpoint(const std::string& run_dir);

struct LoadedCheckpoint {
  DecoderLM model{nullptr};
  TrainState state;
  std::map<std::string, torch::Tensor> optimizer;
  int64_t optimizer_steps = 0;
};
// Loads a checkpoint directory and cross-checks it: state.json's step against the directory name and the
// optimizer's step count, optimizer moments finite (second moments also non-negative). Errors name the file.
LoadedCheckpoint load_checkpoint(const std::string& dir);

}  // namespace drope::train
