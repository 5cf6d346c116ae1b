#include "drope/train/checkpoint.h"

#include <algorithm>
#include <filesystem>

#include "drope/core/error.h"
#include "drope/core/files.h"
#include "drope/io/model_io.h"
#include "drope/io/safetensors.h"

namespace fs = std::filesystem;

namespace drope::train {

namespace {
// The directory name of the checkpoint of `step`.
std::string checkpoint_name(int64_t step) { return fmt::format("step-{:08d}", step); }

// The step a checkpoint directory name stands for: exactly the name checkpoint_name writes, else -1.
int64_t step_of_name(const std::string& name) {
  if (name.size() < 13 || name.size() > 23 || name.compare(0, 5, "step-") != 0) return -1;
  int64_t v = 0;
  for (size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    v = v * 10 + (name[i] - '0');
  }
  return checkpoint_name(v) == name ? v : -1;
}

// A non-negative decimal integer and nothing else ("4abc", "+4", " 4", "" and overflow are refused).
std::optional<int64_t> parse_count(const std::string& s) {
  if (s.empty() || s.size() > 18) return std::nullopt;
  int64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + (c - '0');
  }
  return v;
}

std::vector<std::pair<int64_t, std::string>> list_checkpoints(const std::string& run_dir) {
  std::vector<std::pair<int64_t, std::string>> out;
  const auto root = fs::path(run_dir) / "checkpoints";
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return out;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const int64_t step = step_of_name(e.path().filename().string());
    if (step >= 0 && e.is_directory() && fs::exists(e.path() / "state.json")) out.emplace_back(step, e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}
}  // namespace

std::string save_checkpoint(const std::string& run_dir, DecoderLM& model, const AdamW& opt, const TrainState& st,
                            const std::string& run_yaml, int64_t keep_last) {
  const auto dir = (fs::path(run_dir) / "checkpoints" / checkpoint_name(st.step)).string();
  check_replaceable_dir(dir, "state.json", "checkpoint directory", "");
  // Never replace good checkpoints with a poisoned one.
  for (const auto& kv : model->named_parameters())
    if (!torch::isfinite(kv.value()).all().item<bool>())
      fail("refusing to write checkpoint {}: the model has non-finite weights ({})", dir, kv.key());
  for (const auto& kv : opt.state_tensors())
    if (!torch::isfinite(kv.second).all().item<bool>())
      fail("refusing to write checkpoint {}: the optimizer state has non-finite values ({})", dir, kv.first);
  write_dir_atomic(dir, [&](const std::string& tmp) {
    io::write_model_files(model, tmp);
    io::save_safetensors((fs::path(tmp) / "optimizer.safetensors").string(), opt.state_tensors(),
                         {{"steps", std::to_string(opt.steps_taken())}});
    TrainState saved = st;
    saved.skipped = st.step - opt.steps_taken();
    write_file_atomic((fs::path(tmp) / "run.yaml").string(), run_yaml);
    // state.json last: its presence marks a complete checkpoint.
    write_file_atomic((fs::path(tmp) / "state.json").string(), checkpoint_state_json(saved));
  });
  // Prune: rename first (atomic), so that a kill during the deletion never leaves a half-deleted
  // directory that still looks like a checkpoint; leftovers are removed by remove_stale_temporaries.
  auto all = list_checkpoints(run_dir);
  for (size_t i = 0; i + keep_last < all.size(); ++i) {
    std::error_code ec;
    const std::string trash = temp_path_for(all[i].second);
    fs::rename(all[i].second, trash, ec);
    if (!ec) fs::remove_all(trash, ec);
  }
  return dir;
}

int remove_stale_run_temporaries(const std::string& run_dir) {
  return remove_stale_temporaries(run_dir) + remove_stale_temporaries((fs::path(run_dir) / "checkpoints").string());
}

std::optional<std::string> latest_checkpoint(const std::string& run_dir) {
  auto all = list_checkpoints(run_dir);
  if (all.empty()) return std::nullopt;
  return all.back().second;
}

LoadedCheckpoint load_checkpoint(const std::string& dir) {
  LoadedCheckpoint c;
  const auto state_path = (fs::path(dir) / "state.json").string();
  c.state = parse_checkpoint_state(read_file(state_path), state_path);
  const std::string name = fs::path(dir).lexically_normal().filename().string();
  const int64_t named_step = step_of_name(name.empty() ? fs::path(dir).parent_path().filename().string() : name);
  if (named_step != c.state.step)
    fail("{}: step {} disagrees with its checkpoint directory {} (expected {})", state_path, c.state.step, dir,
         checkpoint_name(c.state.step));
  c.model = io::load_model(dir);
  const auto opt_path = (fs::path(dir) / "optimizer.safetensors").string();
  io::SafetensorsFile f(opt_path);
  auto it = f.header().metadata.find("steps");
  if (it == f.header().metadata.end()) fail("{}: missing 'steps' metadata", opt_path);
  const auto steps = parse_count(it->second);
  if (!steps) fail("{}: 'steps' metadata '{}' is not a non-negative integer", opt_path, it->second);
  c.optimizer_steps = *steps;
  // Every step either updated the optimizer or was skipped (non-finite loss); older state.json files do
  // not count the skipped ones, so only an upper bound holds for them.
  if (c.state.skipped >= 0 ? c.optimizer_steps != c.state.step - c.state.skipped : c.optimizer_steps > c.state.step)
    fail("{}: the optimizer has taken {} steps, but {} says step {}{}", opt_path, c.optimizer_steps, state_path,
         c.state.step, c.state.skipped > 0 ? fmt::format(" with {} skipped", c.state.skipped) : std::string());
  for (const auto& kv : f.header().tensors) {
    const std::string& key = kv.first;
    const bool second = key.rfind("exp_avg_sq.", 0) == 0;
    if (!second && key.rfind("exp_avg.", 0) != 0)
      fail("{}: unexpected tensor '{}' (an optimizer state holds exp_avg.* and exp_avg_sq.*)", opt_path, key);
    torch::Tensor t = f.get(key);
    if (!t.is_floating_point()) fail("{}: optimizer tensor '{}' is not floating point", opt_path, key);
    if (!torch::isfinite(t).all().item<bool>())
      fail("{}: optimizer moment '{}' has non-finite values (NaN or infinity)", opt_path, key);
    if (second && (t < 0).any().item<bool>())
      fail("{}: optimizer second moment '{}' has negative values (a mean of squares cannot be negative)", opt_path, key);
    c.optimizer[key] = std::move(t);
  }
  return c;
}

}  // namespace drope::train
