// drope-eval compare: results files of several methods side by side (methods as rows, as the paper's tables):
// every numeric entry of each file's "summary" object becomes a column.
#include <algorithm>

#include <fmt/format.h>

#include "drope/core/error.h"
#include "drope/eval/results.h"
#include "drope/eval/runners.h"
#include "drope/tasks/report.h"

namespace drope::eval {

void run_compare(const CompareRun& r) {
  std::vector<std::string> columns;
  std::vector<std::pair<std::string, nlohmann::json>> methods;
  std::string kind;
  for (const auto& f : r.files) {
    const nlohmann::json j = read_results(f, "");
    if (!j.contains("summary")) fail("{}: a results file without a 'summary' to compare", f);
    const auto k = j["kind"].get<std::string>();
    if (kind.empty()) kind = k;
    if (k != kind) fail("{}: result kind '{}' differs from '{}' of the first file", f, k, kind);
    for (auto it = j["summary"].begin(); it != j["summary"].end(); ++it) {
      if (!it.value().is_number()) fail("{}: summary entry '{}' is not a number", f, it.key());
      if (std::find(columns.begin(), columns.end(), it.key()) == columns.end()) columns.push_back(it.key());
    }
    methods.emplace_back(results_label(j, f), j["summary"]);
  }
  // JSON objects come back in key order ("ppl@1024" before "ppl@256"): order by name, then by the
  // number after '@' so that lengths read left to right.
  auto split = [](const std::string& c) {
    const auto at = c.rfind('@');
    if (at == std::string::npos) return std::make_pair(c, -1.0);
    try {
      return std::make_pair(c.substr(0, at), std::stod(c.substr(at + 1)));
    } catch (const std::exception&) {
      return std::make_pair(c, -1.0);
    }
  };
  std::stable_sort(columns.begin(), columns.end(),
                   [&](const std::string& a, const std::string& b) { return split(a) < split(b); });
  tasks::Table t;
  t.title = r.title.empty() ? fmt::format("{} — side by side", kind) : r.title;
  t.columns = {"method"};
  t.columns.insert(t.columns.end(), columns.begin(), columns.end());
  nlohmann::json doc = new_results("compare/" + kind);
  doc["methods"] = nlohmann::json::array();
  for (const auto& [label, summary] : methods) {
    std::vector<std::string> row = {label};
    for (const auto& c : columns)
      row.push_back(summary.contains(c) ? tasks::fixed(summary[c].get<double>(), 2) : "");
    t.add_row(row);
    doc["methods"].push_back({{"label", label}, {"summary", summary}});
  }
  for (const auto& p : write_results(r.out, doc, t)) fmt::print("wrote {}\n", p);
  fmt::print("{}", tasks::to_markdown(t));
}

}  // namespace drope::eval
