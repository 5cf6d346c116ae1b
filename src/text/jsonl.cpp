#include "drope/text/jsonl.h"

#include <fstream>

#include "drope/core/error.h"

namespace drope::text {

void for_each_jsonl_object(const std::string& path, const std::function<bool(int64_t, const nlohmann::json&)>& fn) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open for reading", path);
  std::string line;
  for (int64_t n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r\n") == std::string::npos) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range: a number that overflows
      fail("{}:{}: invalid JSON ({})", path, n, e.what());
    }
    if (!j.is_object()) fail("{}:{}: expected a JSON object, got {}", path, n, j.type_name());
    if (!fn(n, j)) return;
  }
  if (in.bad()) fail("{}: read error", path);
}

const std::string& jsonl_string(const nlohmann::json& object, const std::string& key, const std::string& path,
                                int64_t line) {
  auto it = object.find(key);
  if (it == object.end()) fail("{}:{}: missing field \"{}\"", path, line, key);
  if (!it->is_string()) fail("{}:{}: field \"{}\" must be a string, got {}", path, line, key, it->type_name());
  return it->get_ref<const std::string&>();
}

}  // namespace drope::text
