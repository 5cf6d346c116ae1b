// Result files of the evaluation tools: one table written as JSON, CSV and a Markdown table, each
// atomically, so that an interrupted run never leaves a partial result and earlier results survive
// until the new ones are complete. Torch-free.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace drope::tasks {

// A rectangular table of already formatted cells (numbers formatted by the caller, e.g. "12.34").
struct Table {
  std::string title;                           // Markdown heading; empty = none
  std::vector<std::string> columns;
  std::vector<std::vector<std::string>> rows;  // each as long as `columns`
  void add_row(std::vector<std::string> row);  // throws unless row.size() == columns.size()
};

// Renders the table as CSV (RFC 4180 quoting) and as a GitHub Markdown table.
std::string to_csv(const Table& t);
std::string to_markdown(const Table& t);

// Writes `<prefix>.json` (the `json` document, pretty-printed; evaluation results go through
// eval::write_results, which adds the results schema), `<prefix>.csv` and `<prefix>.md`
// atomically, creating the parent directory. Returns the three paths.
std::vector<std::string> write_report(const std::string& prefix, const nlohmann::json& json, const Table& table);

// "12.34"-style fixed-point formatting (NaN → "nan").
std::string fixed(double v, int decimals = 2);

}  // namespace drope::tasks
