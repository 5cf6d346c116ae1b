// A training checkpoint's state.json, and its round trip.
#include "drope/formats/checkpoint_state.h"
#include "fuzz_util.h"

DROPE_FUZZ_TARGET(checkpoint_state)(const uint8_t* data, size_t size) {
  const std::string where = "ckpt/state.json";
  const std::string text(reinterpret_cast<const char*>(data), size);
  drope::fuzz::expect_clean(where, [&] {
    const auto st = drope::train::parse_checkpoint_state(text, where);
    const auto again = drope::train::parse_checkpoint_state(drope::train::checkpoint_state_json(st), "again.json");
    drope::fuzz::check(again.step == st.step && again.tokens == st.tokens && again.extra == st.extra,
                       "state.json round trip");
  });
  return 0;
}
