// Writing evaluation results: the document (formats/results.h: the schema, reading it back) with a CSV and a
// Markdown table beside it.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "drope/formats/results.h"
#include "drope/tasks/report.h"

namespace drope::eval {

// Writes <prefix>.json (doc, which must carry the schema keys and a kind), <prefix>.csv and <prefix>.md, each
// atomically. Returns the three paths.
std::vector<std::string> write_results(const std::string& prefix, const nlohmann::json& doc, const tasks::Table& table);

}  // namespace drope::eval
