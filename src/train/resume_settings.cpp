#include "drope/train/resume_settings.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <utility>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "drope/core/error.h"
#include "drope/core/yaml.h"
#include "drope/train/lr_schedule.h"
#include "drope/train/settings.h"

namespace fs = std::filesystem;

namespace drope::train {

namespace {

// Every leaf of a YAML document as ("a.b.c", value), in document order; a sequence is one leaf.
void flatten(const YAML::Node& n, const std::string& prefix, std::vector<std::pair<std::string, std::string>>& out) {
  if (n.IsMap()) {
    for (const auto& kv : n)
      flatten(kv.second, prefix.empty() ? kv.first.Scalar() : prefix + "." + kv.first.Scalar(), out);
    return;
  }
  if (n.IsScalar()) {
    out.emplace_back(prefix, n.Scalar());
    return;
  }
  YAML::Emitter e;
  e << YAML::Flow << n;
  out.emplace_back(prefix, e.c_str());
}

std::string shown(const std::string* v) {
  if (v == nullptr) return "(absent)";
  if (v->empty()) return "\"\"";
  return *v;
}

bool same_file(const std::string& a, const std::string& b) {
  if (a == b) return true;
  if (a.empty() || b.empty()) return false;
  std::error_code ec;
  return fs::equivalent(a, b, ec) && !ec;
}

// Whether the run's positional embeddings were dropped within the first `steps` steps.
bool dropped_within(const RunConfig& c, int64_t steps) {
  return c.phase == TrainPhase::kDrope || (c.drop_at_step >= 0 && c.drop_at_step < steps);
}

// The phase steps where a schedule's formula changes: the start, the end of the warmup, the wsd decay's start and
// the end. From the last of them on, every schedule is flat (lr_schedule.cpp).
std::vector<int64_t> schedule_breakpoints(const ScheduleConfig& s) {
  std::vector<int64_t> out{0, s.warmup, s.steps};
  if (s.type == ScheduleType::kWsd)
    out.push_back(s.steps - std::max<int64_t>(1, int64_t(std::llround(s.decay_fraction * double(s.steps)))));
  return out;
}

// The first step in [phase_start, step) whose learning rate differs between the two configs, or -1. Both schedules
// are flat once past their last breakpoint, so no step after it can be the first to differ; the steps before it are
// compared one by one up to kScan (a fraction of a second), and past that (a checkpoint's step is the user's file)
// only around each breakpoint, where a formula starts: two different formulas part at once.
int64_t first_lr_change(const RunConfig& a, const RunConfig& b, const TrainState& st) {
  constexpr int64_t kScan = int64_t{1} << 24;
  const auto differs = [&](int64_t k) {
    return schedule_lr(a.schedule, k, a.optim.lr) != schedule_lr(b.schedule, k, b.optim.lr);
  };
  std::vector<int64_t> points = schedule_breakpoints(a.schedule);
  for (int64_t p : schedule_breakpoints(b.schedule)) points.push_back(p);
  const int64_t flat = *std::max_element(points.begin(), points.end());
  const int64_t end = std::min(st.step - st.phase_start, flat + 1);
  for (int64_t k = 0; k < std::min(end, kScan); ++k)
    if (differs(k)) return st.phase_start + k;
  std::vector<int64_t> near;
  for (int64_t p : points)
    for (int64_t d = -1; d <= 2; ++d) near.push_back(p + d);
  std::sort(near.begin(), near.end());
  for (int64_t k : near)
    if (k >= kScan && k < end && differs(k)) return st.phase_start + k;
  return -1;
}

// The shape fields of a checkpoint's model, for checkpoints that do not record their run settings.
void check_same_shape(const ModelConfig& want, const ModelConfig& got, const std::string& ckpt) {
  auto cmp = [&](const char* what, int64_t a, int64_t b) {
    if (a != b)
      fail("{}: checkpoint from another model shape: model.{} is {} there, {} in the run config", ckpt, what, b, a);
  };
  cmp("vocab_size", want.vocab_size, got.vocab_size);
  cmp("hidden_size", want.hidden_size, got.hidden_size);
  cmp("intermediate_size", want.intermediate_size, got.intermediate_size);
  cmp("num_layers", want.num_layers, got.num_layers);
  cmp("num_heads", want.num_heads, got.num_heads);
  cmp("num_kv_heads", want.num_kv_heads, got.num_kv_heads);
  cmp("head_dim", want.resolved_head_dim(), got.resolved_head_dim());
  cmp("tie_embeddings", want.tie_embeddings, got.tie_embeddings);
}

}  // namespace

std::vector<std::pair<std::string, std::string>> config_leaves(const RunConfig& c) {
  std::vector<std::pair<std::string, std::string>> out;
  flatten(YAML::Load(run_config_to_yaml(c)), "", out);
  return out;
}

void check_resume_settings(const RunConfig& now, const std::string& ckpt_dir, const TrainState& state,
                           const ModelConfig& ckpt_model) {
  const std::string path = (fs::path(ckpt_dir) / "run.yaml").string();
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(path, ec))) {
    if (now.has_model && now.init.empty()) check_same_shape(now.model, ckpt_model, ckpt_dir);
    return;
  }
  const RunConfig was = parse_run_config(load_yaml_file(path), path);
  const auto before = config_leaves(was), after = config_leaves(now);
  std::map<std::string, const std::string*> old_value, new_value;
  for (const auto& [k, v] : before) old_value[k] = &v;
  for (const auto& [k, v] : after) new_value[k] = &v;
  std::vector<std::string> keys;
  for (const auto& kv : after) keys.push_back(kv.first);
  for (const auto& kv : before)
    if (!new_value.count(kv.first)) keys.push_back(kv.first);

  const auto refuse = [&](const std::string& key, const std::string& why) {
    const std::string* o = old_value.count(key) ? old_value[key] : nullptr;
    const std::string* n = new_value.count(key) ? new_value[key] : nullptr;
    fail("{}: resuming would change {} from {} to {}, {}; set it back, or start a new run from {} (run.init)", path,
         key, shown(o), shown(n), why, ckpt_dir);
  };
  const std::string taken = fmt::format("but the checkpoint's {} steps were trained with the old value", state.step);
  bool lr_keys_changed = false;
  std::string first_lr_key;
  for (const auto& key : keys) {
    const std::string* o = old_value.count(key) ? old_value[key] : nullptr;
    const std::string* n = new_value.count(key) ? new_value[key] : nullptr;
    if (o && n && *o == *n) continue;
    switch (resume_rule(key)) {  // the settings table's column (settings.h)
      case OnResume::kReports:
      case OnResume::kSameStep: continue;
      case OnResume::kSameFile:
        if (o && n && same_file(*o, *n)) continue;
        break;
      case OnResume::kSameLr:
        if (!lr_keys_changed) first_lr_key = key;
        lr_keys_changed = true;
        continue;
      case OnResume::kDropAhead:
        if (dropped_within(was, state.step) || dropped_within(now, state.step))
          refuse(key, fmt::format("but the positional embeddings were dropped within the checkpoint's {} steps",
                                  state.step));
        continue;
      case OnResume::kFixed: break;
    }
    refuse(key, taken);
  }
  if (lr_keys_changed) {
    const int64_t s = first_lr_change(was, now, state);
    if (s >= 0)
      refuse(first_lr_key, fmt::format("which changes the learning rate of step {} already taken ({:g} -> {:g})", s + 1,
                                       schedule_lr(was.schedule, s - state.phase_start, was.optim.lr),
                                       schedule_lr(now.schedule, s - state.phase_start, now.optim.lr)));
  }
}

}  // namespace drope::train
