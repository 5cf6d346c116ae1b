// The one format of evaluation results (drope-eval ppl / fit-temperature / niah / niah-grid / offset-key / longbench /
// longbench-score / compare): a JSON document
//   {"schema": "drope.results", "schema_version": 1, "kind": "ppl" | "temperature" | "niah" | "niah-grid" |
//    "offset-key" | "longbench" | "longbench_e" | "compare/<kind>", "method": {"label": ..., ...}, "results": [...],
//    "summary": {"<column>": number, ...}, ...kind-specific settings}
// written with a CSV and a Markdown table beside it, and read back by every reader (compare, ppl --with,
// scripts/drope_scripts/results.py). docs/formats.md lists each kind's fields. Torch-free; writing a document with
// its tables is eval's (eval/results.h).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace drope::eval {

inline constexpr const char* kResultsSchema = "drope.results";
inline constexpr int kResultsSchemaVersion = 1;

// A new document of `kind` with the schema keys.
nlohmann::json new_results(const std::string& kind);

// Reads a results document; `what` (a flag or a file role) prefixes errors. Refuses a document that is not
// an object, has another schema or a newer version, lacks a string kind, or (when `kind` is not empty) has
// another kind. Documents without the schema keys are version 0 (written before the schema was named) and
// are read with the same layout.
nlohmann::json read_results(const std::string& path, const std::string& what, const std::string& kind = "");

// The method label of a document ("method": {"label": ...}), or `fallback`.
std::string results_label(const nlohmann::json& doc, const std::string& fallback);

}  // namespace drope::eval
