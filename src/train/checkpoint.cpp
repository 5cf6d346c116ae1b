#include "drope/train/checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <regex>

#include "drope/core/error.h"
#include "drope/core/files.h"
#include "drope/io/model_io.h"
#include "drope/io/safetensors.h"

namespace fs = std::filesystem;

namespace drope::train {

namespace {
const std::regex kCkptName(R"(step-(\d{8}))");
// Every temporary name we create contains this (drope::write_file_atomic / write_dir_atomic use ".tmp-").
constexpr const char* kTempMark = ".tmp-";

std::vector<std::pair<int64_t, std::string>> list_checkpoints(const std::string& run_dir) {
  std::vector<std::pair<int64_t, std::string>> out;
  const auto root = fs::path(run_dir) / "checkpoints";
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return out;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    std::smatch m;
    const std::string name = e.path().filename().string();
    if (e.is_directory() && std::regex_match(name, m, kCkptName) && fs::exists(e.path() / "state.json"))
      out.emplace_back(std::stoll(m[1]), e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}
}  // namespace

std::string save_checkpoint(const std::string& run_dir, DecoderLM& model, const AdamW& opt, const TrainState& st,
                            const std::string& run_yaml, int64_t keep_last) {
  const auto dir = (fs::path(run_dir) / "checkpoints" / fmt::format("step-{:08d}", st.step)).string();
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
    write_file_atomic((fs::path(tmp) / "run.yaml").string(), run_yaml);
    // state.json last: its presence marks a complete checkpoint.
    write_file_atomic((fs::path(tmp) / "state.json").string(), checkpoint_state_json(st));
  });
  // Prune: rename first (atomic), so that a kill during the deletion never leaves a half-deleted
  // directory that still looks like a checkpoint; leftovers are removed by remove_stale_temporaries.
  auto all = list_checkpoints(run_dir);
  for (size_t i = 0; i + keep_last < all.size(); ++i) {
    std::error_code ec;
    const std::string trash = all[i].second + kTempMark + "delete";
    fs::rename(all[i].second, trash, ec);
    if (!ec) fs::remove_all(trash, ec);
  }
  return dir;
}

int remove_stale_temporaries(const std::string& run_dir) {
  int removed = 0;
  for (const auto& dir : {fs::path(run_dir), fs::path(run_dir) / "checkpoints"}) {
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) continue;
    std::vector<fs::path> stale;
    for (const auto& e : fs::directory_iterator(dir, ec))
      if (e.path().filename().string().find(kTempMark) != std::string::npos) stale.push_back(e.path());
    for (const auto& p : stale) {
      fs::remove_all(p, ec);
      if (!ec) ++removed;
    }
  }
  return removed;
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
  c.model = io::load_model(dir);
  const auto opt_path = (fs::path(dir) / "optimizer.safetensors").string();
  io::SafetensorsFile f(opt_path);
  for (const auto& kv : f.header().tensors) c.optimizer[kv.first] = f.get(kv.first);
  auto it = f.header().metadata.find("steps");
  if (it == f.header().metadata.end()) fail("{}: missing 'steps' metadata", opt_path);
  try {
    c.optimizer_steps = std::stoll(it->second);
  } catch (const std::exception&) {
    fail("{}: 'steps' metadata is not an integer", opt_path);
  }
  return c;
}

}  // namespace drope::train
