#include "drope/text/jsonl.h"

#include <string_view>

#include <fmt/format.h>

#include "drope/core/error.h"
#include "drope/core/json.h"
#include "drope/text/line_reader.h"

namespace drope::text {

void for_each_jsonl_object(const std::string& path, const std::function<bool(int64_t, const nlohmann::json&)>& fn) {
  LineReader lines(path);  // regular files only (a FIFO is refused, not waited on); .gz / .zst decompressed
  std::string_view line;
  while (lines.next(line)) {
    if (line.find_first_not_of(" \t\r\n") == std::string_view::npos) continue;
    const int64_t n = lines.line_number();
    const nlohmann::json j = parse_json(line, fmt::format("{}:{}", path, n));
    if (!j.is_object()) fail("{}:{}: expected a JSON object, got {}", path, n, j.type_name());
    if (!fn(n, j)) return;
  }
}

const std::string& jsonl_string(const nlohmann::json& object, const std::string& key, const std::string& path,
                                int64_t line) {
  auto it = object.find(key);
  if (it == object.end()) fail("{}:{}: missing field \"{}\"", path, line, key);
  if (!it->is_string()) fail("{}:{}: field \"{}\" must be a string, got {}", path, line, key, it->type_name());
  return it->get_ref<const std::string&>();
}

}  // namespace drope::text
