#include "drope/formats/checkpoint_state.h"

#include "drope/core/error.h"
#include "drope/core/json.h"

namespace drope::train {

std::string checkpoint_state_json(const TrainState& st) {
  nlohmann::json j{{"step", st.step},
                   {"tokens", st.tokens},
                   {"phase_start", st.phase_start},
                   {"extra", st.extra},
                   {"format", "drope-checkpoint-1"}};
  if (st.skipped >= 0) j["skipped_steps"] = st.skipped;
  return j.dump(2) + "\n";
}

TrainState parse_checkpoint_state(const std::string& text, const std::string& path) {
  TrainState st;
  try {
    const auto j = parse_json(text, path);
    if (!j.is_object()) fail("{}: not a valid checkpoint state (expected a JSON object)", path);
    // Integers only: converting a float such as 1e300 to int64 would be undefined behaviour.
    auto integer = [&](const char* key, bool required) -> int64_t {
      if (!j.contains(key) && !required) return 0;
      const auto& v = j.at(key);
      if (!v.is_number_integer()) fail("{}: '{}' must be an integer, got {}", path, key, v.dump());
      return v.get<int64_t>();
    };
    st.step = integer("step", true);
    st.tokens = integer("tokens", true);
    st.phase_start = integer("phase_start", false);
    if (j.contains("skipped_steps")) {
      st.skipped = integer("skipped_steps", true);
      if (st.skipped < 0) fail("{}: skipped_steps must be >= 0, got {}", path, st.skipped);
    } else {
      st.skipped = -1;
    }
    st.extra = j.value("extra", nlohmann::json::object());
    if (st.extra.is_null()) st.extra = nlohmann::json::object();  // written by older builds
  } catch (const nlohmann::json::exception& e) {
    fail("{}: not a valid checkpoint state ({})", path, e.what());
  }
  if (st.step < 0 || st.tokens < 0 || st.phase_start < 0 || st.phase_start > st.step)
    fail("{}: step, tokens and phase_start must be >= 0 and phase_start <= step", path);
  if (st.skipped > st.step) fail("{}: skipped_steps {} exceeds step {}", path, st.skipped, st.step);
  if (!st.extra.is_object()) fail("{}: 'extra' must be an object", path);
  if (st.extra.contains("complete") && !st.extra["complete"].is_boolean())
    fail("{}: extra.complete must be true or false", path);
  if (st.extra.contains("val_loss") && !st.extra["val_loss"].is_number())
    fail("{}: extra.val_loss must be a number", path);
  return st;
}

}  // namespace drope::train
