#include "drope/train/curves.h"

#include <cmath>
#include <filesystem>
#include <map>
#include <system_error>

#include <fmt/format.h>

#include "drope/core/error.h"
#include "drope/core/files.h"
#include "drope/core/json.h"
#include "drope/plot/plot.h"
#include "drope/text/jsonl.h"

namespace fs = std::filesystem;

namespace drope::train {

namespace {

// Appends (step, line[key]) to `s` when the line has `key`; the value must be a finite number.
void take(const nlohmann::json& line, const char* key, double step, plot::Series& s, const std::string& where) {
  auto it = line.find(key);
  if (it == line.end()) return;
  if (!it->is_number() || !std::isfinite(it->get<double>()))
    fail("{}: \"{}\" must be a finite number, got {}", where, key, it->dump());
  s.x.push_back(step);
  s.y.push_back(it->get<double>());
}

}  // namespace

std::vector<std::string> plot_training_curves(const std::string& run_dir, std::string out_prefix) {
  std::error_code ec;
  if (!fs::is_directory(run_dir, ec))
    fail("drope-train plot: '{}' is not a directory (expected a run directory, "
         "run.out_dir of a drope-train config)",
         run_dir);
  const std::string log = (fs::path(run_dir) / "log.jsonl").string();
  if (!fs::exists(fs::symlink_status(log, ec)))
    fail("{}: missing: '{}' is not a drope-train run directory, or the run has not started", log, run_dir);
  plot::Series loss, val, lr;
  loss.label = "train", val.label = "validation", lr.label = "";
  // The long-context probes (eval.lengths, eval.niah_lengths): one series per "ppl@L" / "niah_<task>@L" key.
  std::map<std::string, plot::Series> ppl, niah;
  text::for_each_jsonl_object(log, [&](int64_t n, const nlohmann::json& j) {
    const std::string where = fmt::format("{}:{}", log, n);
    auto it = j.find("step");
    if (it == j.end()) fail("{}: missing \"step\"", where);
    const int64_t step = json_int64(*it, where + ": \"step\"");
    if (step < 0) fail("{}: \"step\" must be >= 0, got {}", where, step);
    take(j, "loss", double(step), loss, where);
    take(j, "val_loss", double(step), val, where);
    take(j, "lr", double(step), lr, where);
    for (const auto& [key, value] : j.items()) {
      const bool is_ppl = key.rfind("ppl@", 0) == 0, is_niah = key.rfind("niah_", 0) == 0;
      if (!is_ppl && !is_niah) continue;
      take(j, key.c_str(), double(step), (is_ppl ? ppl : niah)[key], where);
    }
    return true;
  });
  if (loss.x.empty()) fail("{}: no training step logged yet (no line with \"loss\")", log);

  const bool many = loss.x.size() > 60;  // dots only while they can be told apart
  loss.markers = lr.markers = !many;
  plot::Figure fig;
  fig.title = fs::path(run_dir).lexically_normal().filename().string();
  if (fig.title.empty() || fig.title == ".") fig.title = fs::absolute(run_dir).lexically_normal().filename().string();
  plot::Panel lp;
  lp.title = "loss";
  lp.xlabel = "step";
  lp.ylabel = "cross-entropy (nats/token)";
  lp.series.push_back(loss);
  if (!val.x.empty()) lp.series.push_back(val);
  plot::Panel rp;
  rp.title = "learning rate";
  rp.xlabel = "step";
  rp.ylabel = "lr";
  rp.series.push_back(lr);
  fig.panels = {lp};
  if (!lr.x.empty()) fig.panels.push_back(rp);
  // Probe panels: perplexity per window length (log scale) and NIAH score per length, against the step.
  const auto probe_panel = [&](std::map<std::string, plot::Series>& series, const char* title, const char* ylabel,
                               bool log_y) {
    if (series.empty()) return;
    plot::Panel pp;
    pp.title = title;
    pp.xlabel = "step";
    pp.ylabel = ylabel;
    pp.log_y = log_y;
    int color = 0;
    for (auto& [key, s] : series) {
      s.label = key;
      s.color = color++;
      s.markers = s.x.size() <= 60;
      pp.series.push_back(s);
    }
    fig.panels.push_back(pp);
  };
  probe_panel(ppl, "perplexity by context length", "perplexity", true);
  probe_panel(niah, "needle in a haystack by length", "score (%)", false);

  if (out_prefix.empty()) out_prefix = (fs::path(run_dir) / "curves").string();
  const std::vector<std::string> formats{"png", "svg"};
  std::vector<std::string> bytes, paths;
  for (const auto& f : formats) {
    bytes.push_back(plot::render(fig, f));
    paths.push_back(out_prefix + "." + f);
  }
  for (size_t i = 0; i < paths.size(); ++i) write_file_atomic(paths[i], bytes[i]);
  return paths;
}

}  // namespace drope::train
