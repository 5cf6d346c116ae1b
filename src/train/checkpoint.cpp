#include "drope/train/checkpoint.h"
#include "drope/core/environment.h"

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <set>

#include <fmt/ranges.h>

#include "drope/core/error.h"
#include "drope/core/files.h"
#include "drope/core/json.h"
#include "drope/core/numbers.h"
#include "drope/formats/checkpoint_digest.h"
#include "drope/io/model_io.h"
#include "drope/io/safetensors.h"
#include "drope/train/distributed.h"
#include "drope/train/sharding.h"

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

// The checkpoints of a run directory by step. A checkpoints/ that is there but cannot be read (a symlink to a
// volume that is not mounted, a symlink loop, no permission) is an error, not a run without checkpoints: --resume
// would start again from step 0 and replace the run's logs. So is a checkpoint entry that cannot be examined.
std::vector<std::pair<int64_t, std::string>> list_checkpoints(const std::string& run_dir) {
  std::vector<std::pair<int64_t, std::string>> out;
  const auto root = fs::path(run_dir) / "checkpoints";
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(root, ec))) return out;
  const auto unreadable = [&](const fs::path& p, const std::error_code& why) {
    fail("{}: not a readable directory ({}); its checkpoints cannot be listed", p.string(),
         why ? why.message() : std::string("not a directory"));
  };
  if (!fs::is_directory(fs::status(root, ec)) || ec) unreadable(root, ec);
  fs::directory_iterator it(root, ec);
  if (ec) unreadable(root, ec);
  for (; it != fs::directory_iterator(); it.increment(ec)) {  // an error ends the loop, reported below
    const int64_t step = step_of_name(it->path().filename().string());
    if (step < 0) continue;
    const bool dir = it->is_directory(ec);
    if (ec) fail("{}: cannot be examined ({})", it->path().string(), ec.message());
    if (dir && fs::exists(it->path() / "state.json", ec)) out.emplace_back(step, it->path().string());
    if (ec) fail("{}: cannot be examined ({})", (it->path() / "state.json").string(), ec.message());
  }
  if (ec) unreadable(root, ec);
  std::sort(out.begin(), out.end());
  return out;
}
// Keeps the newest `keep_last` checkpoints. Rename first (atomic), so that a kill during the deletion never
// leaves a half-deleted directory that still looks like a checkpoint; leftovers are removed by
// remove_stale_temporaries.
void prune_checkpoints(const std::string& run_dir, int64_t keep_last) {
  auto all = list_checkpoints(run_dir);
  for (size_t i = 0; i + keep_last < all.size(); ++i) {
    std::error_code ec;
    const std::string trash = temp_path_for(all[i].second);
    fs::rename(all[i].second, trash, ec);
    if (!ec) fs::remove_all(trash, ec);
  }
}
}  // namespace

namespace {
// state.json, last (its presence marks a complete checkpoint), with the digest of every file written before it.
void write_state(const std::string& tmp, TrainState st) {
  TORCH_INTERNAL_ASSERT(!st.run.id.empty(), "a checkpoint needs its run's identity (begin_run_identity)");
  st.digests = digest_directory(tmp);
  write_file_atomic((fs::path(tmp) / "state.json").string(), checkpoint_state_json(st));
}
}  // namespace

std::string save_checkpoint(const std::string& run_dir, DecoderLM& model, const AdamW& opt, const TrainState& st,
                            const std::string& run_yaml, int64_t keep_last) {
  const auto dir = (fs::path(run_dir) / "checkpoints" / checkpoint_name(st.step)).string();
  check_output_dir(dir, {"checkpoint", "checkpoint directory", {"state.json"}, {}, false, ""});
  // Never replace good checkpoints with a poisoned one.
  for (const auto& kv : model->named_parameters())
    if (!torch::isfinite(kv.value()).all().item<bool>())
      fail("refusing to write checkpoint {}: the model has non-finite weights ({})", dir, kv.key());
  for (const auto& kv : opt.state_tensors())
    if (!torch::isfinite(kv.second).all().item<bool>())
      fail("refusing to write checkpoint {}: the optimizer state has non-finite values ({})", dir, kv.first);
  write_dir_atomic(dir, [&](const std::string& tmp) {
    io::SaveOptions so;
    so.metadata = identity_metadata(st);
    io::write_model_files(model, tmp, so);
    auto meta = identity_metadata(st);
    meta["steps"] = std::to_string(opt.steps_taken());
    io::save_safetensors((fs::path(tmp) / "optimizer.safetensors").string(), opt.state_tensors(), meta);
    TrainState saved = st;
    saved.skipped = st.step - opt.steps_taken();
    write_file_atomic((fs::path(tmp) / "run.yaml").string(), run_yaml);
    write_state(tmp, saved);
  });
  prune_checkpoints(run_dir, keep_last);
  return dir;
}

DirLock claim_run_dir(const std::string& run_dir, const std::vector<std::pair<std::string, std::string>>& inputs,
                      bool force, const std::string& config_file) {
  // Runs of builds without the lock file are recognised by their checkpoints.
  const bool ours = latest_checkpoint(run_dir).has_value();
  // First, so that the hint below (--force) is never given for a start that --force would not save.
  std::error_code ec;
  const bool marked = fs::exists(fs::path(run_dir) / kDirLockName, ec);
  if (!config_file.empty() && !ours && !marked && fs::equivalent(config_file, fs::path(run_dir) / "config.yaml", ec))
    fail("{}: the run records its resolved config in this file, and run.out_dir {} is not a run of ours yet; keep "
         "the config you start from outside run.out_dir (--force or not: it would be written over)",
         config_file, run_dir);
  check_output_dir(
      run_dir,
      {"run.out_dir", "run directory", {kDirLockName}, inputs, force || ours, "pass --force to write into it anyway"});
  return DirLock(run_dir, DirLock::Where::kInside);
}

int remove_stale_run_temporaries(const std::string& run_dir) {
  return remove_stale_temporaries(run_dir) + remove_stale_temporaries((fs::path(run_dir) / "checkpoints").string());
}

std::optional<std::string> latest_checkpoint(const std::string& run_dir) {
  auto all = list_checkpoints(run_dir);
  if (all.empty()) return std::nullopt;
  return all.back().second;
}

namespace {
// Checks one optimizer moment tensor read from `path`.
void check_moment(const torch::Tensor& t, const std::string& key, const std::string& path) {
  if (!t.is_floating_point()) fail("{}: optimizer tensor '{}' is not floating point", path, key);
  if (!torch::isfinite(t).all().item<bool>())
    fail("{}: optimizer moment '{}' has non-finite values (NaN or infinity)", path, key);
  if (key.rfind("exp_avg_sq.", 0) == 0 && (t < 0).any().item<bool>())
    fail("{}: optimizer second moment '{}' has negative values (a mean of squares cannot be negative)", path, key);
}

// "exp_avg.<name>" / "exp_avg_sq.<name>" → (kind, name); false for anything else.
bool split_moment_key(const std::string& key, std::string* kind, std::string* rest) {
  for (const char* k : {"exp_avg_sq.", "exp_avg."}) {
    const std::string p(k);
    if (key.compare(0, p.size(), p) == 0 && key.size() > p.size()) {
      *kind = p.substr(0, p.size() - 1);
      *rest = key.substr(p.size());
      return true;
    }
  }
  return false;
}

std::string shard_file_name(int rank, int world) {
  return fmt::format("optimizer-{:05d}-of-{:05d}.safetensors", rank, world);
}
constexpr const char* kManifest = "optimizer-manifest.json";

// The pieces of a sharded optimizer state, indexed by (kind, parameter).
struct ShardedMoments {
  struct Piece {
    int64_t start, len;
    size_t file;
    std::string key;
  };
  std::vector<std::shared_ptr<io::SafetensorsFile>> files;
  std::map<std::pair<std::string, std::string>, std::vector<Piece>> pieces;

  torch::Tensor read(const std::string& kind, const std::string& name, int64_t start, int64_t len,
                     const std::string& where) const {
    auto it = pieces.find({kind, name});
    if (it == pieces.end()) fail("{}: no {} pieces for parameter '{}'", where, kind, name);
    auto out = torch::empty({len}, torch::kFloat);
    int64_t covered = 0;
    for (const auto& p : it->second) {
      const int64_t s = std::max(start, p.start), e = std::min(start + len, p.start + p.len);
      if (s >= e) continue;
      auto t = files[p.file]->get(p.key).reshape({-1});
      out.narrow(0, s - start, e - s).copy_(t.narrow(0, s - p.start, e - s));
      covered += e - s;
    }
    if (covered != len) fail("{}: the pieces of {} '{}' do not cover [{}, {})", where, kind, name, start, start + len);
    return out;
  }
};

// Rank 0's `path` on every rank (a broadcast of its characters, on `device` where the process group needs it).
std::string broadcast_path(Distributed& dist, const std::string& path, const torch::Device& device) {
  std::vector<int64_t> chars(4096, 0);
  if (dist.rank() == 0) {
    if (path.size() >= chars.size()) fail("{}: path too long", path);
    for (size_t i = 0; i < path.size(); ++i) chars[i] = static_cast<unsigned char>(path[i]);
  }
  auto t = torch::tensor(chars, torch::kLong);
  if (device.is_cuda()) t = t.to(device);
  dist.broadcast({t});
  t = t.cpu();
  std::string out;
  for (int64_t i = 0; i < t.numel() && t[i].item<int64_t>() != 0; ++i) out.push_back(char(t[i].item<int64_t>()));
  return out;
}

// optimizer-manifest.json: the format, the world size and step count, every parameter's size, the shard files.
nlohmann::json sharded_manifest(Distributed& dist, ShardedDataParallel& sdp) {
  nlohmann::json m{
      {"format", "drope.sharded-optimizer"}, {"version", 1}, {"world", dist.world()}, {"steps", sdp.steps_taken()}};
  nlohmann::json params = nlohmann::json::array();
  for (size_t i = 0; i < sdp.names().size(); ++i) {
    int64_t n = 1;
    for (auto d : sdp.shapes()[i]) n *= d;
    params.push_back({{"name", sdp.names()[i]}, {"numel", n}});
  }
  m["params"] = params;
  std::vector<std::string> files;
  for (int r = 0; r < dist.world(); ++r) files.push_back(shard_file_name(r, dist.world()));
  m["files"] = files;
  return m;
}
}  // namespace

std::string save_sharded_checkpoint(Distributed& dist, const std::string& run_dir, DecoderLM& model,
                                    ShardedDataParallel& sdp, const TrainState& st, const std::string& run_yaml,
                                    int64_t keep_last) {
  const auto dir = (fs::path(run_dir) / "checkpoints" / checkpoint_name(st.step)).string();
  const bool main = dist.rank() == 0;
  std::string error;
  auto agree = [&](const std::string& stage) {
    // Every rank learns which ranks did not get through `stage`; each of those reports its own error.
    const std::vector<int> failed = dist.ranks_where(!error.empty());
    if (!failed.empty() && error.empty())
      error = fmt::format("{} {} failed while {} (see {})", failed.size() == 1 ? "rank" : "ranks",
                          fmt::join(failed, ", "), stage, failed.size() == 1 ? "its log" : "their logs");
    return failed.empty();
  };
  // Rank 0 prepares a staging directory (a temporary of ours) and tells the others its name.
  std::string staging;
  if (main) {
    try {
      check_output_dir(dir, {"checkpoint", "checkpoint directory", {"state.json"}, {}, false, ""});
      staging = temp_path_for(fs::absolute(dir).string());
      fs::create_directories(staging);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  if (!agree("preparing the checkpoint directory")) fail("{}", error);
  staging = broadcast_path(dist, staging, model->parameters().front().device());
  auto cleanup = [&] {
    std::error_code ec;
    if (main) fs::remove_all(staging, ec);
  };
  // Weights (gathered on every rank: sharded blocks need everyone) written by rank 0; the pieces by each rank.
  sdp.with_full_parameters([&] {
    if (!main) return;
    try {
      for (const auto& kv : model->named_parameters())
        if (!torch::isfinite(kv.value()).all().item<bool>())
          fail("refusing to write checkpoint {}: the model has non-finite weights ({})", dir, kv.key());
      io::SaveOptions so;
      so.metadata = identity_metadata(st);
      io::write_model_files(model, staging, so);
    } catch (const std::exception& e) {
      error = e.what();
    }
  });
  if (error.empty()) {
    try {
      std::vector<std::pair<std::string, torch::Tensor>> pieces;
      for (auto& kv : sdp.optimizer_pieces()) {
        if (!torch::isfinite(kv.second).all().item<bool>())
          fail("refusing to write checkpoint {}: the optimizer state has non-finite values ({})", dir, kv.first);
        pieces.emplace_back(kv.first, kv.second.cpu());
      }
      auto meta = identity_metadata(st);
      meta["steps"] = std::to_string(sdp.steps_taken());
      meta["rank"] = std::to_string(dist.rank());
      meta["world"] = std::to_string(dist.world());
      io::save_safetensors((fs::path(staging) / shard_file_name(dist.rank(), dist.world())).string(), pieces, meta);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  // Test-only fault injection (read only with DROPE_TEST_FAULTS=1, docs/training.md):
  // DROPE_FAULT_KILL_RANK_IN_CHECKPOINT=<rank>:<step> kills that rank right after it wrote its shard of that step's
  // checkpoint.
  if (const char* f = env::get("DROPE_FAULT_KILL_RANK_IN_CHECKPOINT"))
    if (fmt::format("{}:{}", dist.rank(), st.step) == f) std::raise(SIGKILL);
  if (!agree(fmt::format("writing its shard of checkpoint {}", dir))) {
    cleanup();
    fail("{}", error);
  }
  if (main) {
    try {
      write_dir_atomic(dir, [&](const std::string& tmp) {
        for (const auto& e : fs::directory_iterator(staging)) fs::rename(e.path(), fs::path(tmp) / e.path().filename());
        write_file_atomic((fs::path(tmp) / kManifest).string(), sharded_manifest(dist, sdp).dump(1) + "\n");
        TrainState saved = st;
        saved.skipped = st.step - sdp.steps_taken();
        write_file_atomic((fs::path(tmp) / "run.yaml").string(), run_yaml);
        write_state(tmp, saved);
      });
      prune_checkpoints(run_dir, keep_last);
    } catch (const std::exception& e) {
      error = e.what();
    }
    cleanup();
  }
  if (!agree("publishing the checkpoint")) fail("{}", error);
  return dir;
}

namespace {
// The 'steps' metadata of an optimizer file: the optimizer steps its moments have taken.
int64_t steps_metadata(const io::SafetensorsFile& f, const std::string& path) {
  auto it = f.header().metadata.find("steps");
  if (it == f.header().metadata.end()) fail("{}: missing 'steps' metadata", path);
  const auto steps = parse_count(it->second);
  if (!steps) fail("{}: 'steps' metadata '{}' is not a non-negative integer", path, it->second);
  return *steps;
}

// The unsharded layout: optimizer.safetensors holds every parameter's moments whole, each of its parameter's
// shape (`shapes` by name).
void load_full_moments(const std::string& opt_path, const std::map<std::string, std::vector<int64_t>>& shapes,
                       LoadedCheckpoint& c) {
  io::SafetensorsFile f(opt_path);
  c.optimizer_steps = steps_metadata(f, opt_path);
  auto full = std::make_shared<std::map<std::string, torch::Tensor>>();
  for (const auto& kv : f.header().tensors) {
    std::string kind, pname;
    if (!split_moment_key(kv.first, &kind, &pname))
      fail("{}: unexpected tensor '{}' (an optimizer state holds exp_avg.* and exp_avg_sq.*)", opt_path, kv.first);
    const auto shape = shapes.find(pname);
    if (shape == shapes.end())
      fail("{}: optimizer tensor '{}' belongs to no parameter of the checkpoint's model", opt_path, kv.first);
    if (kv.second.shape != shape->second)
      fail("{}: optimizer tensor '{}' has shape {}, but parameter '{}' has shape {} (an optimizer state of another "
           "model)",
           opt_path, kv.first, c10::str(at::IntArrayRef(kv.second.shape)), pname,
           c10::str(at::IntArrayRef(shape->second)));
    torch::Tensor t = f.get(kv.first);
    check_moment(t, kv.first, opt_path);
    (*full)[kv.first] = std::move(t);
  }
  c.moment = [full, opt_path](const std::string& kind, const std::string& pname, int64_t start, int64_t len) {
    auto it = full->find(kind + "." + pname);
    if (it == full->end()) fail("{}: optimizer state has no tensor '{}.{}'", opt_path, kind, pname);
    const auto flat = it->second.reshape({-1});
    if (start + len > flat.numel())
      fail("{}: optimizer tensor '{}.{}' has {} elements, the model needs {}", opt_path, kind, pname, flat.numel(),
           start + len);
    return flat.narrow(0, start, len).to(torch::kFloat);
  };
}

// Reads and checks a sharded run's optimizer-manifest.json against the model's parameters (`numel` by name);
// sets the world size and the optimizer steps of `c`.
void read_manifest(const std::string& manifest_path, const std::map<std::string, int64_t>& numel, LoadedCheckpoint& c) {
  const auto m = parse_json(read_file(manifest_path, kMaxConfigBytes), manifest_path);
  auto need_int = [&](const char* key, int64_t lo, int64_t hi) {
    if (!m.is_object() || !m.contains(key) || !m[key].is_number_integer() || m[key].get<int64_t>() < lo ||
        m[key].get<int64_t>() > hi)
      fail("{}: '{}' must be an integer in [{}, {}]", manifest_path, key, lo, hi);
    return m[key].get<int64_t>();
  };
  if (!m.is_object() || !m.contains("format") || m["format"] != "drope.sharded-optimizer")
    fail("{}: not a drope sharded-optimizer manifest (format {})", manifest_path,
         m.is_object() && m.contains("format") ? m["format"].dump() : "missing");
  need_int("version", 1, 1);
  const int64_t world = need_int("world", 1, 1 << 20);
  c.optimizer_steps = need_int("steps", 0, int64_t(1) << 50);
  c.saved_world = world;
  if (!m.contains("params") || !m["params"].is_array()) fail("{}: 'params' must be a list", manifest_path);
  std::set<std::string> listed;
  for (const auto& p : m["params"]) {
    if (!p.is_object() || !p.contains("name") || !p["name"].is_string() || !p.contains("numel") ||
        !p["numel"].is_number_integer())
      fail("{}: each 'params' entry needs a name and a numel", manifest_path);
    auto it = numel.find(p["name"].get<std::string>());
    if (it == numel.end() || it->second != p["numel"].get<int64_t>())
      fail("{}: parameter '{}' ({} elements) does not match the checkpoint's model", manifest_path,
           p["name"].get<std::string>(), p["numel"].get<int64_t>());
    if (!listed.insert(p["name"].get<std::string>()).second)
      fail("{}: parameter '{}' is listed twice", manifest_path, p["name"].get<std::string>());
  }
  if (m["params"].size() != numel.size())
    fail("{}: lists {} parameters, the model has {}", manifest_path, m["params"].size(), numel.size());
}

// Opens shard file `r` of `world` and indexes its pieces in `sm`, each checked against the model's parameters.
void read_shard(const std::string& dir, const std::string& manifest_path, int r, int64_t world, int64_t steps,
                const std::map<std::string, int64_t>& numel, ShardedMoments& sm) {
  const auto path = (fs::path(dir) / shard_file_name(r, int(world))).string();
  if (!fs::exists(path))
    fail("{}: shard {} of {} is missing ({}): the checkpoint is incomplete", manifest_path, r, world, path);
  sm.files.push_back(std::make_shared<io::SafetensorsFile>(path));
  const auto& f = *sm.files.back();
  if (steps_metadata(f, path) != steps)
    fail("{}: 'steps' {} disagrees with {} ({})", path, steps_metadata(f, path), manifest_path, steps);
  for (const auto& kv : f.header().tensors) {
    std::string kind, rest;
    const auto at = kv.first.rfind('@');
    if (!split_moment_key(kv.first, &kind, &rest) || at == std::string::npos || at < kind.size() + 1)
      fail("{}: unexpected tensor '{}' (a shard holds exp_avg.<name>@<start> pieces)", path, kv.first);
    const std::string pname = kv.first.substr(kind.size() + 1, at - kind.size() - 1);
    const auto start = parse_count(kv.first.substr(at + 1));
    auto it = numel.find(pname);
    int64_t len = 1;
    for (auto d : kv.second.shape) len *= d;
    if (it == numel.end() || !start || *start + len > it->second)
      fail("{}: piece '{}' ({} elements) lies outside the model's parameters", path, kv.first, len);
    check_moment(f.get(kv.first), kv.first, path);
    sm.pieces[{kind, pname}].push_back({*start, len, size_t(r), kv.first});
  }
}

// The pieces of every moment must tile its parameter exactly.
void check_pieces_tile(const std::string& manifest_path, const std::map<std::string, int64_t>& numel,
                       ShardedMoments& sm) {
  for (const auto& [pname, n] : numel) {
    for (const char* kind : {"exp_avg", "exp_avg_sq"}) {
      auto& v = sm.pieces[{kind, pname}];
      std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.start < b.start; });
      int64_t at = 0;
      for (const auto& p : v) {
        if (p.start != at)
          fail("{}: the {} pieces of '{}' {} at element {}", manifest_path, kind, pname,
               p.start > at ? "leave a gap" : "overlap", at);
        at += p.len;
      }
      if (at != n) fail("{}: the {} pieces of '{}' cover {} of its {} elements", manifest_path, kind, pname, at, n);
    }
  }
}

// The sharded layout: optimizer-manifest.json and one file of pieces per rank of the saving run.
void load_sharded_moments(const std::string& dir, const std::string& manifest_path,
                          const std::map<std::string, int64_t>& numel, LoadedCheckpoint& c) {
  read_manifest(manifest_path, numel, c);
  auto sm = std::make_shared<ShardedMoments>();
  for (int r = 0; r < int(c.saved_world); ++r)
    read_shard(dir, manifest_path, r, c.saved_world, c.optimizer_steps, numel, *sm);
  check_pieces_tile(manifest_path, numel, *sm);
  c.moment = [sm, manifest_path](const std::string& kind, const std::string& pname, int64_t start, int64_t len) {
    return sm->read(kind, pname, start, len, manifest_path);
  };
}
}  // namespace

namespace {
// A checkpoint of another run among this run's checkpoints (every checkpoint of a run directory carries one run
// id; those of older builds carry none): a whole checkpoint directory copied in from elsewhere.
void check_sibling_runs(const std::string& dir, const TrainState& st, std::vector<std::string>& problems) {
  const fs::path parent = fs::path(dir).lexically_normal().parent_path();
  if (st.run.id.empty() || parent.filename() != "checkpoints") return;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(parent, ec)) {
    const auto state = e.path() / "state.json";
    if (step_of_name(e.path().filename().string()) < 0 || e.path().filename() == fs::path(dir).filename() ||
        !fs::exists(state))
      continue;
    TrainState other;
    try {
      other = parse_checkpoint_state(read_file(state.string(), 64 << 20), state.string());
    } catch (const Error&) {
      continue;  // not the one being loaded; a damaged older checkpoint is refused when it is loaded
    }
    if (!other.run.id.empty() && other.run.id != st.run.id)
      problems.push_back(fmt::format("{}: run {}, but {} in the same run directory is of run {} (a checkpoint of "
                                     "another run copied in?)",
                                     (fs::path(dir) / "state.json").string(), st.run.id, e.path().string(),
                                     other.run.id));
  }
}

bool any_file(const std::string&) { return true; }
}  // namespace

LoadedCheckpoint load_checkpoint(const std::string& dir, bool allow_foreign) {
  LoadedCheckpoint c;
  // Checked last: the files verified by path are those every piece was read from.
  const StableFiles stable(dir,
                           [](const std::string& name) { return name == "state.json" || is_checkpoint_file(name); });
  const auto state_path = (fs::path(dir) / "state.json").string();
  c.state = parse_checkpoint_state(read_file(state_path), state_path);
  const std::string name = fs::path(dir).lexically_normal().filename().string();
  const int64_t named_step = step_of_name(name.empty() ? fs::path(dir).parent_path().filename().string() : name);
  if (named_step != c.state.step)
    fail("{}: step {} disagrees with its checkpoint directory {} (expected {})", state_path, c.state.step, dir,
         checkpoint_name(c.state.step));
  io::ImportOptions model_opt;
  model_opt.verify_checkpoint = false;  // below, with the optimizer's files
  c.model = io::load_model(dir, model_opt);
  std::map<std::string, int64_t> numel;
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const auto& kv : c.model->named_parameters()) {
    numel[kv.key()] = kv.value().numel();
    shapes[kv.key()] = kv.value().sizes().vec();
  }
  const auto opt_path = (fs::path(dir) / "optimizer.safetensors").string();
  const auto manifest_path = (fs::path(dir) / kManifest).string();
  std::string opt_where;
  if (fs::exists(opt_path) || !fs::exists(manifest_path)) {
    opt_where = opt_path;
    load_full_moments(opt_path, shapes, c);
  } else {
    opt_where = manifest_path;
    load_sharded_moments(dir, manifest_path, numel, c);
  }
  // Every step either updated the optimizer or was skipped (non-finite loss); older state.json files do
  // not count the skipped ones, so only an upper bound holds for them.
  if (c.state.skipped >= 0 ? c.optimizer_steps != c.state.step - c.state.skipped : c.optimizer_steps > c.state.step)
    fail("{}: the optimizer has taken {} steps, but {} says step {}{}", opt_where, c.optimizer_steps, state_path,
         c.state.step, c.state.skipped > 0 ? fmt::format(" with {} skipped", c.state.skipped) : std::string());
  // Integrity last: what is wrong in the data's own terms (a shape, a NaN, a step count) is named so above.
  auto problems = check_checkpoint_integrity(dir, c.state, any_file);
  check_sibling_runs(dir, c.state, problems);
  enforce_checkpoint_integrity(dir, c.state, problems, allow_foreign);
  stable.check();
  return c;
}

void begin_run_identity(TrainState& st, const std::string& init, Distributed& dist, const torch::Device& device) {
  if (!st.run.id.empty()) return;  // resumed: the checkpoint's run goes on
  st.run = RunIdentity{};
  st.run.id = broadcast_path(dist, dist.rank() == 0 ? new_run_id() : std::string(), device);  // one id for all ranks
  const auto parent_state = (fs::path(init) / "state.json").string();
  if (init.empty() || !fs::exists(parent_state)) return;
  const TrainState parent = parse_checkpoint_state(read_file(parent_state, 64 << 20), parent_state);
  st.run.parent_id = parent.run.id;
  st.run.parent_step = parent.step;
  st.run.parent_path = init;
}

}  // namespace drope::train
