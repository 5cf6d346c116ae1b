#include "drope/formats/results.h"

#include "drope/core/error.h"
#include "drope/core/json.h"

namespace drope::eval {

nlohmann::json new_results(const std::string& kind) {
  return {{"schema", kResultsSchema}, {"schema_version", kResultsSchemaVersion}, {"kind", kind}};
}

nlohmann::json read_results(const std::string& path, const std::string& what, const std::string& kind) {
  const std::string at = what.empty() ? path : what + " " + path;
  nlohmann::json j;
  try {
    j = read_json_file(path);
  } catch (const Error& e) {
    if (what.empty()) throw;
    fail("{}: {}", what, e.what());
  }
  if (!j.is_object()) fail("{}: not a drope results file (expected a JSON object)", at);
  if (j.contains("schema")) {
    if (!j["schema"].is_string() || j["schema"].get<std::string>() != kResultsSchema)
      fail("{}: schema {} is not {}", at, j["schema"].dump(), kResultsSchema);
    if (!j.contains("schema_version") || !j["schema_version"].is_number_integer())
      fail("{}: 'schema_version' must be an integer", at);
    const auto v = j["schema_version"].get<int64_t>();
    if (v < 1 || v > kResultsSchemaVersion)
      fail("{}: schema_version {} is not supported (this drope reads versions up to {}; update drope)", at, v,
           kResultsSchemaVersion);
  }
  if (!j.contains("kind") || !j["kind"].is_string()) fail("{}: not a drope results file (no string 'kind')", at);
  if (!kind.empty() && j["kind"].get<std::string>() != kind)
    fail("{}: a '{}' results file, expected '{}'", at, j["kind"].get<std::string>(), kind);
  if (j.contains("summary") && !j["summary"].is_object()) fail("{}: 'summary' must be an object", at);
  if (j.contains("results") && !j["results"].is_array()) fail("{}: 'results' must be a list", at);
  return j;
}

std::string results_label(const nlohmann::json& doc, const std::string& fallback) {
  if (doc.contains("method") && doc["method"].is_object() && doc["method"].contains("label") &&
      doc["method"]["label"].is_string())
    return doc["method"]["label"].get<std::string>();
  return fallback;
}

}  // namespace drope::eval
