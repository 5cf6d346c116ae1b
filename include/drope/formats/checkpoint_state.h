// The state.json of a training checkpoint (the resume metadata), read and written without LibTorch.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace drope::train {

struct TrainState {
  int64_t step = 0;          // optimizer steps completed
  int64_t tokens = 0;        // training tokens consumed (global)
  int64_t phase_start = 0;   // step at which the schedule of the current phase started
  int64_t skipped = 0;  // steps without an optimizer update (non-finite loss): optimizer steps = step - skipped;
                        // -1 when unknown (state.json of older builds)
  nlohmann::json extra = nlohmann::json::object();  // anything else worth keeping (val loss, ...)
};

// state.json text (its presence marks a complete checkpoint).
std::string checkpoint_state_json(const TrainState& st);
// Parses and validates state.json; errors name `path` and the key.
TrainState parse_checkpoint_state(const std::string& text, const std::string& path);

}  // namespace drope::train
