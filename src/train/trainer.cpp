#include "drope/train/trainer.h"

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
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
#include <nlohmann/json.hpp>

#include "drope/core/cpu_budget.h"
#include "drope/core/duration.h"
#include "drope/core/error.h"
#include "drope/core/files.h"
#include "drope/core/json.h"
#include "drope/core/log.h"
#include "drope/core/tfevents.h"
#include "drope/io/model_io.h"
#include "drope/kernels/cpu_isa.h"
#include "drope/model/drope.h"
#include "drope/model/variant.h"
#include "drope/ops/loss.h"
#include "drope/train/checkpoint.h"
#include "drope/train/data.h"
#include "drope/train/distributed.h"
#include "drope/train/recompute.h"
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

std::atomic<bool> g_stop{false};

// Test-only fault injection (documented in docs/training.md, crash safety): DROPE_FAULT_NAN_AT_STEP=4,5 makes the
// loss of those steps (1-based) NaN; DROPE_FAULT_NAN_WEIGHTS_AT_STEP=n poisons one weight after step n.
std::vector<int64_t> fault_steps(const char* var) {
  std::vector<int64_t> out;
  const char* v = std::getenv(var);
  if (!v || !*v) return out;
  std::stringstream ss(v);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      size_t used = 0;
      out.push_back(std::stoll(item, &used));
      if (used != item.size()) throw std::invalid_argument(item);
    } catch (const std::exception&) {
      fail("environment variable {}='{}': expected comma-separated step numbers", var, v);
    }
  }
  return out;
}
bool contains(const std::vector<int64_t>& v, int64_t x) { return std::find(v.begin(), v.end(), x) != v.end(); }

std::vector<std::pair<std::string, torch::Tensor>> named(DecoderLM& m) {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (auto& kv : m->named_parameters()) out.emplace_back(kv.key(), kv.value());
  return out;
}

// The shape fields that must agree between a run config and a checkpoint it resumes.
void check_same_shape(const ModelConfig& want, const ModelConfig& got, const std::string& ckpt) {
  auto cmp = [&](const char* what, int64_t a, int64_t b) {
    if (a != b) fail("{}: checkpoint from another model shape: {} is {} there, {} in the run config", ckpt, what, b, a);
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

// Keeps the JSON-lines log consistent with a resumed run: lines after `step` are dropped.
void truncate_log(const std::string& path, int64_t step) {
  std::ifstream in(path);
  if (!in) return;
  std::string line, kept;
  while (std::getline(in, line)) {
    try {
      auto j = parse_json(line, path);
      if (j.value("step", int64_t(0)) <= step) kept += line + "\n";
    } catch (const std::exception&) {
      // a torn last line from a killed run
    }
  }
  write_file_atomic(path, kept);
}

// The scalars of a log line for TensorBoard: every finite number but the step, tagged by its key.
std::vector<TfScalar> log_scalars(const nlohmann::json& line) {
  std::vector<TfScalar> out;
  for (const auto& [key, v] : line.items())
    if (key != "step" && v.is_number() && std::isfinite(v.get<double>())) out.emplace_back(key, v.get<double>());
  return out;
}

}  // namespace

void install_stop_handlers() {
  // SIGTERM / SIGINT are blocked in this thread and every thread it starts later (LibTorch's OpenMP team,
  // oneDNN's), and a dedicated thread takes them with sigwait. A handler would run on whichever compute
  // thread the kernel picks, on that thread's current stack; with oneDNN's GEMMs, valgrind sees threads
  // switch to stacks in heap memory, and handled SIGTERMs aborted with heap corruption in about one run in
  // seven (none in 30 with sigwait). Call this before any other thread exists.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  if (const int e = pthread_sigmask(SIG_BLOCK, &set, nullptr); e != 0) fail("cannot block SIGTERM/SIGINT: {}", std::strerror(e));
  std::thread([set] {
    int sig = 0;
    while (sigwait(&set, &sig) == 0) g_stop = true;
  }).detach();
  // A file-size limit (RLIMIT_FSIZE) must make write() fail with EFBIG, a clean error, not kill us.
  ignore_file_size_signal();
}

TrainOutcome run_training(const RunConfig& cfg, const TrainOptions& opt) {
  TrainOutcome out;
  const DistEnv env = read_dist_env();
  torch::Device device(torch::kCPU);
  if (cfg.train.device == "cuda" || (cfg.train.device == "auto" && torch::cuda::is_available())) {
    if (!torch::cuda::is_available()) fail("{}: train.device is cuda but no CUDA device is available", cfg.source);
    device = torch::Device(torch::kCUDA, env.local_rank % std::max<int64_t>(1, torch::cuda::device_count()));
  }
  Distributed dist(env, device, cfg.train.dist_timeout_s);
  const bool main_rank = dist.is_main();
  const bool say = !opt.quiet;  // the logger decides which ranks speak
  const int W = dist.world();

  // Batch geometry: batch = accum · micro · world.
  const int64_t B = cfg.data.batch_size, T = cfg.data.seq_len;
  const int64_t micro = cfg.data.micro_batch > 0 ? cfg.data.micro_batch : B / W;
  if (micro < 1 || B % (micro * W) != 0)
    fail("{}: data.batch_size {} is not a multiple of micro_batch ({}) x world size ({})", cfg.source, B, micro, W);
  const int64_t accum = B / (micro * W);

  // Data.
  std::unique_ptr<BlockSource> train_src, val_src;
  if (!cfg.data.text.empty()) {
    auto s = byte_text_sources(cfg.data.text, T);
    train_src = std::move(s.train);
    val_src = std::move(s.val);
  } else if (!cfg.data.task.empty()) {
    auto s = task_sources(cfg.data.task, cfg.seed, T);
    train_src = std::move(s.train);
    val_src = std::move(s.val);
  } else {
    auto s = dataset_sources(cfg.data.dataset, T);
    train_src = std::move(s.train);
    val_src = std::move(s.val);
  }

  // Model and optimizer state: resume, or build for the phase.
  DecoderLM model{nullptr};
  TrainState st;
  std::function<torch::Tensor(const std::string&, const std::string&, int64_t, int64_t)> moment;
  int64_t opt_steps = 0;
  if (main_rank) {
    const int removed = remove_stale_run_temporaries(cfg.out_dir);
    if (removed > 0 && say) logging::info("removed {} incomplete temporary file(s) of an interrupted run", removed);
  }
  const std::optional<std::string> newest = latest_checkpoint(cfg.out_dir);
  const std::optional<std::string> ckpt = opt.resume ? newest : std::nullopt;
  if (ckpt) {
    auto c = load_checkpoint(*ckpt);
    if (cfg.has_model && cfg.init.empty()) check_same_shape(cfg.model, c.model->config(), *ckpt);
    model = c.model;
    st = c.state;
    moment = c.moment;
    opt_steps = c.optimizer_steps;
    out.resumed_from = st.step;
    if (say) logging::info("resuming from {} (step {})", *ckpt, st.step);
    if (st.step >= cfg.train.steps && st.extra.is_object() && st.extra.value("complete", false)) {
      // The run finished (its final checkpoint follows the final validation): nothing to redo or re-log.
      if (say) logging::info("run already complete at step {} (train.steps {})", st.step, cfg.train.steps);
      out.last_checkpoint = *ckpt;
      out.val_loss = st.extra.value("val_loss", 0.0);
      return out;
    }
  } else if (cfg.phase == TrainPhase::kPretrain && cfg.init.empty()) {
    model = DecoderLM(cfg.model);
    model->reset_parameters(cfg.seed);
  } else {
    model = io::load_model(cfg.init, cfg.init_import);
    if (cfg.phase == TrainPhase::kDrope) model = apply_variant(model, drope_variant(cfg), cfg.init);
    if (cfg.phase == TrainPhase::kFinetune) model = with_rope_scaling(model, cfg.scaling);
  }
  if (model->config().vocab_size < train_src->vocab_size())
    fail("{}: the data has vocabulary {} but the model only {}", cfg.source, train_src->vocab_size(),
         model->config().vocab_size);
  if (newest && !ckpt)  // a fresh start would mix its checkpoints with the old run's (and prune the new ones)
    fail("{}: the run directory already holds checkpoints (newest {}); pass --resume to continue it, or choose "
         "another run.out_dir",
         cfg.out_dir, *newest);
  model->to(device);
  if (!ckpt) {
    std::vector<torch::Tensor> ps;
    for (auto& p : model->parameters()) ps.push_back(p);
    torch::NoGradGuard ng;
    dist.broadcast(ps);
  }
  const double fpt = flops_per_token(model, T);  // before sharding hides the blocks' weights
  const int64_t n_params = model->num_parameters();
  const ShardMode shard = cfg.train.shard;
  // shard none: replicated AdamW (+ GradSync below); otherwise the sharded engine owns weights and moments.
  std::unique_ptr<AdamW> adamw;
  std::unique_ptr<ShardedDataParallel> sdp;
  if (shard == ShardMode::kNone) {
    adamw = std::make_unique<AdamW>(named(model), cfg.optim);
    if (moment) {
      std::map<std::string, torch::Tensor> state;
      for (auto& [name, p] : named(model))
        for (const char* kind : {"exp_avg", "exp_avg_sq"})
          state[std::string(kind) + "." + name] = moment(kind, name, 0, p.numel()).view(p.sizes()).to(device);
      adamw->load_state(state, opt_steps, *ckpt);
    }
  } else {
    sdp = std::make_unique<ShardedDataParallel>(dist, model, shard, cfg.optim, cfg.train.activation_checkpointing);
    if (moment) {
      const auto& names = sdp->names();
      sdp->load_optimizer([&](const std::string& kind, int64_t i, int64_t start,
                              int64_t len) { return moment(kind, names[i], start, len); },
                          opt_steps, *ckpt);
    }
  }
  ForwardOptions fwd;  // how decoder blocks run in training (activation checkpointing, sharded weights)
  if (sdp) fwd.block_runner = sdp->block_runner();
  else if (cfg.train.activation_checkpointing > 0)
    fwd.block_runner = [every = cfg.train.activation_checkpointing](size_t layer, DecoderLayerImpl& block,
                                                                     const torch::Tensor& x, const PositionContext& ctx) {
      return checkpoints_layer(every, layer) ? checkpointed_block(block, x, ctx) : block.forward(x, ctx);
    };

  // Run directory and logs (rank 0).
  const std::string log_path = (fs::path(cfg.out_dir) / "log.jsonl").string();
  if (main_rank) {
    fs::create_directories(cfg.out_dir);
    if (say) logging::add_run_file(cfg.out_dir);  // <out_dir>/drope-train.log, with timestamps
    write_file_atomic((fs::path(cfg.out_dir) / "config.yaml").string(), opt.run_yaml);
    if (ckpt) truncate_log(log_path, st.step);
    else write_file_atomic(log_path, "");
  }
  std::ofstream log_file;
  if (main_rank) log_file.open(log_path, std::ios::app);
  // train.tensorboard: a new events file per start; its SessionLog START at the first step this start logs
  // makes TensorBoard drop what an earlier start logged from there on, as truncate_log does for log.jsonl.
  std::unique_ptr<EventFileWriter> events;
  if (main_rank && cfg.train.tensorboard) events = std::make_unique<EventFileWriter>(cfg.out_dir, st.step + 1);
  const bool tty = say && ::isatty(STDOUT_FILENO);
  if (say)
    logging::info("{}: phase {}, {:.2f}M params, {} layers, positional {}, data {} ({} blocks of {}), batch {} = {} x {} x {} "
                  "(accum x micro x world, backend {}), device {}",
                  cfg.name, name_of(cfg.phase), n_params / 1e6, model->config().num_layers,
                  name_of(model->config().positional.type), train_src->describe(), train_src->num_blocks(), T, B, accum,
                  micro, W, dist.backend(), device.str());
  if (say && device.is_cpu())
    logging::info("{} | intra-op threads {} | {}", describe_cpu_budget(), at::get_num_threads(),
                  kernels::describe_cpu_levels());

  BlockSampler sampler(*train_src, cfg.seed, cfg.data.shuffle);
  BlockSampler val_sampler(*val_src, 0, false);
  const bool bf16 = cfg.train.dtype == "bfloat16";
  // Mean cross-entropy of the batch's targets; with a loss mask (a task's answers) only the masked targets
  // count, and only their rows reach the LM head.
  auto step_loss = [&](const torch::Tensor& batch, const torch::Tensor& mask) {
    AutocastGuard autocast(bf16, device.type());
    auto b = batch.to(device);
    auto labels = b.narrow(1, 1, T).reshape({-1});
    torch::Tensor rows;  // undefined = every target
    if (mask.defined()) {
      rows = mask.narrow(1, 1, T).reshape({-1}).nonzero().squeeze(1).to(device);
      labels = labels.index_select(0, rows);
    }
    if (cfg.train.chunked_loss) {  // the (micro·T, V) logits never exist at once
      auto h = model->hidden(b.narrow(1, 0, T), fwd);  // (micro, T, C)
      h = h.reshape({-1, h.size(-1)});
      if (rows.defined()) h = h.index_select(0, rows);
      return ops::linear_cross_entropy(h, model->lm_head_weight(), labels);
    }
    auto logits = model->forward(b.narrow(1, 0, T), fwd);  // (micro, T, V)
    logits = logits.reshape({-1, logits.size(-1)});
    if (rows.defined()) logits = logits.index_select(0, rows);
    return torch::nn::functional::cross_entropy(logits.to(torch::kFloat), labels);
  };
  auto validate = [&]() {
    torch::NoGradGuard ng;
    model->eval();
    double sum = 0;
    for (int64_t k = 0; k < cfg.train.eval_batches; ++k) {
      const int64_t pos = (k * W + dist.rank()) * micro;
      sum += step_loss(val_sampler.batch(pos, micro), val_sampler.mask(pos, micro)).item<double>();
    }
    model->train();
    return dist.mean(sum / double(cfg.train.eval_batches));
  };
  // Rank 0 writes; every rank learns whether that worked (the reduction doubles as the barrier), so a
  // failed save (full disk, non-finite weights) stops all ranks with one clear message.
  auto checkpoint = [&]() {
    std::string error;
    if (main_rank) {
      const auto previous = latest_checkpoint(cfg.out_dir);
      try {
        if (!sdp) out.last_checkpoint = save_checkpoint(cfg.out_dir, model, *adamw, st, opt.run_yaml, cfg.train.keep_last);
      } catch (const std::exception& e) {
        error = fmt::format("step {}: could not save the checkpoint: {}. {}", st.step, e.what(),
                            previous ? fmt::format("The previous checkpoint {} is intact; fix the cause and rerun "
                                                   "with --resume.", *previous)
                                     : std::string("No earlier checkpoint exists."));
      }
    }
    if (sdp) {  // every rank writes its shard
      const auto previous = latest_checkpoint(cfg.out_dir);
      try {
        out.last_checkpoint = save_sharded_checkpoint(dist, cfg.out_dir, model, *sdp, st, opt.run_yaml, cfg.train.keep_last);
      } catch (const std::exception& e) {
        error = fmt::format("step {}: could not save the checkpoint: {}. {}", st.step, e.what(),
                            previous ? fmt::format("The previous checkpoint {} is intact; fix the cause and rerun "
                                                   "with --resume.", *previous)
                                     : std::string("No earlier checkpoint exists."));
      }
    }
    if (dist.mean(error.empty() ? 0.0 : 1.0) > 0) {
      if (main_rank || sdp) fail("{}", error.empty() ? "another rank could not save the checkpoint" : error);
      fail("rank {}: rank 0 could not save the checkpoint at step {}", dist.rank(), st.step);
    }
  };
  auto log_line = [&](const nlohmann::json& j) {
    log_file << j.dump() << "\n" << std::flush;
    if (!log_file) fail("{}: cannot append to the training log ({})", log_path, std::strerror(errno));
    if (events) {
      const auto scalars = log_scalars(j);
      if (!scalars.empty()) events->write_scalars(j.at("step").get<int64_t>(), scalars);
    }
  };
  const auto nan_loss_steps = fault_steps("DROPE_FAULT_NAN_AT_STEP");
  const auto nan_weight_steps = fault_steps("DROPE_FAULT_NAN_WEIGHTS_AT_STEP");

  auto t_start = std::chrono::steady_clock::now();
  auto t_last = t_start;
  int64_t tokens_since = 0, bad_steps = 0;
  const int64_t first_step = st.step;
  model->train();
  const auto bucket_bytes = static_cast<int64_t>(cfg.train.allreduce_bucket_mb * (1 << 20));
  auto sync = sdp ? nullptr : std::make_unique<GradSync>(dist, model->parameters(), bucket_bytes);
  while (st.step < cfg.train.steps) {
    const int64_t s = st.step;
    if (cfg.drop_at_step >= 0 && s == cfg.drop_at_step && model->config().positional.type != PositionalType::kNope) {
      // Paper Table 7: drop positional embeddings mid-run; moments of kept parameters carry over.
      auto moments = adamw->state_tensors();
      const int64_t steps_taken = adamw->steps_taken();
      model = apply_variant(model, drope_variant(cfg), cfg.init);
      model->to(device);
      adamw = std::make_unique<AdamW>(named(model), cfg.optim);
      std::map<std::string, torch::Tensor> carry(moments.begin(), moments.end());
      for (auto& [name, p] : named(model)) {
        if (!carry.count("exp_avg." + name)) {
          carry["exp_avg." + name] = torch::zeros_like(p);
          carry["exp_avg_sq." + name] = torch::zeros_like(p);
        }
      }
      adamw->load_state(carry, steps_taken, "drop_at_step");
      sync.reset();  // hooks on the old parameters go first
      sync = std::make_unique<GradSync>(dist, model->parameters(), bucket_bytes);
      if (say) logging::info("step {}: dropped positional embeddings (qk_norm {})", s, name_of(cfg.drope_qk_norm));
    }
    const double lr = schedule_lr(cfg.schedule, s - st.phase_start, cfg.optim.lr);
    if (sdp) sdp->zero_grad();
    else adamw->zero_grad();
    double loss_sum = 0;
    for (int64_t a = 0; a < accum; ++a) {
      const int64_t pos = s * B + a * micro * W + dist.rank() * micro;
      auto loss = step_loss(sampler.batch(pos, micro), sampler.mask(pos, micro)) / double(accum);
      if (contains(nan_loss_steps, s + 1)) loss = loss * std::numeric_limits<double>::quiet_NaN();
      const bool last_micro = a == accum - 1;
      if (sdp) sdp->before_backward(last_micro);
      else if (last_micro) sync->arm();  // the last micro-batch's backward reduces gradients as they finish
      loss.backward();
      if (sdp) sdp->after_backward(last_micro);
      loss_sum += loss.item<double>();
    }
    if (sync) sync->finish();
    const double loss = dist.mean(loss_sum);
    double gnorm = sdp ? sdp->clip_grad_norm(cfg.train.clip)
                 : cfg.train.clip > 0 ? torch::nn::utils::clip_grad_norm_(model->parameters(), cfg.train.clip)
                                      : torch::nn::utils::clip_grad_norm_(model->parameters(), 1e30);
    const bool finite = std::isfinite(loss) && std::isfinite(gnorm);
    if (!finite) {
      // Skip: no optimizer update (weights and moments keep their last good values), the data moves on.
      ++bad_steps;
      if (say)
        logging::warn("step {}: non-finite loss/gradient norm ({} / {}), step skipped ({} in a row, "
                      "limit train.max_bad_steps = {})", s + 1, loss, gnorm, bad_steps, cfg.train.max_bad_steps);
      if (main_rank) log_line({{"step", s + 1}, {"skipped", "non-finite loss or gradient"}});
      if (bad_steps >= cfg.train.max_bad_steps)
        fail("aborting at step {}: {} non-finite steps in a row (train.max_bad_steps = {}); the last good "
             "checkpoint is {}",
             s + 1, bad_steps, cfg.train.max_bad_steps, latest_checkpoint(cfg.out_dir).value_or("(none yet)"));
      if (sdp) sdp->zero_grad();
      else adamw->zero_grad();
    } else {
      bad_steps = 0;
      if (sdp) sdp->step(lr);
      else adamw->step(lr);
      if (contains(nan_weight_steps, s + 1)) {
        torch::NoGradGuard ng;
        model->parameters().front().view({-1})[0].fill_(std::numeric_limits<double>::quiet_NaN());
      }
    }
    ++st.step;
    st.tokens += B * T;
    if (finite) {
      tokens_since += B * T;
      out.losses.emplace_back(st.step, loss);
    }

    const bool last = st.step == cfg.train.steps;
    // The log file gets the same lines whether or not the run was interrupted; the console also shows
    // the first step after a resume.
    const bool log_now = st.step % cfg.train.log_every == 0 || last || st.step == 1;
    if (main_rank && finite && (log_now || st.step == first_step + 1)) {
      auto now = std::chrono::steady_clock::now();
      const double dt = std::chrono::duration<double>(now - t_last).count();
      const double elapsed = std::chrono::duration<double>(now - t_start).count();
      const double tps = dt > 0 ? tokens_since / dt : 0;
      const double mfu = cfg.train.peak_tflops > 0 ? fpt * tps / (cfg.train.peak_tflops * 1e12) : -1;
      const double eta = (elapsed / double(st.step - first_step)) * double(cfg.train.steps - st.step);
      nlohmann::json j{{"step", st.step}, {"loss", loss}, {"lr", lr}, {"grad_norm", gnorm}, {"tokens", st.tokens},
                       {"tokens_per_s", tps}, {"elapsed_s", elapsed}};
      if (mfu >= 0) j["mfu"] = mfu;
      if (sdp) {  // what this rank (0) holds: parameters, gradient chunks, optimizer moments; whole blocks at once
        const auto b = sdp->bytes();
        j["shard_bytes"] = {{"params", b.params}, {"grads", b.grads}, {"optimizer", b.optimizer},
                            {"gathered_peak", b.gathered_peak}, {"prefetch_hits", b.prefetch_hits},
                            {"prefetch_wasted", b.prefetch_wasted}};
      }
      if (const auto m = tensor_memory()) j["tensor_bytes"] = {{"live", m->live}, {"peak", m->peak}};
      if (dist.grouped() && sync) {  // how many gradient buckets started their all-reduce while backward was still running
        j["allreduce_buckets"] = sync->buckets();
        j["allreduce_overlapped"] = sync->overlapped();
      }
      if (log_now) log_line(j);
      if (say) {
        logging::info("step {:>6}/{} | loss {:.4f} | lr {:.2e} | grad-norm {:.3f} | {:.1f}k tok/s | MFU {} | ETA {}",
                      st.step, cfg.train.steps, loss, lr, gnorm, tps / 1e3,
                      mfu >= 0 ? fmt::format("{:.1f}%", 100 * mfu) : std::string("-"), format_duration(eta));
      }
      t_last = now;
      tokens_since = 0;
    } else if (tty) {
      const int width = 30, done = int(width * st.step / cfg.train.steps);
      logging::progress(fmt::format("[{}{}] step {}/{}", std::string(done, '#'), std::string(width - done, '.'),
                                    st.step, cfg.train.steps));
    }
    if (cfg.train.eval_every > 0 && st.step % cfg.train.eval_every == 0 && !last) {
      const double vl = validate();
      if (main_rank) log_line({{"step", st.step}, {"val_loss", vl}, {"val_ppl", std::exp(vl)}});
      if (say) logging::info("step {:>6} | validation loss {:.4f} | ppl {:.3f}", st.step, vl, std::exp(vl));
    }
    const bool stop = dist.mean(g_stop.load() ? 1.0 : 0.0) > 0;
    if (stop || (cfg.train.checkpoint_every > 0 && st.step % cfg.train.checkpoint_every == 0 && !last)) checkpoint();
    if (stop) {
      if (say) logging::info("stop requested: saved {} at step {}", out.last_checkpoint, st.step);
      out.stopped = true;
      return out;
    }
  }
  out.val_loss = validate();
  st.extra["val_loss"] = out.val_loss;
  st.extra["complete"] = true;
  if (main_rank) log_line({{"step", st.step}, {"val_loss", out.val_loss}, {"val_ppl", std::exp(out.val_loss)}});
  checkpoint();
  if (say)
    logging::info("done: step {} | validation loss {:.4f} | ppl {:.3f} | checkpoint {}", st.step, out.val_loss,
                  std::exp(out.val_loss), out.last_checkpoint);
  return out;
}

}  // namespace drope::train
