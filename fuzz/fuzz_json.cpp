// The strict JSON reader every user file goes through (drope/core/json.h): whatever the input, it is
// parsed or refused with a message naming the source; what parses is at most kMaxJsonDepth deep, has no
// repeated key, and survives dump → parse unchanged (dump and copy recurse, so the depth cap is what
// keeps them on the stack).
#include <utility>
#include <vector>

#include "drope/core/json.h"
#include "fuzz_util.h"

DROPE_FUZZ_TARGET(json)(const uint8_t* data, size_t size) {
  const std::string where = "fuzz/input.json";
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  drope::fuzz::expect_clean(where, [&] {
    const nlohmann::json j = drope::parse_json(text, where);
    std::vector<std::pair<const nlohmann::json*, int>> todo{{&j, 1}};
    while (!todo.empty()) {
      const auto [v, depth] = todo.back();
      todo.pop_back();
      if (!v->is_structured()) {
        if (v->is_number()) {
          try {
            drope::json_int64(*v, where);
          } catch (const drope::Error&) {
          }
        }
        continue;
      }
      drope::fuzz::check(depth <= drope::kMaxJsonDepth, "parsed JSON is at most kMaxJsonDepth deep");
      for (const auto& child : *v) todo.emplace_back(&child, depth + 1);
    }
    const std::string out = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    const nlohmann::json back = drope::parse_json(out, "fuzz/dumped.json");
    drope::fuzz::check(j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) ==
                           back.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
                       "dump → parse round-trips");
  });
  return 0;
}
