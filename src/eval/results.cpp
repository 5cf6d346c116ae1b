#include "drope/eval/results.h"

#include "drope/core/error.h"

namespace drope::eval {

std::vector<std::string> write_results(const std::string& prefix, const nlohmann::json& doc,
                                       const tasks::Table& table) {
  if (!doc.is_object() || doc.value("schema", "") != kResultsSchema ||
      doc.value("schema_version", -1) != kResultsSchemaVersion || !doc.contains("kind") || !doc["kind"].is_string())
    fail("internal: results for {} lack the schema keys or the kind (build them with new_results)", prefix);
  return tasks::write_report(prefix, doc, table);
}

}  // namespace drope::eval
