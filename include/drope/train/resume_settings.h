// What `drope-train --resume` may change. A setting may differ from the one a checkpoint was trained with
// only when the steps already taken would have been the same under the new value, so that the resumed run is
// an uninterrupted run with the new settings; anything else is refused naming the key (docs/training.md,
// "What --resume may change").
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "drope/config/model_config.h"
#include "drope/formats/checkpoint_state.h"
#include "drope/train/run_config.h"

namespace drope::train {

// Compares `now` (the config of this start) with `<ckpt_dir>/run.yaml`, the settings the checkpoint at `state`
// was trained with. Fails with one line naming that file, the first key whose change would alter the steps
// already taken, both values and the way out. A checkpoint without run.yaml (older builds) is checked against
// `ckpt_model`, the checkpoint's model, for the model's shape only.
void check_resume_settings(const RunConfig& now, const std::string& ckpt_dir, const TrainState& state,
                           const ModelConfig& ckpt_model);

// Every setting of `c` as ("section.key", value) in the order of the resolved config (a sequence is one value).
std::vector<std::pair<std::string, std::string>> config_leaves(const RunConfig& c);

}  // namespace drope::train
