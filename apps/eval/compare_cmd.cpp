// `drope-eval compare`: result files of several methods side by side (methods as rows, as the paper's
// tables): every numeric entry of each file's "summary" object becomes a column.
#include <algorithm>

#include <fmt/format.h>

#include "app_common.h"
#include "drope/core/error.h"
#include "drope/core/files.h"
#include "drope/core/json.h"
#include "drope/tasks/report.h"
#include "eval/common.h"

namespace drope::evalcli {

void add_compare_command(CLI::App& cli, int& rc) {
  struct Opts {
    std::vector<std::string> files;
    std::string out = "results/compare";
    std::string title;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = cli.add_subcommand("compare", "Side-by-side table of result JSON files (ppl, niah, longbench)");
  cmd->add_option("files", o->files, "Result .json files written by drope-eval")->required();
  cmd->add_option("--out", o->out, "Output prefix (.json/.csv/.md)");
  cmd->add_option("--title", o->title, "Table title");
  cmd->callback([o, &rc] {
    rc = app::run([&] {
      std::vector<std::string> columns;
      std::vector<std::pair<std::string, nlohmann::json>> methods;
      std::string kind;
      for (const auto& f : o->files) {
        const nlohmann::json j = read_json_file(f);
        if (!j.is_object() || !j.contains("summary") || !j["summary"].is_object() || !j.contains("kind"))
          fail("{}: not a drope-eval result file (expected 'kind' and a 'summary' object)", f);
        const auto k = j["kind"].get<std::string>();
        if (kind.empty()) kind = k;
        if (k != kind) fail("{}: result kind '{}' differs from '{}' of the first file", f, k, kind);
        for (auto it = j["summary"].begin(); it != j["summary"].end(); ++it) {
          if (!it.value().is_number()) fail("{}: summary entry '{}' is not a number", f, it.key());
          if (std::find(columns.begin(), columns.end(), it.key()) == columns.end()) columns.push_back(it.key());
        }
        std::string label = f;
        if (j.contains("method") && j["method"].is_object() && j["method"].contains("label"))
          label = j["method"]["label"].get<std::string>();
        methods.emplace_back(label, j["summary"]);
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
      t.title = o->title.empty() ? fmt::format("{} — side by side", kind) : o->title;
      t.columns = {"method"};
      t.columns.insert(t.columns.end(), columns.begin(), columns.end());
      nlohmann::json doc = {{"kind", "compare/" + kind}, {"methods", nlohmann::json::array()}};
      for (const auto& [label, summary] : methods) {
        std::vector<std::string> row = {label};
        for (const auto& c : columns)
          row.push_back(summary.contains(c) ? tasks::fixed(summary[c].get<double>(), 2) : "");
        t.add_row(row);
        doc["methods"].push_back({{"label", label}, {"summary", summary}});
      }
      for (const auto& p : tasks::write_results(o->out, doc, t)) fmt::print("wrote {}\n", p);
      fmt::print("{}", tasks::to_markdown(t));
      return 0;
    });
  });
}

}  // namespace drope::evalcli
