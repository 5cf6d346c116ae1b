// Training checkpoints: a model directory (drope.yaml + model.safetensors [+ config.json], loadable by
// every tool) plus optimizer.safetensors, state.json and the run's resolved config, written atomically
// as a directory; the last K are kept.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "drope/core/files.h"
#include "drope/formats/checkpoint_state.h"
#include "drope/model/transformer.h"
#include "drope/train/adamw.h"

namespace drope::train {

// Writes `<run>/checkpoints/step-<step>/` atomically, then deletes all but the newest `keep_last`.
std::string save_checkpoint(const std::string& run_dir, DecoderLM& model, const AdamW& opt, const TrainState& st,
                            const std::string& run_yaml, int64_t keep_last);

// Removes what an interrupted run left behind: our temp files/directories (drope::temp_path_for names of
// processes that no longer run) in the run directory and in checkpoints/; a user's files are never
// touched. Returns how many entries were removed.
int remove_stale_run_temporaries(const std::string& run_dir);

// Claims a run directory for one process: fails unless `run_dir` is absent, empty or a run directory of ours
// (it holds DirLock's lock file or a checkpoint; any directory with `force`) and is not, is not inside and
// does not hold one of `inputs` ((config key, path) pairs), then locks it for as long as the lock lives. The run
// records its resolved config as <run_dir>/config.yaml: when `config_file` (the YAML the run was started from) is
// that file and the directory is not ours yet, it is the user's and is refused, even with `force`.
DirLock claim_run_dir(const std::string& run_dir, const std::vector<std::pair<std::string, std::string>>& inputs,
                      bool force, const std::string& config_file = "");

// The newest complete checkpoint directory of a run, if any (leftover temp directories are ignored).
std::optional<std::string> latest_checkpoint(const std::string& run_dir);

class Distributed;
class ShardedDataParallel;

// A sharded run's checkpoint (train.shard other than none), written by every rank together: rank 0 writes
// the model files (weights gathered from the shards, so every tool loads the directory as a model), every
// rank its optimizer pieces (optimizer-<rank>-of-<world>.safetensors: "exp_avg.<name>@<start>" 1-D pieces),
// rank 0 optimizer-manifest.json and state.json last; the directory appears atomically (a rank killed
// meanwhile leaves only a temporary that the next start removes). Then all but the newest `keep_last` go.
std::string save_sharded_checkpoint(Distributed& dist, const std::string& run_dir, DecoderLM& model,
                                    ShardedDataParallel& sdp, const TrainState& st, const std::string& run_yaml,
                                    int64_t keep_last);

struct LoadedCheckpoint {
  DecoderLM model{nullptr};
  TrainState state;
  int64_t optimizer_steps = 0;
  // Elements [start, start + len) of parameter `name`'s flattened moment `kind` ("exp_avg" / "exp_avg_sq"),
  // from either layout (one optimizer.safetensors, or a sharded run's pieces at any world size).
  std::function<torch::Tensor(const std::string& kind, const std::string& name, int64_t start, int64_t len)> moment;
  int64_t saved_world = 1;    // world size of a sharded checkpoint (1 for the unsharded layout)
  std::string saved_shard = "none";
};
// Loads a checkpoint directory and cross-checks it: state.json's step against the directory name and the
// optimizer's step count, optimizer moments finite (second moments also non-negative); then its integrity:
// every file and tensor against the digests state.json records, the run and step in the safetensors files'
// metadata against state.json's, and the run against the other checkpoints of its run directory. Errors name
// the file (and tensor); with `allow_foreign` (weights grafted on purpose) an integrity mismatch is a warning.
LoadedCheckpoint load_checkpoint(const std::string& dir, bool allow_foreign = false);

// Gives a run its identity unless it has one (resumed from a checkpoint of this build): a random id, the same
// on every rank, and as parent the run and step of `init` (run.init) when that is a checkpoint. For a run
// that starts, or resumes a checkpoint of an older build; before its first checkpoint.
void begin_run_identity(TrainState& st, const std::string& init, Distributed& dist, const torch::Device& device);

}  // namespace drope::train
