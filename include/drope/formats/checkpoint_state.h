// The state.json of a training checkpoint (the resume metadata, the run's identity and the digest of every
// file beside it), read and written without LibTorch.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

namespace drope::train {

// Which run a checkpoint belongs to: a random id made when the run starts and carried by every checkpoint of
// it; a run started from another run's checkpoint (run.init) records that one as its parent.
struct RunIdentity {
  std::string id;                // 32 lowercase hex digits; empty in checkpoints of older builds
  std::string parent_id;         // the run of run.init's checkpoint (empty: none, or an older build's)
  int64_t parent_step = -1;      // that checkpoint's step (-1: no parent checkpoint)
  std::string parent_path;       // run.init as given
};

// The recorded digest of one checkpoint file: CRC-32C of each tensor (bytes, dtype, shape) of a safetensors
// file, of the whole content of any other file. 8 lowercase hex digits each.
struct FileDigest {
  std::string whole;                            // text files (drope.yaml, config.json, run.yaml, manifest)
  std::map<std::string, std::string> tensors;   // *.safetensors: tensor name → digest
};

struct TrainState {
  int64_t step = 0;          // optimizer steps completed
  int64_t tokens = 0;        // training tokens consumed (global)
  int64_t phase_start = 0;   // step at which the schedule of the current phase started
  int64_t skipped = 0;  // steps without an optimizer update (non-finite loss): optimizer steps = step - skipped;
                        // -1 when unknown (state.json of older builds)
  nlohmann::json extra = nlohmann::json::object();  // anything else worth keeping (val loss, ...)
  RunIdentity run;
  std::map<std::string, FileDigest> digests;  // file name inside the checkpoint → its digest
  // As read: 2 for drope-checkpoint-2 (identity and digests present), 1 for older builds' files (neither).
  int version = 2;
  bool intact = true;  // as read: state.json's own digest matches its content (always true for version 1)
};

// state.json text (its presence marks a complete checkpoint): drope-checkpoint-2, or the older layout
// (drope-checkpoint-1, no identity or digests) for a state without a run id, as read from an older build's file.
std::string checkpoint_state_json(const TrainState& st);
// Parses and validates state.json; errors name `path` and the key. A mismatch of state.json's own digest is
// not an error here (the caller decides when to report it): it clears `intact`.
TrainState parse_checkpoint_state(const std::string& text, const std::string& path);

// A new random run id (32 lowercase hex digits).
std::string new_run_id();

}  // namespace drope::train
