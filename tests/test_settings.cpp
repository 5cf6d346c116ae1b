// The settings table (drope/train/settings.h) drives the run config's reading, range checks, resolved YAML,
// the resume comparison, --help and the docs: each test below goes over every row, so a row added to the
// table is covered without touching them.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "drope/core/files.h"
#include "drope/train/lr_schedule.h"
#include "drope/train/resume_settings.h"
#include "drope/train/run_config.h"
#include "drope/train/settings.h"
#include "test_util.h"

using namespace drope;
using namespace drope::train;
namespace fs = std::filesystem;

namespace {

const char* kData = "/usr/share/common-licenses/GPL-3";

std::string base_cfg(const std::string& d) {
  write_file_atomic(d + "/cfg.yaml", fmt::format("run: {{name: s, out_dir: {}/run, seed: 1}}\n"
                                                 "model: {{preset: micro, max_position: 32}}\n"
                                                 "data: {{text: {}, seq_len: 16, batch_size: 4}}\n"
                                                 "schedule: {{type: constant}}\n"
                                                 "train: {{steps: 4, log_every: 1}}\n",
                                                 d, kData));
  return d + "/cfg.yaml";
}

std::vector<std::string> split_choices(const std::string& choices) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    const size_t bar = choices.find(" | ", start);
    out.push_back(choices.substr(start, bar - start));
    if (bar == std::string::npos) return out;
    start = bar + 3;
  }
}

// Another value of the setting than the one `c` has, as YAML.
std::string other_value(const Setting& s, const RunConfig& c) {
  const std::string now = s.omitted && s.omitted(c) ? "" : setting_value(s, c);
  if (!s.choices.empty())
    for (const auto& name : split_choices(s.choices))
      if (name != now) return name;
  if (s.type == "bool") return now == "true" ? "false" : "true";
  if (s.type == "integer") return std::to_string(std::stoll(now) + 1);
  if (s.type == "number") return fmt::format("{}", std::stod(now) + 0.25);
  if (s.type == "lengths") return "[64]";
  if (s.type == "[number, number]") return "[0.8, 0.9]";
  return "elsewhere";
}

// `c` with one setting set to `value`, through the row's own reader (no cross-key checks).
RunConfig with(const RunConfig& c, const Setting& s, const std::string& value) {
  RunConfig out = c;
  YAML::Node node = YAML::Load(fmt::format("{{{}: {}}}", s.name(), value));
  YamlMap m(node, "test", s.section());
  EXPECT_TRUE(s.read(m, s.name(), out)) << s.key;
  return out;
}

// An outside value for each finite end of a row's range, as YAML.
std::vector<std::string> outside(const Setting& s) {
  std::vector<std::string> out;
  const Interval& r = *s.range;
  const bool integer = s.type == "integer" || s.type == "lengths";
  const auto put = [&](double v) {
    const std::string x = integer ? std::to_string(static_cast<int64_t>(v)) : fmt::format("{}", v);
    out.push_back(s.type == "lengths" ? "[" + x + "]" : s.type == "[number, number]" ? "[" + x + ", 0.5]" : x);
  };
  if (std::isfinite(r.lo)) put(r.lo_open ? r.lo : r.lo - 1);
  if (std::isfinite(r.hi)) put(r.hi_open ? r.hi : r.hi + 1);
  return out;
}

}  // namespace

TEST(Settings, EveryKeyOnceInItsSection) {
  std::set<std::string> keys;
  const auto& sections = setting_sections();
  for (const auto& s : run_settings()) {
    EXPECT_TRUE(keys.insert(s.key).second) << s.key << " twice";
    EXPECT_NE(std::find(sections.begin(), sections.end(), s.section()), sections.end()) << s.key;
    EXPECT_FALSE(s.doc.empty()) << s.key;
    EXPECT_EQ(find_setting(s.key), &s);
    EXPECT_TRUE(s.read && s.emit) << s.key;
  }
  EXPECT_EQ(find_setting("model.hidden_size"), nullptr);
  EXPECT_EQ(resume_rule("model.hidden_size"), OnResume::kFixed);
  // The resolved config writes exactly the table's keys (and the model section), the optional ones when set.
  const std::string d = test::tmp_dir("settings_keys");
  RunConfig c = load_run_config(base_cfg(d));
  c = with(with(c, *find_setting("run.init_positional"), "nope"), *find_setting("data.task"), "offset-key");
  std::set<std::string> written;
  for (const auto& [key, value] : config_leaves(c))
    if (key.rfind("model.", 0) != 0) written.insert(key);
  EXPECT_EQ(written, keys);
}

TEST(Settings, RangesOfTheTableAreChecked) {
  const std::string d = test::tmp_dir("settings_ranges");
  const std::string cfg = base_cfg(d);
  int checked = 0;
  for (const auto& s : run_settings()) {
    if (!s.range) continue;
    for (const auto& v : outside(s)) {
      std::vector<std::string> sets = {s.key + "=" + v};
      if (s.key == "scaling.factor") sets.push_back("scaling.type=pi");  // a factor is only checked with a type
      test::expect_error([&] { load_run_config(cfg, sets); }, {"cfg.yaml", s.key});
      ++checked;
    }
  }
  EXPECT_GT(checked, 30);
}

TEST(Settings, ResumeFollowsTheTable) {
  const std::string d = test::tmp_dir("settings_resume");
  const RunConfig was = load_run_config(base_cfg(d));
  const std::string ckpt = d + "/ckpt";
  fs::create_directories(ckpt);
  write_file_atomic(ckpt + "/run.yaml", run_config_to_yaml(was));
  TrainState st;
  st.step = 2;
  for (const auto& s : run_settings()) {
    const std::string v = other_value(s, was);
    const RunConfig now = with(was, s, v);
    ASSERT_NE(run_config_to_yaml(now), run_config_to_yaml(was)) << s.key << "=" << v;
    std::string error;
    try {
      check_resume_settings(now, ckpt, st, was.model);
    } catch (const Error& e) {
      error = e.what();
    }
    const std::string what = s.key + "=" + v + ": " + error;
    switch (s.resume) {
      case OnResume::kReports:
      case OnResume::kSameStep: EXPECT_EQ(error, "") << what; break;
      case OnResume::kSameLr:
        EXPECT_TRUE(s.key != "optim.lr" || !error.empty()) << what;
        EXPECT_TRUE(error.empty() || error.find("learning rate of step") != std::string::npos) << what;
        break;
      case OnResume::kDropAhead:
        EXPECT_TRUE(s.key != "drope.drop_at_step" || !error.empty()) << what;
        EXPECT_TRUE(error.empty() || error.find("dropped within") != std::string::npos) << what;
        break;
      case OnResume::kSameFile:
      case OnResume::kFixed: EXPECT_NE(error.find("resuming would change " + s.key), std::string::npos) << what; break;
    }
  }
  // A path rule accepts another spelling of the same file.
  const RunConfig same = with(was, *find_setting("data.text"), "/usr/share/common-licenses/./GPL-3");
  check_resume_settings(same, ckpt, st, was.model);
}

// The step check_resume_settings names as the first whose learning rate changes ("... of step N"), or -1.
int64_t reported_lr_change(const RunConfig& was, const RunConfig& now, const std::string& ckpt, const TrainState& st) {
  try {
    check_resume_settings(now, ckpt, st, was.model);
  } catch (const Error& e) {
    const std::string msg = e.what(), tag = "learning rate of step ";
    const auto at = msg.find(tag);
    EXPECT_NE(at, std::string::npos) << msg;
    return at == std::string::npos ? -2 : std::stoll(msg.substr(at + tag.size())) - 1;
  }
  return -1;
}

TEST(Settings, ResumeFindsTheFirstLearningRateChangeOfAnyStep) {
  const std::string d = test::tmp_dir("settings_lr_change");
  const std::string ckpt = d + "/ckpt";
  fs::create_directories(ckpt);
  const RunConfig base = load_run_config(base_cfg(d));
  auto set = [](RunConfig c, const std::vector<std::pair<std::string, std::string>>& kv) {
    for (const auto& [k, v] : kv) c = with(c, *find_setting(k), v);
    return c;
  };
  // Small runs: the same step as comparing every step taken.
  const std::vector<std::vector<std::pair<std::string, std::string>>> changes = {
      {{"optim.lr", "0.002"}},
      {{"schedule.warmup", "7"}},
      {{"schedule.steps", "90"}},
      {{"schedule.min_lr_ratio", "0.3"}},
      {{"schedule.type", "wsd"}},
      {{"schedule.type", "constant"}},
      {{"schedule.type", "wsd"}, {"schedule.decay_fraction", "0.5"}}};
  for (const auto& change : changes) {
    const RunConfig was = set(base, {{"schedule.type", "cosine"}, {"schedule.warmup", "5"}, {"schedule.steps", "60"}});
    const RunConfig now = set(was, change);
    write_file_atomic(ckpt + "/run.yaml", run_config_to_yaml(was));
    for (int64_t taken : {1, 6, 40, 200}) {
      TrainState st;
      st.step = taken;
      int64_t brute = -1;
      for (int64_t k = 0; k < taken && brute < 0; ++k)
        if (schedule_lr(was.schedule, k, was.optim.lr) != schedule_lr(now.schedule, k, now.optim.lr)) brute = k;
      EXPECT_EQ(reported_lr_change(was, now, ckpt, st), brute) << change[0].first << " after " << taken << " steps";
    }
  }
  // A checkpoint claiming 10^12 steps of a 2·10^12-step schedule: the change (at the warmup's end, where the
  // floors first round apart) is found at once, not after a scan
  // of every step (a hang), both early and past the scanned range.
  const RunConfig was =
      set(base, {{"schedule.type", "cosine"}, {"schedule.warmup", "10"}, {"schedule.steps", "2000000000000"}});
  write_file_atomic(ckpt + "/run.yaml", run_config_to_yaml(was));
  TrainState st;
  st.step = 1000000000000;
  EXPECT_EQ(reported_lr_change(was, set(was, {{"schedule.min_lr_ratio", "0.3"}}), ckpt, st), 10);
  const RunConfig late =
      set(base, {{"schedule.type", "cosine"}, {"schedule.warmup", "100000000"}, {"schedule.steps", "2000000000000"}});
  write_file_atomic(ckpt + "/run.yaml", run_config_to_yaml(late));
  EXPECT_EQ(reported_lr_change(late, set(late, {{"schedule.min_lr_ratio", "0.3"}}), ckpt, st), 100000000);
  // A change no step feels (a constant schedule has no floor): accepted, without visiting 10^12 steps.
  const RunConfig flat = set(base, {{"schedule.type", "constant"}, {"schedule.steps", "2000000000000"}});
  write_file_atomic(ckpt + "/run.yaml", run_config_to_yaml(flat));
  EXPECT_EQ(reported_lr_change(flat, set(flat, {{"schedule.min_lr_ratio", "0.3"}}), ckpt, st), -1);
}

TEST(Settings, HelpAndTextListEveryKey) {
  const std::string help = settings_help(), text = settings_text(), md = settings_markdown();
  for (const auto& sec : setting_sections()) EXPECT_NE(help.find("  " + sec + ":"), std::string::npos) << sec;
  for (const auto& s : run_settings()) {
    EXPECT_NE(help.find(" " + s.name()), std::string::npos) << s.key;
    EXPECT_NE(text.find(s.key + "  ("), std::string::npos) << s.key;
    EXPECT_NE(text.find(s.doc), std::string::npos) << s.key;
    EXPECT_NE(md.find("| `" + s.key + "` |"), std::string::npos) << s.key;
  }
}

TEST(Settings, DocSectionsAreReplacedBetweenTheirMarkers) {
  const std::string doc = "# T\n<!-- train-settings:begin -->\nstale-text\n<!-- train-settings:end -->\nmiddle\n"
                          "<!-- resume-settings:begin -->\n<!-- resume-settings:end -->\n"
                          "<!-- environment:begin -->\n<!-- environment:end -->\ntail\n";
  const std::string out = with_settings_sections(doc, "t.md");
  EXPECT_EQ(out.find("stale-text"), std::string::npos);
  EXPECT_NE(out.find("| `train.steps` |"), std::string::npos);
  EXPECT_NE(out.find("middle\n<!-- resume-settings:begin -->\n| may change | why |"), std::string::npos);
  EXPECT_NE(out.find("| `DROPE_CPU_ISA` |"), std::string::npos);
  EXPECT_EQ(out.substr(out.size() - 5), "tail\n");
  EXPECT_EQ(with_settings_sections(out, "t.md"), out);
  test::expect_error([&] { with_settings_sections("# no markers\n", "t.md"); }, {"t.md", "train-settings:begin"});
}

TEST(Settings, DocsTrainingMdHoldsTheGeneratedTables) {
  const std::string path = std::string(DROPE_SOURCE_DIR) + "/docs/training.md";
  const std::string doc = read_file(path);
  EXPECT_EQ(with_settings_sections(doc, path), doc)
      << "docs/training.md differs from the settings table: build/drope-train settings --doc docs/training.md";
}
