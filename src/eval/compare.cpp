// drope-eval compare: results files of several methods side by side (methods as rows, as the paper's tables):
// every numeric entry of each file's "summary" object becomes a column.
#include <algorithm>
#include <filesystem>
#include <limits>
#include <map>
#include <numeric>

#include <fmt/format.h>

#include "drope/core/error.h"
#include "drope/core/log.h"
#include "drope/eval/results.h"
#include "drope/eval/runners.h"
#include "drope/plot/plot.h"
#include "drope/tasks/report.h"

namespace drope::eval {

namespace {

// The plot of --plot: per label (first-appearance order), the mean over its files of summary "<name>@L" at
// each L any of them has, with a min–max band when several files (seeds) share the label.
plot::Figure plot_summary(const CompareRun& r, const std::vector<std::pair<std::string, nlohmann::json>>& methods,
                          double train_length) {
  const std::string prefix = r.plot + "@";
  std::vector<std::string> labels;
  std::map<std::string, std::map<double, std::vector<double>>> values;  // label → L → per file
  for (const auto& [label, summary] : methods) {
    if (!values.count(label)) labels.push_back(label);
    auto& per_length = values[label];
    for (auto it = summary.begin(); it != summary.end(); ++it) {
      if (it.key().rfind(prefix, 0) != 0) continue;
      double L = 0;
      try {
        L = std::stod(it.key().substr(prefix.size()));
      } catch (const std::exception&) {
        continue;
      }
      per_length[L].push_back(it.value().get<double>());
    }
  }
  plot::Panel panel;
  panel.title = r.title.empty() ? fmt::format("{} vs length", r.plot) : r.title;
  panel.xlabel = "length (tokens)";
  panel.ylabel = r.plot;
  double y_lo = std::numeric_limits<double>::infinity(), y_hi = -y_lo;
  bool banded = false;
  for (const auto& label : labels) {
    plot::Series s;
    s.label = label;
    for (const auto& [L, v] : values[label]) {
      s.x.push_back(L);
      s.y.push_back(std::accumulate(v.begin(), v.end(), 0.0) / double(v.size()));
      s.lower.push_back(*std::min_element(v.begin(), v.end()));
      s.upper.push_back(*std::max_element(v.begin(), v.end()));
      banded |= v.size() > 1;
      y_lo = std::min(y_lo, s.lower.back()), y_hi = std::max(y_hi, s.upper.back());
    }
    if (!s.x.empty()) panel.series.push_back(std::move(s));
  }
  if (panel.series.empty()) fail("--plot {}: no file has a summary entry '{}L'", r.plot, prefix);
  if (!banded)
    for (auto& s : panel.series) s.lower.clear(), s.upper.clear();
  if (train_length > 0)
    panel.series.push_back(plot::guide_line("train length", {train_length, train_length}, {y_lo, y_hi}));
  plot::Figure fig;
  fig.panel_width = 600;  // room for a title and a legend beside up to eight lines
  fig.panels.push_back(panel);
  return fig;
}

}  // namespace

void run_compare(const CompareRun& r) {
  std::vector<std::string> columns;
  std::vector<std::pair<std::string, nlohmann::json>> methods;
  std::string kind;
  double train_length = 0;  // of the first file that names one (the plot's guide line)
  for (size_t i = 0; i < r.files.size(); ++i)  // one file twice would be shown twice and counted as two seeds
    for (size_t k = 0; k < i; ++k) {
      std::error_code ec;
      if (std::filesystem::equivalent(r.files[i], r.files[k], ec))
        fail("{}: given twice (the same file as {}); each results file is one method or seed", r.files[i], r.files[k]);
    }
  for (const auto& f : r.files) {
    const nlohmann::json j = read_results(f, "");
    if (train_length == 0 && j.contains("method") && j["method"].is_object() && j["method"].contains("train_length") &&
        j["method"]["train_length"].is_number())
      train_length = j["method"]["train_length"].get<double>();
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
    for (const auto& c : columns) row.push_back(summary.contains(c) ? tasks::fixed(summary[c].get<double>(), 2) : "");
    t.add_row(row);
    doc["methods"].push_back({{"label", label}, {"summary", summary}});
  }
  plot::Figure fig;
  if (!r.plot.empty()) fig = plot_summary(r, methods, train_length);  // fails before anything is written
  for (const auto& p : write_results(r.out, doc, t)) logging::info("wrote {}", p);
  if (!r.plot.empty()) {
    plot::save(fig, r.out + ".png");
    plot::save(fig, r.out + ".svg");
    logging::info("wrote {}.png and {}.svg", r.out, r.out);
  }
  fmt::print("{}", tasks::to_markdown(t));
}

}  // namespace drope::eval
