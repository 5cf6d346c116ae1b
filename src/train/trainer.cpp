#include "drope/train/trainer.h"

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <thread>

#include <ATen/Parallel.h>
#include <ATen/autocast_mode.h>
#include <caffe2/core/common.h>
#include <nlohmann/json.hpp>
#ifdef DROPE_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include "drope/core/cpu_budget.h"
#include "drope/core/crc32c.h"
#include "drope/core/environment.h"
#include "drope/core/error.h"
#include "drope/core/files.h"
#include "drope/core/json.h"
#include "drope/core/log.h"
#include "drope/core/numbers.h"
#include "drope/formats/gguf.h"
#include "drope/io/model_io.h"
#include "drope/kernels/cpu_isa.h"
#include "drope/model/drope.h"
#include "drope/model/variant.h"
#include "drope/ops/compute_weights.h"
#include "drope/ops/loss.h"
#include "drope/train/checkpoint.h"
#include "drope/train/data.h"
#include "drope/train/distributed.h"
#include "drope/train/lr_schedule.h"
#include "drope/train/metrics.h"
#include "drope/train/recompute.h"
#include "drope/train/resume_settings.h"
#include "drope/train/sharding.h"
#include "drope/train/tensor_memory.h"

namespace fs = std::filesystem;

namespace drope::train {

namespace {

// The DroPE step of a run (phase drope, or drope.drop_at_step) as a model variant.
Variant drope_variant(const RunConfig& cfg) {
  Variant v;
  v.drop = true;
  v.drop_options = {cfg.drope_qk_norm, cfg.drope_per_head};
  return v;
}

// Test-only fault injection, read only with DROPE_TEST_FAULTS=1 (docs/training.md, environment variables):
// DROPE_FAULT_NAN_AT_STEP=4,5 makes the loss of those steps (1-based) NaN; DROPE_FAULT_NAN_WEIGHTS_AT_STEP=n poisons
// one weight after step n.
std::vector<int64_t> fault_steps(const char* var) {
  std::vector<int64_t> out;
  const char* v = env::get(var);
  if (!v) return out;
  std::stringstream ss(v);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const auto step = parse_count(item);  // the tool checked the list when it started (check_environment)
    if (!step) fail("environment variable {}='{}': expected comma-separated step numbers", var, v);
    out.push_back(*step);
  }
  return out;
}
bool contains(const std::vector<int64_t>& v, int64_t x) { return std::find(v.begin(), v.end(), x) != v.end(); }

class NanFaultInjection final : public StepHook {
 public:
  NanFaultInjection()
      : nan_loss_steps_(fault_steps("DROPE_FAULT_NAN_AT_STEP")),
        nan_weight_steps_(fault_steps("DROPE_FAULT_NAN_WEIGHTS_AT_STEP")) {}
  torch::Tensor on_loss(int64_t step, const torch::Tensor& loss) override {
    if (contains(nan_loss_steps_, step)) return loss * std::numeric_limits<double>::quiet_NaN();
    return loss;
  }
  void after_update(Trainer& trainer, int64_t step) override {
    if (!contains(nan_weight_steps_, step)) return;
    torch::NoGradGuard ng;
    trainer.model()->parameters().front().view({-1})[0].fill_(std::numeric_limits<double>::quiet_NaN());
  }

 private:
  std::vector<int64_t> nan_loss_steps_, nan_weight_steps_;
};

// drope.drop_at_step (paper Table 7): drop positional embeddings mid-run; moments of kept parameters carry over.
class DropAtStep final : public StepHook {
 public:
  void before_step(Trainer& trainer, int64_t step) override {
    const RunConfig& cfg = trainer.config();
    const int64_t s = step - 1;  // steps done
    if (s != cfg.drop_at_step || trainer.model()->config().positional.type == PositionalType::kNope) return;
    trainer.replace_model(apply_variant(trainer.model(), drope_variant(cfg), cfg.init));
    if (trainer.console())
      logging::info("step {}: dropped positional embeddings (qk_norm {})", s, name_of(cfg.drope_qk_norm));
  }
};

// Non-embedding parameters, for the 6N + 12·L·C·T FLOPs-per-token estimate.
double flops_per_token(DecoderLM& m, int64_t T) {
  const auto& c = m->config();
  const double n = double(m->num_parameters() - c.vocab_size * c.hidden_size);
  return 6.0 * n + 12.0 * double(c.num_layers) * double(c.hidden_size) * double(T);
}

// bf16 autocast for the forward pass (weights and optimizer stay float32), on the model's device.
class AutocastGuard {
 public:
  AutocastGuard(bool on, c10::DeviceType dev) : on_(on), dev_(dev) {
    if (!on_) return;
    prev_enabled_ = at::autocast::is_autocast_enabled(dev_);
    prev_dtype_ = at::autocast::get_autocast_dtype(dev_);
    at::autocast::set_autocast_enabled(dev_, true);
    at::autocast::set_autocast_dtype(dev_, at::kBFloat16);
  }
  ~AutocastGuard() {
    if (!on_) return;
    at::autocast::set_autocast_enabled(dev_, prev_enabled_);
    at::autocast::set_autocast_dtype(dev_, prev_dtype_);
    at::autocast::clear_cache();
  }

 private:
  bool on_;
  c10::DeviceType dev_;
  bool prev_enabled_ = false;
  at::ScalarType prev_dtype_ = at::kBFloat16;
};

// A short fingerprint of `bytes` (crc32c, hex) and their size.
std::string fingerprint(const std::string& bytes) {
  return fmt::format("{:08x} ({} bytes)", crc32c(bytes), bytes.size());
}

// data.dataset's index.json: the directory's, or the file named (as the data loader reads it).
fs::path dataset_index(const std::string& dataset) {
  std::error_code ec;
  return fs::is_directory(dataset, ec) ? fs::path(dataset) / "index.json" : fs::path(dataset);
}

// Folds file `p` (of `size` bytes) into `crc`, sampled: its size, its first `head` bytes, its last 16 KiB and 4 KiB
// at 8 offsets between. False when it cannot be opened.
bool sampled_file(const fs::path& p, int64_t size, int64_t head, uint32_t& crc) {
  constexpr int64_t kEdge = 16 << 10, kWindow = 4 << 10, kInner = 8;
  std::ifstream f(p, std::ios::binary);
  if (!f) return false;
  crc = crc32c(std::to_string(size), crc);
  std::vector<std::pair<int64_t, int64_t>> spans{{0, head}, {std::max<int64_t>(0, size - kEdge), kEdge}};
  for (int64_t i = 1; i <= kInner; ++i) spans.emplace_back(size * i / (kInner + 1), kWindow);
  std::string buf;
  for (const auto& [at, want] : spans) {
    buf.resize(size_t(std::max<int64_t>(0, std::min(want, size - at))));
    f.seekg(at);
    f.read(buf.data(), std::streamsize(buf.size()));
    crc = crc32c(std::string_view(buf.data(), size_t(f.gcount())), crc);
    f.clear();
  }
  return true;
}

// The identity of a token dataset's shards, sampled: each one's size, its first and last 16 KiB and 4 KiB at 8
// offsets between (every rank reading all of a large dataset at start would take minutes; a stale, re-tokenized or
// half-copied shard differs in its size or throughout). "(unreadable)" leaves the error to the data loader.
std::string sampled_shards(const fs::path& index_path) {
  constexpr int64_t kEdge = 16 << 10;
  const fs::path dataset = index_path.parent_path();
  try {
    const auto index = nlohmann::json::parse(read_file(index_path.string()));
    uint32_t crc = 0;
    int64_t files = 0, bytes = 0;
    for (const char* split : {"train", "val"})
      for (const auto& shard : index.at("splits").at(split).at("shards")) {
        const fs::path p = dataset / shard.at("file").get<std::string>();
        std::error_code ec;
        const auto size = int64_t(fs::file_size(p, ec));
        if (ec || !sampled_file(p, size, kEdge, crc)) {
          crc = crc32c("(missing) " + p.string(), crc);
          continue;
        }
        ++files;
        bytes += size;
      }
    return fmt::format("{:08x} ({} shards, {} bytes)", crc, files, bytes);
  } catch (const std::exception&) {
    return "(unreadable)";
  }
}

// The LibTorch this process loaded, from the build options its library reports (a node's shared libraries may be
// another build than the headers drope-train was compiled with). Test hook: DROPE_FAULT_LIBTORCH stands in for it.
std::string loaded_libtorch() {
  if (const char* f = env::get("DROPE_FAULT_LIBTORCH")) return f;
  const auto& o = caffe2::GetBuildOptions();
  const auto get = [&](const char* key) {
    auto it = o.find(key);
    return it == o.end() ? std::string("?") : it->second;
  };
  return fmt::format("{} (commit {}, CUDA {})", get("TORCH_VERSION"), get("COMMIT_SHA"), get("CUDA_VERSION"));
}

// The bytes a data.text corpus trains on (a file, or a directory's files in the order the loader reads them),
// fingerprinted through a fixed buffer. "(unreadable)" leaves the error to the data loader.
std::string corpus(const std::string& path) {
  try {
    uint32_t crc = 0;
    uint64_t bytes = 0;
    std::string buf(1 << 20, '\0');
    for (const auto& f : corpus_files(path)) {
      std::ifstream in(f, std::ios::binary);
      if (!in) return "(unreadable)";
      while (in.read(buf.data(), std::streamsize(buf.size())) || in.gcount() > 0) {
        crc = crc32c(std::string_view(buf.data(), size_t(in.gcount())), crc);
        bytes += uint64_t(in.gcount());
      }
    }
    return fmt::format("{:08x} ({} bytes)", crc, bytes);
  } catch (const std::exception&) {
    return "(unreadable)";
  }
}

// A GGUF file's metadata and tensor table whole (the config a model is built from), its data sampled.
std::string gguf_header(const std::string& path) {
  try {
    const gguf::File f(path);
    uint32_t crc = 0;
    const auto size = int64_t(fs::file_size(path));
    if (!sampled_file(path, size, int64_t(f.header().data_start), crc)) return "(unreadable)";
    return fmt::format("{:08x} ({} bytes)", crc, size);
  } catch (const std::exception&) {
    return "(unreadable)";
  }
}

// A regular file's content fingerprinted, or "(missing)".
std::string file_fingerprint(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec) ? fingerprint(read_file(p.string())) : std::string("(missing)");
}

// What the run trains on, fingerprinted as the ranks compare it: the dataset's index.json and sampled shards, or the
// text corpus's content. Read once at start.
Consensus data_parts(const RunConfig& cfg) {
  if (!cfg.data.dataset.empty()) {
    const fs::path index = dataset_index(cfg.data.dataset);
    return {{"data.dataset index.json", file_fingerprint(index)}, {"data.dataset shards", sampled_shards(index)}};
  }
  if (!cfg.data.text.empty()) return {{"data.text content", corpus(cfg.data.text)}};
  return {};
}

// What every checkpoint records of the data (the key, its path and `parts`' fingerprints), or null without data, so
// that a resume notices a corpus replaced under its path.
nlohmann::json data_record(const RunConfig& cfg, const Consensus& parts) {
  if (!cfg.data.dataset.empty())
    return {{"key", "data.dataset"},
            {"path", cfg.data.dataset},
            {"identity", parts.at(0).second + ", shards " + parts.at(1).second}};
  if (!cfg.data.text.empty()) return {{"key", "data.text"}, {"path", cfg.data.text}, {"identity", parts.at(0).second}};
  return nullptr;
}

// Refuses to resume on other content under the path the checkpoint's run trained on: a corpus replaced underneath
// the run (a new path is for the resume rules to judge).
void check_same_data(const nlohmann::json& recorded, const nlohmann::json& now, const std::string& ckpt) {
  if (!recorded.is_object() || !now.is_object() || recorded.value("key", "") != now.value("key", "")) return;
  const std::string was = recorded.value("path", ""), is = now["path"].get<std::string>();
  std::error_code ec;
  if (was != is && !(fs::equivalent(was, is, ec) && !ec)) return;
  const std::string then = recorded.value("identity", ""), current = now["identity"].get<std::string>();
  // Unreadable or missing on one side: nothing to compare (the loader names a missing file).
  if (then == current || then.find("(unreadable)") != std::string::npos ||
      then.find("(missing)") != std::string::npos || current.find("(unreadable)") != std::string::npos ||
      current.find("(missing)") != std::string::npos)
    return;
  fail("{} {}: holds other content than the run of {} trained on ({} then, {} now); resuming would go on with other "
       "data: restore it, or start a new run from {} (run.init)",
       now["key"].get<std::string>(), is, ckpt, then, current, ckpt);
}

// What every rank must agree on before the first step: the resolved run config (nothing in it is per rank),
// the world size, the start (fresh or --resume), the checkpoint in run.out_dir, the data's identity, the initial
// model's config, the switches that decide which collectives a rank starts, the device and compute dtype, the
// LibTorch loaded and the binary.
Consensus consensus_of(const RunConfig& cfg, const TrainOptions& opt, int world, const torch::Device& device,
                       const Consensus& data) {
  Consensus c = config_leaves(cfg);
  c.emplace_back("world size", std::to_string(world));
  c.emplace_back("--resume", opt.resume ? "given" : "not given");
  const auto file = file_fingerprint;
  c.insert(c.end(), data.begin(), data.end());
  if (!cfg.init.empty()) {
    std::error_code ec;
    if (fs::is_regular_file(cfg.init, ec))  // a GGUF file: its metadata holds the model's config
      c.emplace_back("run.init GGUF header", gguf_header(cfg.init));
    else
      for (const char* f : {"config.json", "drope.yaml", "model.safetensors.index.json", "state.json"})
        c.emplace_back(fmt::format("run.init {}", f), file(fs::path(cfg.init) / f));
  }
  // Only the ranks given --allow-foreign-checkpoint would accept such a checkpoint; the others refuse it mid-start.
  c.emplace_back("--allow-foreign-checkpoint", cfg.init_import.allow_foreign_checkpoint ? "given" : "not given");
  // Each rank resumes from the newest checkpoint it sees, and a fresh start refuses a run directory that holds one:
  // ranks that see different ones (run.out_dir on node-local disks, a stale copy) would train different weights
  // from different steps through the same collectives, or one rank alone would refuse to start.
  const auto newest = latest_checkpoint(cfg.out_dir);
  c.emplace_back("the newest checkpoint in run.out_dir",
                 newest ? fmt::format("{} (state.json {})", fs::path(*newest).filename().string(),
                                      file(fs::path(*newest) / "state.json"))
                        : std::string("(none)"));
  // The sharded engine's prefetch starts all-gathers that a rank without it does not: the collectives would pair
  // up wrongly.
  c.emplace_back("DROPE_SHARD_PREFETCH", shard_prefetch_enabled() ? "1" : "0");
  // A rank on the CPU and one on a GPU, or one computing in bf16 beside one in float32 (a CPU without native bf16,
  // DROPE_BF16_EMULATED on one node), would average gradients of different computations.
  c.emplace_back("the device", device.is_cuda() ? "cuda" : "cpu");
  c.emplace_back("the compute dtype",
                 cfg.train.dtype == TrainDType::kBFloat16 && ops::bf16_pays(device.type()) ? "bfloat16" : "float32");
  c.emplace_back("LibTorch", loaded_libtorch());
  c.emplace_back("drope-train binary", file("/proc/self/exe"));
  return c;
}

// run.out_dir must be one directory that every rank sees: every rank resumes from its checkpoints, and with a
// sharded optimizer writes its pieces into rank 0's staging directory there. Each rank looks for the lock rank 0
// took (its pid in run.out_dir/.drope-lock), with a few seconds' grace for a filesystem slow to show a new file.
void check_run_dir_shared(Distributed& dist, const std::string& out_dir, const torch::Device& device) {
  if (!dist.grouped() || dist.world() == 1) return;
  const fs::path lock = fs::path(out_dir) / kDirLockName;
  auto t = torch::full({1}, dist.is_main() ? int64_t(::getpid()) : int64_t(0), torch::kLong);  // (1)
  if (device.is_cuda()) t = t.to(device);
  dist.broadcast({t});
  const int64_t holder = t.cpu().item<int64_t>();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  bool seen = dist.is_main();
  while (!seen) {
    std::ifstream f(lock);
    int64_t pid = 0;
    seen = (f >> pid) && pid == holder;
    if (seen || std::chrono::steady_clock::now() > deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const int64_t blind = std::llround(dist.sum(seen ? 0.0 : 1.0));
  if (blind == 0) return;
  const std::string need = "run.out_dir must be one directory that every rank sees (a shared filesystem)";
  if (!seen)
    fail("rank {} of {}: run.out_dir {} is not the directory rank 0 holds ({} does not name rank 0's process {}); {}",
         dist.rank(), dist.world(), out_dir, lock.string(), holder, need);
  fail("rank {} of {}: {} other rank(s) do not see run.out_dir {} as rank 0 does; {}", dist.rank(), dist.world(), blind,
       out_dir, need);
}

}  // namespace

void install_stop_handlers() {
  // SIGTERM / SIGINT are blocked in this thread and every thread it starts later (LibTorch's OpenMP team,
  // oneDNN's), and a dedicated thread takes them with sigwait. A handler would run on whichever compute
  // thread the kernel picks, on that thread's current stack; with oneDNN's GEMMs, valgrind sees threads
  // switch to stacks in heap memory, and handled SIGTERMs aborted with heap corruption (sigwait never did:
  // docs/benchmarks.md#defaults-chosen-by-measurement). Call this before any other thread exists.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  if (const int e = pthread_sigmask(SIG_BLOCK, &set, nullptr); e != 0)
    fail("cannot block SIGTERM/SIGINT: {}", std::strerror(e));
  std::thread([set] {
    int sig = 0;
    while (sigwait(&set, &sig) == 0) stop_signal() = true;
  }).detach();
  // A file-size limit (RLIMIT_FSIZE) must make write() fail with EFBIG, a clean error, not kill us.
  ignore_file_size_signal();
}

// train.cuda_graphs: the step's forward and backward captured once on a side stream after kWarmup eager steps
// there, then replayed each step on a static batch. The captured backward writes the gradients into tensors of
// the graph's memory pool that stay the parameters' gradients; the optimizer step (with clipping and the
// non-finite skip, which read the loss and gradient norm on the host) runs eagerly after each replay.
struct Trainer::GraphStep {
#ifdef DROPE_WITH_CUDA
  static constexpr int64_t kWarmup = 3;
  int64_t eager_steps = 0;
  std::optional<c10::cuda::CUDAStream> side;
  std::unique_ptr<at::cuda::CUDAGraph> graph;
  torch::Tensor batch, loss;  // static input (micro, T + 1) and output
#endif
};

Trainer::Trainer(RunConfig cfg, TrainOptions opt) : cfg_(std::move(cfg)), opt_(std::move(opt)) {}

Trainer::~Trainer() = default;

void Trainer::add_hook(std::unique_ptr<StepHook> hook) { hooks_.push_back(std::move(hook)); }

TrainOutcome Trainer::run() {
  if (!build()) return out_;
  add_default_hooks();
  if (probe_ && cfg_.eval.at_start && !resumed_.checkpoint) probe_long_context();  // the model it starts from
  metrics_.start(state_.step);
  model_->train();
  while (state_.step < cfg_.train.steps) {
    const StepResult r = train_step();
    log(r);
    const bool last = state_.step == cfg_.train.steps;
    if (cfg_.train.eval_every > 0 && state_.step % cfg_.train.eval_every == 0 && !last) {
      metrics_.validation(state_.step, validate());
      probe_long_context();
    }
    const bool stop = stop_requested();
    if (stop || (cfg_.train.checkpoint_every > 0 && state_.step % cfg_.train.checkpoint_every == 0 && !last))
      checkpoint();
    if (stop) {
      if (say_) logging::info("stop requested: saved {} at step {}", out_.last_checkpoint, state_.step);
      out_.stopped = true;
      return out_;
    }
  }
  finish();
  return out_;
}

// ---- build ----------------------------------------------------------------------------------------------

bool Trainer::build() {
  build_device();
  build_data();
  resumed_ = resume();
  if (dist_->world() == 1) data_parts_ = data_parts(cfg_);
  const nlohmann::json data = data_record(cfg_, data_parts_);
  if (resumed_.checkpoint && !resumed_.complete && state_.extra.is_object() && state_.extra.contains("data"))
    check_same_data(state_.extra["data"], data, *resumed_.checkpoint);
  if (!data.is_null()) {
    if (!state_.extra.is_object()) state_.extra = nlohmann::json::object();
    state_.extra["data"] = data;
  }
  begin_run_identity(state_, cfg_.init, *dist_, device_);  // a new run (or an older build's checkpoint)
  if (resumed_.checkpoint) out_.resumed_from = resumed_.step;
  if (resumed_.complete) {
    out_.last_checkpoint = *resumed_.checkpoint;
    out_.val_loss = resumed_.val_loss;
    return false;
  }
  build_model();
  build_optimizer();
  open_run_dir();
  return true;
}

void Trainer::build_device() {
  const DistEnv env = read_dist_env();
  if (cfg_.train.device == TrainDevice::kCuda ||
      (cfg_.train.device == TrainDevice::kAuto && torch::cuda::is_available())) {
    if (!torch::cuda::is_available()) fail("{}: train.device is cuda but no CUDA device is available", cfg_.source);
    device_ = torch::Device(torch::kCUDA, env.local_rank % std::max<int64_t>(1, torch::cuda::device_count()));
  }
  if (cfg_.train.cuda_graphs && !device_.is_cuda())
    fail("{}: train.cuda_graphs: true needs a CUDA device; this run trains on the CPU", cfg_.source);
  if (env.world > 1) data_parts_ = data_parts(cfg_);  // one rank: after build_data's size checks (build)
  dist_ = std::make_unique<Distributed>(
      env, device_, cfg_.train.dist_timeout_s,
      env.world > 1 ? consensus_of(cfg_, opt_, env.world, device_, data_parts_) : Consensus{});
  if (cfg_.train.cuda_graphs) {
#ifdef DROPE_WITH_CUDA
    if (dist_->world() > 1)
      fail("{}: train.cuda_graphs: true captures a single process's step; this run has {} ranks (the gradient "
           "all-reduce is not captured)",
           cfg_.source, dist_->world());
    graph_ = std::make_unique<GraphStep>();
#else
    fail("{}: train.cuda_graphs: true needs a build with CUDA support; this drope-train has none", cfg_.source);
#endif
  }
  main_rank_ = dist_->is_main();
  say_ = !opt_.quiet;  // the logger decides which ranks speak
  world_ = dist_->world();
  // Rank 0 holds the run directory for the whole run: a second drope-train on it is refused.
  if (main_rank_)
    run_lock_ = claim_run_dir(
        cfg_.out_dir, {{"run.init", cfg_.init}, {"data.dataset", cfg_.data.dataset}, {"data.text", cfg_.data.text}},
        opt_.force, cfg_.source);
  check_run_dir_shared(*dist_, cfg_.out_dir, device_);
}

void Trainer::build_data() {
  // Batch geometry: batch = accum · micro · world.
  const int64_t B = cfg_.data.batch_size, T = cfg_.data.seq_len, W = world_;
  const int64_t micro = micro_batch_size(cfg_, W);
  batch_ = B;
  seq_len_ = T;
  micro_ = micro;
  accum_ = B / (micro * W);

  SplitSources s;
  if (!cfg_.data.text.empty()) s = byte_text_sources(cfg_.data.text, T);
  else if (!cfg_.data.task.empty()) s = task_sources(cfg_.data.task, cfg_.seed, T);
  else s = dataset_sources(cfg_.data.dataset, T);
  train_src_ = std::move(s.train);
  val_src_ = std::move(s.val);
  sampler_ = std::make_unique<BlockSampler>(*train_src_, cfg_.seed, cfg_.data.shuffle);
  val_sampler_ = std::make_unique<BlockSampler>(*val_src_, 0, false);
  if (cfg_.eval.enabled()) {
    const EvalConfig& e = cfg_.eval;
    eval::ProbeOptions p;
    p.lengths = e.lengths;
    p.max_tokens = e.max_tokens;
    p.stride = e.stride;
    p.niah_lengths = e.niah_lengths;
    p.niah_task = e.niah_task;
    p.niah_trials = e.niah_trials;
    p.niah_seed = e.niah_seed;
    p.niah_max_new_tokens = e.niah_max_new_tokens;
    if (!e.niah_haystack.empty()) p.haystack = e.niah_haystack;
    probe_ = std::make_unique<eval::LengthProbe>(std::move(p), cfg_.data.dataset);
  }
}

// With --resume, loads the newest checkpoint's model, training state and optimizer moments.
Trainer::ResumePoint Trainer::resume() {
  if (main_rank_) {
    const int removed = remove_stale_run_temporaries(cfg_.out_dir);
    if (removed > 0 && say_) logging::info("removed {} incomplete temporary file(s) of an interrupted run", removed);
  }
  ResumePoint p;
  p.newest = latest_checkpoint(cfg_.out_dir);
  if (!opt_.resume || !p.newest) return p;
  p.checkpoint = p.newest;
  auto c = load_checkpoint(*p.checkpoint, cfg_.init_import.allow_foreign_checkpoint);
  check_resume_settings(cfg_, *p.checkpoint, c.state, c.model->config());  // before config.yaml records this start
  model_ = c.model;
  state_ = c.state;
  moment_ = c.moment;
  opt_steps_ = c.optimizer_steps;
  p.step = state_.step;
  p.tokens = state_.tokens;
  if (say_) logging::info("resuming from {} (step {})", *p.checkpoint, state_.step);
  if (state_.step >= cfg_.train.steps && state_.extra.is_object() && state_.extra.value("complete", false)) {
    // The run finished (its final checkpoint follows the final validation): nothing to redo or re-log.
    if (say_) logging::info("run already complete at step {} (train.steps {})", state_.step, cfg_.train.steps);
    p.complete = true;
    p.val_loss = state_.extra.value("val_loss", 0.0);
  }
  return p;
}

void Trainer::build_model() {
  if (resumed_.checkpoint) {
    // resumed: the checkpoint's model
  } else if (cfg_.phase == TrainPhase::kPretrain && cfg_.init.empty()) {
    model_ = DecoderLM(cfg_.model);
    model_->reset_parameters(cfg_.seed);
  } else {
    model_ = io::load_model(cfg_.init, cfg_.init_import);
    if (cfg_.phase == TrainPhase::kDrope) model_ = apply_variant(model_, drope_variant(cfg_), cfg_.init);
    if (cfg_.phase == TrainPhase::kFinetune) model_ = with_rope_scaling(model_, cfg_.scaling);
  }
  if (graph_ && accum_ != 1)
    fail("{}: train.cuda_graphs: true captures one forward and backward per step; this run accumulates {} "
         "micro-batches (set data.micro_batch: 0)",
         cfg_.source, accum_);
  if (model_->config().vocab_size < train_src_->vocab_size())
    fail("{}: the data has vocabulary {} but the model only {}", cfg_.source, train_src_->vocab_size(),
         model_->config().vocab_size);
  if (resumed_.newest && !resumed_.checkpoint)  // a fresh start would mix its checkpoints with the old run's
    fail("{}: the run directory already holds checkpoints (newest {}); pass --resume to continue it, or choose "
         "another run.out_dir",
         cfg_.out_dir, *resumed_.newest);
  check_activation_checkpointing(cfg_.train.activation_checkpointing, model_->config().num_layers, cfg_.source);
  model_->to(device_);
  if (!resumed_.checkpoint) {
    std::vector<torch::Tensor> ps;
    for (auto& p : model_->parameters()) ps.push_back(p);
    torch::NoGradGuard ng;
    dist_->broadcast(ps);
  }
}

void Trainer::build_optimizer() {
  metrics_.set_flops_per_token(flops_per_token(model_, seq_len_));  // before sharding hides the blocks' weights
  n_params_ = model_->num_parameters();
  // shard none: replicated AdamW (+ GradSync); otherwise the sharded engine owns weights and moments.
  optimizer_ = make_optimizer(*dist_, model_, cfg_.train, cfg_.optim, device_);
  if (moment_) optimizer_->load_state(moment_, opt_steps_, *resumed_.checkpoint);
  fwd_.block_runner = optimizer_->block_runner();
}

namespace {

// Whether the run computes in bf16: train.dtype bfloat16 where bf16 pays on the device (ops::bf16_pays; elsewhere
// it computes in float32, said at start).
bool computes_in_bf16(const RunConfig& cfg, const torch::Device& device) {
  return cfg.train.dtype == TrainDType::kBFloat16 && ops::bf16_pays(device.type());
}

}  // namespace

// Run directory and logs (rank 0), and the run's description on the console.
void Trainer::open_run_dir() {
  if (main_rank_) {
    fs::create_directories(cfg_.out_dir);
    if (say_) logging::add_run_file(cfg_.out_dir);  // <out_dir>/drope-train.log, with timestamps
    write_file_atomic((fs::path(cfg_.out_dir) / "config.yaml").string(), opt_.run_yaml);
  }
  // MFU: train.peak_tflops, else the measured GEMM roof of the dtype this run computes in (drope-bench peak --save):
  // bf16 on a CPU whose bf16 GEMMs are emulated computes in float32, and is measured against float32's roof.
  const bool bf16 = computes_in_bf16(cfg_, device_);
  const double peak =
      training_peak_tflops(cfg_.train.peak_tflops, bf16 ? "bfloat16" : "float32", device_.is_cpu(), say_ && main_rank_);
  metrics_.open({cfg_.out_dir, cfg_.train.steps, cfg_.train.log_every, peak, cfg_.train.tensorboard, main_rank_, say_},
                state_.step, resumed_.checkpoint.has_value());
  if (say_)
    logging::info("{}: phase {}, {:.2f}M params, {} layers, positional {}, data {} ({} blocks of {}), batch {} = {} x "
                  "{} x {} (accum x micro x world, backend {}), device {}",
                  cfg_.name, name_of(cfg_.phase), n_params_ / 1e6, model_->config().num_layers,
                  name_of(model_->config().positional.type), train_src_->describe(), train_src_->num_blocks(), seq_len_,
                  batch_, accum_, micro_, world_, dist_->backend(), device_.str());
  if (say_ && device_.is_cpu())
    logging::info("{} | intra-op threads {} | {}", describe_cpu_budget(), at::get_num_threads(),
                  kernels::describe_cpu_levels());
}

void Trainer::add_default_hooks() {
  if (cfg_.drop_at_step >= 0) hooks_.push_back(std::make_unique<DropAtStep>());
  if (env::test_faults_enabled()) hooks_.push_back(std::make_unique<NanFaultInjection>());
}

void Trainer::replace_model(DecoderLM model) {
  model_ = std::move(model);
  model_->to(device_);
  optimizer_->replace_model(model_);
}

// ---- the step -------------------------------------------------------------------------------------------

// Mean cross-entropy of the batch's targets; with a loss mask (a task's answers) only the masked targets
// count, and only their rows reach the LM head.
torch::Tensor Trainer::loss_of(const torch::Tensor& batch, const torch::Tensor& mask) {
  const int64_t T = seq_len_;
  AutocastGuard autocast(computes_in_bf16(cfg_, device_), device_.type());
  auto b = batch.to(device_);
  auto labels = b.narrow(1, 1, T).reshape({-1});
  torch::Tensor rows;  // undefined = every target
  if (mask.defined()) {
    rows = mask.narrow(1, 1, T).reshape({-1}).nonzero().squeeze(1).to(device_);
    labels = labels.index_select(0, rows);
  }
  if (cfg_.train.chunked_loss) {  // the (micro·T, V) logits never exist at once
    auto h = model_->hidden(b.narrow(1, 0, T), fwd_);  // (micro, T, C)
    h = h.reshape({-1, h.size(-1)});
    if (rows.defined()) h = h.index_select(0, rows);
    return ops::linear_cross_entropy(h, model_->lm_head_weight(), labels, -100, 0, cfg_.train.fused_loss);
  }
  auto logits = model_->forward(b.narrow(1, 0, T), fwd_);  // (micro, T, V)
  logits = logits.reshape({-1, logits.size(-1)});
  if (rows.defined()) logits = logits.index_select(0, rows);
  return torch::nn::functional::cross_entropy(logits.to(torch::kFloat), labels);
}

Trainer::StepResult Trainer::train_step() {
  const int64_t s = state_.step;
  for (auto& h : hooks_) h->before_step(*this, s + 1);
  StepResult r;
  r.lr = schedule_lr(cfg_.schedule, s - state_.phase_start, cfg_.optim.lr);
  double loss_sum = 0;
  if (graph_) {
    auto loss = graph_forward_backward(s);
    for (auto& h : hooks_) loss = h->on_loss(s + 1, loss);  // the reported loss; the gradients are the graph's
    loss_sum = loss.item<double>();
  } else {
    optimizer_->zero_grad();
  }
  for (int64_t a = 0; a < (graph_ ? 0 : accum_); ++a) {
    const int64_t pos = s * batch_ + a * micro_ * world_ + dist_->rank() * micro_;
    auto loss = loss_of(sampler_->batch(pos, micro_), sampler_->mask(pos, micro_)) / double(accum_);
    for (auto& h : hooks_) loss = h->on_loss(s + 1, loss);
    const bool last_micro = a == accum_ - 1;
    optimizer_->before_backward(last_micro);
    loss.backward();
    optimizer_->after_backward(last_micro);
    loss_sum += loss.item<double>();
  }
  optimizer_->finish_backward();
  r.loss = dist_->mean(loss_sum);
  r.grad_norm = optimizer_->clip_grad_norm(cfg_.train.clip);
  r.finite = std::isfinite(r.loss) && std::isfinite(r.grad_norm);
  if (!r.finite) {
    skip_step(r);
  } else {
    bad_steps_ = 0;
    optimizer_->step(r.lr);
    for (auto& h : hooks_) h->after_update(*this, s + 1);
  }
  ++state_.step;
  state_.tokens += batch_ * seq_len_;
  if (r.finite) {
    metrics_.add_tokens(batch_ * seq_len_);
    out_.losses.emplace_back(state_.step, r.loss);
  }
  return r;
}

// A non-finite loss or gradient norm: no optimizer update (weights and moments keep their last good values),
// the data moves on; too many in a row end the run.
void Trainer::skip_step(const StepResult& r) {
  const int64_t s = state_.step;
  ++bad_steps_;
  if (say_)
    logging::warn("step {}: non-finite loss/gradient norm ({} / {}), step skipped ({} in a row, "
                  "limit train.max_bad_steps = {})",
                  s + 1, r.loss, r.grad_norm, bad_steps_, cfg_.train.max_bad_steps);
  metrics_.line({{"step", s + 1}, {"skipped", "non-finite loss or gradient"}});
  if (bad_steps_ >= cfg_.train.max_bad_steps)
    fail("aborting at step {}: {} non-finite steps in a row (train.max_bad_steps = {}); the last good "
         "checkpoint is {}",
         s + 1, bad_steps_, cfg_.train.max_bad_steps, latest_checkpoint(cfg_.out_dir).value_or("(none yet)"));
  if (!graph_) optimizer_->zero_grad();  // a graph's replay overwrites its gradient tensors, which must stay
}

torch::Tensor Trainer::graph_forward_backward(int64_t s) {
#ifdef DROPE_WITH_CUDA
  GraphStep& g = *graph_;
  const int64_t pos = s * batch_ + dist_->rank() * micro_;
  const auto host = sampler_->batch(pos, micro_);
  if (!g.batch.defined()) g.batch = torch::empty(host.sizes(), host.options().device(device_));
  g.batch.copy_(host);
  auto main = c10::cuda::getCurrentCUDAStream(device_.index());
  if (!g.side) g.side = c10::cuda::getStreamFromPool(false, device_.index());
  const auto wait = [](c10::cuda::CUDAStream from, c10::cuda::CUDAStream to) {
    at::cuda::CUDAEvent done;
    done.record(from);
    done.block(to);
  };
  wait(main, *g.side);
  torch::Tensor loss;
  {
    c10::cuda::CUDAStreamGuard on_side(*g.side);
    if (g.eager_steps < GraphStep::kWarmup) {
      optimizer_->zero_grad();
      loss = loss_of(g.batch, {});
      loss.backward();
      ++g.eager_steps;
    } else if (!g.graph) {
      // Gradients unset: the captured backward allocates them in the graph's pool and they stay the parameters'
      // gradients. Autocast's cast cache would keep tensors of the capture alive across replays: off meanwhile.
      optimizer_->zero_grad();
      const bool cache = at::autocast::is_autocast_cache_enabled();
      at::autocast::set_autocast_cache_enabled(false);
      g.graph = std::make_unique<at::cuda::CUDAGraph>();
      g.graph->capture_begin();
      g.loss = loss_of(g.batch, {});
      g.loss.backward();
      g.graph->capture_end();
      at::autocast::set_autocast_cache_enabled(cache);
      if (say_) logging::info("step {}: forward and backward captured in a CUDA graph", s + 1);
    }
  }
  wait(*g.side, main);
  if (loss.defined()) return loss;
  g.graph->replay();
  return g.loss;
#else
  (void)s;
  fail("{}: train.cuda_graphs: true needs a build with CUDA support", cfg_.source);
#endif
}

// ---- logs, validation, checkpoints ----------------------------------------------------------------------

void Trainer::log(const StepResult& r) {
  metrics_.step(state_.step, state_.tokens, {r.loss, r.lr, r.grad_norm}, r.finite, [&](nlohmann::json& j) {
    optimizer_->add_log_fields(j);
    if (const auto m = tensor_memory()) j["tensor_bytes"] = {{"live", m->live}, {"peak", m->peak}};
  });
}

// The mean validation loss over ranks: train.eval_batches micro-batches per rank of the validation split.
double Trainer::validate() {
  torch::NoGradGuard ng;
  model_->eval();
  double sum = 0;
  for (int64_t k = 0; k < cfg_.train.eval_batches; ++k) {
    const int64_t pos = (k * world_ + dist_->rank()) * micro_;
    sum += loss_of(val_sampler_->batch(pos, micro_), val_sampler_->mask(pos, micro_)).item<double>();
  }
  model_->train();
  return dist_->mean(sum / double(cfg_.train.eval_batches));
}

// Every rank evaluates (a sharded model's blocks need every rank); rank 0 logs. No autocast: the probes read the
// float32 weights as drope-eval does, whatever train.dtype is.
void Trainer::probe_long_context() {
  if (!probe_) return;
  const auto t0 = std::chrono::steady_clock::now();
  const eval::ProbeReading reading = probe_->run(model_, fwd_.block_runner);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  nlohmann::json line = {{"step", state_.step}};
  std::string text;
  if (main_rank_ && !reading.niah_samples.empty()) {  // what the model generated, beside the scores
    const fs::path dir = fs::path(cfg_.out_dir) / "probes";
    fs::create_directories(dir);
    write_file_atomic((dir / fmt::format("niah-step-{:08d}.jsonl", state_.step)).string(), reading.niah_samples);
  }
  for (const auto& [k, v] : reading.values.items()) {
    line[k] = v;
    text += fmt::format(" | {} {:.4g}", k, v.get<double>());
  }
  line["probe_seconds"] = seconds;
  metrics_.line(line);
  if (say_) logging::info("step {} long-context probe{} ({:.1f} s)", state_.step, text, seconds);
}

// Rank 0 writes (every rank its shard with a sharded optimizer); every rank learns whether that worked (the
// reduction doubles as the barrier), so a failed save (full disk, non-finite weights) stops all ranks with
// one clear message.
void Trainer::checkpoint() {
  std::string error;
  const bool writes = main_rank_ || optimizer_->every_rank_saves();
  if (writes) {
    const auto previous = latest_checkpoint(cfg_.out_dir);
    try {
      out_.last_checkpoint = optimizer_->save_checkpoint(cfg_.out_dir, state_, opt_.run_yaml, cfg_.train.keep_last);
    } catch (const std::exception& e) {
      error = fmt::format("step {}: could not save the checkpoint: {}. {}", state_.step, e.what(),
                          previous ? fmt::format("The previous checkpoint {} is intact; fix the cause and rerun "
                                                 "with --resume.",
                                                 *previous)
                                   : std::string("No earlier checkpoint exists."));
    }
  }
  if (dist_->mean(error.empty() ? 0.0 : 1.0) > 0) {
    if (writes) fail("{}", error.empty() ? "another rank could not save the checkpoint" : error);
    fail("rank {}: rank 0 could not save the checkpoint at step {}", dist_->rank(), state_.step);
  }
}

// Whether any rank was asked to stop (SIGTERM/SIGINT); every rank takes part.
bool Trainer::stop_requested() { return dist_->mean(stop_signal().load() ? 1.0 : 0.0) > 0; }

// The final validation and checkpoint (marked complete: a later --resume has nothing to redo).
void Trainer::finish() {
  out_.val_loss = validate();
  state_.extra["val_loss"] = out_.val_loss;
  state_.extra["complete"] = true;
  metrics_.line({{"step", state_.step}, {"val_loss", out_.val_loss}, {"val_ppl", std::exp(out_.val_loss)}});
  probe_long_context();
  checkpoint();
  if (say_)
    logging::info("done: step {} | validation loss {:.4f} | ppl {:.3f} | checkpoint {}", state_.step, out_.val_loss,
                  std::exp(out_.val_loss), out_.last_checkpoint);
}

}  // namespace drope::train
