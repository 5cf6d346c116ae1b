#include "drope/train/run_config.h"

#include <fmt/format.h>

#include "drope/core/error.h"
#include "drope/core/numbers.h"
#include "drope/tasks/niah.h"
#include "drope/tasks/offset_key.h"

namespace drope::train {

using io::check_import_positional;

void apply_overrides(YAML::Node& root, const std::vector<std::string>& sets, const std::string& source) {
  for (const auto& s : sets) {
    const auto eq = s.find('=');
    if (eq == std::string::npos || eq == 0) fail("--set '{}': expected key.path=value", s);
    const std::string path = s.substr(0, eq), value = s.substr(eq + 1);
    // The same strict reading as a file (one document, UTF-8, no repeated keys).
    YAML::Node parsed = parse_yaml(value, fmt::format("--set '{}': value", s));
    std::vector<std::string> keys;
    size_t start = 0;
    while (true) {
      auto dot = path.find('.', start);
      keys.push_back(path.substr(start, dot - start));
      if (dot == std::string::npos) break;
      start = dot + 1;
    }
    if (!root.IsMap() && !root.IsNull()) fail("{}: top level must be a mapping to apply --set {}", source, s);
    // Walk with fresh handles: yaml-cpp node assignment rebinds, so keep the chain explicit.
    std::vector<YAML::Node> chain{root};
    for (size_t i = 0; i + 1 < keys.size(); ++i) {
      YAML::Node next = chain.back()[keys[i]];
      if (next.IsDefined() && !next.IsNull() && !next.IsMap())
        fail("--set '{}': '{}' is not a mapping in {}", s, keys[i], source);
      if (!next.IsDefined() || next.IsNull()) {
        chain.back()[keys[i]] = YAML::Node(YAML::NodeType::Map);
        next = chain.back()[keys[i]];
      }
      chain.push_back(next);
    }
    chain.back()[keys.back()] = parsed;
  }
}

namespace {

void read_run(YamlMap run, RunConfig& c) {
  run.get("name", c.name);
  run.get("out_dir", c.out_dir);
  int64_t seed = 0;
  if (run.get("seed", seed)) {
    if (seed < 0) fail("{}: run.seed must be >= 0", run.where("seed"));
    c.seed = static_cast<uint64_t>(seed);
  }
  get_name(run, "phase", c.phase);
  run.get("init", c.init);
  PositionalType init_positional = PositionalType::kRope;
  if (get_name(run, "init_positional", init_positional)) {
    check_import_positional(init_positional, run.where("init_positional"));
    c.init_import.positional = init_positional;
  }
  run.finish();
}

void read_drope(YamlMap dr, RunConfig& c) {
  get_name(dr, "qk_norm", c.drope_qk_norm);
  dr.get("per_head", c.drope_per_head);
  dr.get("drop_at_step", c.drop_at_step);
  dr.finish();
}

void read_scaling(YamlMap sc, RunConfig& c) {
  get_name(sc, "type", c.scaling.type);
  sc.get("factor", c.scaling.factor);
  sc.get("original_max_position", c.scaling.original_max_position);
  sc.finish();
}

void read_data(YamlMap d, DataConfig& data) {
  d.get("dataset", data.dataset);
  d.get("text", data.text);
  d.get_choice("task", data.task, {"offset-key"});
  d.get("seq_len", data.seq_len);
  d.get("batch_size", data.batch_size);
  d.get("micro_batch", data.micro_batch);
  d.get("shuffle", data.shuffle);
  d.finish();
}

void read_optim(YamlMap o, AdamWConfig& optim) {
  o.get("lr", optim.lr);
  std::vector<double> betas;
  if (o.get("betas", betas)) {
    if (betas.size() != 2) fail("{}: expected [beta1, beta2]", o.where("betas"));
    optim.beta1 = betas[0];
    optim.beta2 = betas[1];
  }
  o.get("eps", optim.eps);
  o.get("weight_decay", optim.weight_decay);
  o.get("decay_embeddings", optim.decay_embeddings);
  o.get("decay_norms_and_biases", optim.decay_norms_and_biases);
  o.get("fused", optim.fused);
  o.finish();
}

void read_train(YamlMap t, TrainLoopConfig& train) {
  t.get("steps", train.steps);
  t.get("log_every", train.log_every);
  t.get("eval_every", train.eval_every);
  t.get("eval_batches", train.eval_batches);
  t.get("checkpoint_every", train.checkpoint_every);
  t.get("keep_last", train.keep_last);
  t.get("clip", train.clip);
  get_name(t, "dtype", train.dtype);
  get_name(t, "device", train.device);
  t.get("peak_tflops", train.peak_tflops);
  t.get("dist_timeout_s", train.dist_timeout_s);
  t.get("allreduce_bucket_mb", train.allreduce_bucket_mb);
  t.get("max_bad_steps", train.max_bad_steps);
  t.get("chunked_loss", train.chunked_loss);
  t.get("fused_loss", train.fused_loss);
  t.get("cuda_graphs", train.cuda_graphs);
  get_name(t, "shard", train.shard);
  std::string ac;
  if (t.get("activation_checkpointing", ac))
    train.activation_checkpointing = parse_activation_checkpointing(ac, t.where("activation_checkpointing"));
  t.get("tensorboard", train.tensorboard);
  t.finish();
}

void read_eval(YamlMap e, EvalConfig& ev) {
  e.get("lengths", ev.lengths);
  e.get("max_tokens", ev.max_tokens);
  e.get("stride", ev.stride);
  e.get("niah_lengths", ev.niah_lengths);
  e.get("niah_task", ev.niah_task);
  e.get("niah_trials", ev.niah_trials);
  e.get("niah_max_new_tokens", ev.niah_max_new_tokens);
  int64_t seed = 0;
  if (e.get("niah_seed", seed)) {
    if (seed < 0) fail("{}: eval.niah_seed must be >= 0", e.where("niah_seed"));
    ev.niah_seed = static_cast<uint64_t>(seed);
  }
  e.get("niah_haystack", ev.niah_haystack);
  e.get("at_start", ev.at_start);
  e.finish();
}

// eval.*: lengths and counts in range, a known NIAH task, a token dataset to read the val split and tokenizer from.
void check_eval(const RunConfig& c, const std::string& source) {
  const EvalConfig& e = c.eval;
  auto need = [&](bool ok, const std::string& what) {
    if (!ok) fail("{}: {}", source, what);
  };
  constexpr int64_t kMaxLength = int64_t(1) << 22;
  for (const auto* list : {&e.lengths, &e.niah_lengths}) {
    const char* key = list == &e.lengths ? "eval.lengths" : "eval.niah_lengths";
    for (size_t i = 0; i < list->size(); ++i) {
      const int64_t L = (*list)[i];
      need(L >= 2 && L <= kMaxLength, fmt::format("{}: each length must be in [2, {}], got {}", key, kMaxLength, L));
      for (size_t j = 0; j < i; ++j) need((*list)[j] != L, fmt::format("{}: length {} is given twice", key, L));
    }
  }
  need(e.max_tokens >= 2 && e.max_tokens <= (int64_t(1) << 26),
       fmt::format("eval.max_tokens must be in [2, {}], got {}", int64_t(1) << 26, e.max_tokens));
  need(e.stride >= 1 && e.stride <= kMaxLength,
       fmt::format("eval.stride must be in [1, {}], got {}", kMaxLength, e.stride));
  need(e.niah_trials >= 1 && e.niah_trials <= 4096,
       fmt::format("eval.niah_trials must be in [1, 4096], got {}", e.niah_trials));
  need(e.niah_max_new_tokens >= 1 && e.niah_max_new_tokens <= 4096,
       fmt::format("eval.niah_max_new_tokens must be in [1, 4096], got {}", e.niah_max_new_tokens));
  try {
    const auto tasks = tasks::parse_niah_tasks(e.niah_task, "eval.niah_task");
    need(tasks.size() == 1, fmt::format("eval.niah_task: one task, got '{}'", e.niah_task));
  } catch (const Error& err) {
    fail("{}: {}", source, err.what());
  }
  if (!e.enabled()) return;
  need(!c.data.dataset.empty(),
       "eval.lengths and eval.niah_lengths need data.dataset (a token dataset with a val split and a tokenizer)");
  need(e.niah_lengths.empty() || c.train.shard != ShardMode::kParams,
       "eval.niah_lengths needs train.shard none, optimizer or grads (generation reads whole weights)");
}

void read_schedule(YamlMap s, ScheduleConfig& schedule) {
  get_name(s, "type", schedule.type);
  s.get("warmup", schedule.warmup);
  s.get("steps", schedule.steps);
  s.get("min_lr_ratio", schedule.min_lr_ratio);
  s.get("decay_fraction", schedule.decay_fraction);
  get_name(s, "decay_shape", schedule.decay_shape);
  s.finish();
}

// train.cuda_graphs: a step whose shapes and work are the same every step, within one process.
void check_cuda_graphs(const RunConfig& c, const std::string& source) {
  auto refuse = [&](bool bad, const std::string& why) {
    if (bad) fail("{}: train.cuda_graphs: true {}", source, why);
  };
  refuse(c.train.device == TrainDevice::kCpu, "needs a CUDA device; this run has train.device: cpu");
  refuse(c.train.chunked_loss,
         "needs train.chunked_loss: false (the chunked loss reads its token count on the host, which a graph "
         "cannot capture)");
  refuse(!c.data.task.empty(),
         "cannot train data.task: its loss mask selects a different number of targets each batch (dynamic shapes)");
  refuse(c.data.micro_batch > 0 && c.data.micro_batch != c.data.batch_size,
         "captures one forward and backward per step; data.micro_batch accumulates several (set it to 0)");
  refuse(c.train.shard != ShardMode::kNone,
         "needs train.shard: none (the sharded optimizer's collectives run inside the backward)");
  refuse(c.train.activation_checkpointing != 0,
         "needs train.activation_checkpointing: none (the recomputation inside the backward is not captured)");
  refuse(c.drop_at_step >= 0, "cannot run drope.drop_at_step: the drop replaces the model the graph captured");
}

// Ranges and combinations of fields across sections.
void check_run_config(const RunConfig& c, const std::string& source) {
  auto need = [&](bool ok, const std::string& what) {
    if (!ok) fail("{}: {}", source, what);
  };
  need(!c.out_dir.empty(), "run.out_dir is required");
  need(int(!c.data.dataset.empty()) + int(!c.data.text.empty()) + int(!c.data.task.empty()) == 1,
       "give exactly one of data.dataset, data.text or data.task");
  need(c.data.seq_len > 0 && c.data.batch_size > 0 && c.data.micro_batch >= 0,
       "data.seq_len and data.batch_size must be positive, data.micro_batch >= 0");
  need(c.data.seq_len <= (int64_t{1} << 24) && c.data.batch_size <= (int64_t{1} << 24) &&
           c.data.micro_batch <= c.data.batch_size,
       "data.seq_len and data.batch_size must be at most 2^24, data.micro_batch at most data.batch_size");
  need(c.data.task.empty() || c.data.seq_len + 1 >= tasks::kOffsetKeyMinLength,
       fmt::format("data.seq_len must be at least {} for data.task offset-key (a sequence of seq_len + 1 tokens "
                   "holds BOS, 4 needles and the 12-token query block), got {}",
                   tasks::kOffsetKeyMinLength - 1, c.data.seq_len));
  need(c.train.steps > 0, "train.steps must be positive");
  need(c.train.log_every > 0, "train.log_every must be positive");
  need(c.train.eval_every >= 0 && c.train.checkpoint_every >= 0 && c.train.eval_batches > 0,
       "train.eval_every/checkpoint_every must be >= 0 and train.eval_batches > 0");
  need(c.train.keep_last >= 1, "train.keep_last must be >= 1");
  // Real-valued fields: finite and in range (one shared check, drope/core/numbers.h).
  auto number = [&](const char* key, double v, const Interval& range) {
    check_number(v, fmt::format("{}: {}", source, key), range);
  };
  number("optim.lr", c.optim.lr, Interval::positive());
  number("optim.eps", c.optim.eps, Interval::positive());
  number("optim.weight_decay", c.optim.weight_decay, Interval::non_negative());
  number("optim.betas[0]", c.optim.beta1, Interval::half_open(0, 1));
  number("optim.betas[1]", c.optim.beta2, Interval::half_open(0, 1));
  need(c.schedule.warmup >= 0 && c.schedule.steps > 0, "schedule.warmup must be >= 0, schedule.steps > 0");
  number("schedule.min_lr_ratio", c.schedule.min_lr_ratio, Interval::closed(0, 1));
  number("schedule.decay_fraction", c.schedule.decay_fraction, {0, 1, true, false});
  number("train.clip", c.train.clip, Interval::non_negative());
  number("train.peak_tflops", c.train.peak_tflops, Interval::non_negative());
  number("train.dist_timeout_s", c.train.dist_timeout_s, Interval::positive());
  number("train.allreduce_bucket_mb", c.train.allreduce_bucket_mb, {0, 1 << 20, true, false});
  need(c.train.max_bad_steps >= 1, "train.max_bad_steps must be >= 1");
  if (c.train.cuda_graphs) check_cuda_graphs(c, source);
  if (c.phase == TrainPhase::kPretrain)
    need(c.has_model || !c.init.empty(), "phase pretrain needs a model: section or run.init");
  else
    need(!c.init.empty(), "phase " + std::string(name_of(c.phase)) + " needs run.init (a checkpoint or HF directory)");
  if (c.init_import.positional)
    need(!c.init.empty(), "run.init_positional needs run.init (the directory it applies to)");
  if (c.phase == TrainPhase::kFinetune)
    need(c.scaling.type != RopeScalingType::kNone, "phase finetune needs scaling.type (pi, ntk, yarn, ...)");
  if (c.drop_at_step >= 0) need(c.phase == TrainPhase::kPretrain, "drope.drop_at_step is for phase pretrain");
  if (c.drop_at_step >= 0)
    need(
        c.train.shard == ShardMode::kNone,
        "drope.drop_at_step needs train.shard none (drop first, then recalibrate with phase drope and any shard mode)");
  number("scaling.factor", c.scaling.factor,
         c.scaling.type != RopeScalingType::kNone ? scaling_factor_range() : Interval::any());
}

}  // namespace

RunConfig parse_run_config(const YAML::Node& root, const std::string& source) {
  RunConfig c;
  c.source = source;
  YamlMap top(root, source, "");
  read_run(top.map("run"), c);
  if (top.has("model")) {
    c.has_model = true;
    c.model = parse_model_config(top.map("model"));
  } else {
    top.map("model");
  }
  read_drope(top.map("drope"), c);
  read_scaling(top.map("scaling"), c);
  read_data(top.map("data"), c.data);
  read_optim(top.map("optim"), c.optim);
  read_train(top.map("train"), c.train);
  c.schedule.steps = c.train.steps;
  read_schedule(top.map("schedule"), c.schedule);
  read_eval(top.map("eval"), c.eval);
  top.finish();
  check_run_config(c, source);
  check_eval(c, source);
  return c;
}

int64_t parse_activation_checkpointing(const std::string& value, const std::string& where) {
  if (value == "none") return 0;
  if (value == "full") return 1;
  int64_t k = 0;
  size_t i = 0;
  for (; i < value.size() && i < 7 && value[i] >= '0' && value[i] <= '9'; ++i) k = k * 10 + (value[i] - '0');
  if (i == 0 || i != value.size() || k < 1)
    fail("{}: expected none, full or a positive integer K (recompute every K-th decoder block), got '{}'", where,
         value);
  return k;
}

std::string activation_checkpointing_name(int64_t every) {
  return every == 0 ? "none" : every == 1 ? "full" : std::to_string(every);
}

RunConfig load_run_config(const std::string& path, const std::vector<std::string>& sets) {
  YAML::Node root = load_yaml_file(path);
  apply_overrides(root, sets, path);
  return parse_run_config(root, path);
}

std::string run_config_to_yaml(const RunConfig& c) {
  YAML::Emitter e;
  e << YAML::BeginMap;
  e << YAML::Key << "run" << YAML::Value << YAML::BeginMap << YAML::Key << "name" << YAML::Value << c.name << YAML::Key
    << "out_dir" << YAML::Value << c.out_dir << YAML::Key << "seed" << YAML::Value << c.seed << YAML::Key << "phase"
    << YAML::Value << std::string(name_of(c.phase)) << YAML::Key << "init" << YAML::Value << c.init;
  if (c.init_import.positional)
    e << YAML::Key << "init_positional" << YAML::Value << std::string(name_of(*c.init_import.positional));
  e << YAML::EndMap;
  if (c.has_model) e << YAML::Key << "model" << YAML::Value << YAML::Load(model_config_to_yaml(c.model));
  e << YAML::Key << "drope" << YAML::Value << YAML::BeginMap << YAML::Key << "qk_norm" << YAML::Value
    << std::string(name_of(c.drope_qk_norm)) << YAML::Key << "per_head" << YAML::Value << c.drope_per_head << YAML::Key
    << "drop_at_step" << YAML::Value << c.drop_at_step << YAML::EndMap;
  e << YAML::Key << "scaling" << YAML::Value << YAML::BeginMap << YAML::Key << "type" << YAML::Value
    << std::string(name_of(c.scaling.type)) << YAML::Key << "factor" << YAML::Value << c.scaling.factor << YAML::Key
    << "original_max_position" << YAML::Value << c.scaling.original_max_position << YAML::EndMap;
  e << YAML::Key << "data" << YAML::Value << YAML::BeginMap << YAML::Key << "dataset" << YAML::Value << c.data.dataset
    << YAML::Key << "text" << YAML::Value << c.data.text;
  if (!c.data.task.empty()) e << YAML::Key << "task" << YAML::Value << c.data.task;
  e << YAML::Key << "seq_len" << YAML::Value << c.data.seq_len << YAML::Key << "batch_size" << YAML::Value
    << c.data.batch_size << YAML::Key << "micro_batch" << YAML::Value << c.data.micro_batch << YAML::Key << "shuffle"
    << YAML::Value << c.data.shuffle << YAML::EndMap;
  e << YAML::Key << "optim" << YAML::Value << YAML::BeginMap << YAML::Key << "lr" << YAML::Value << c.optim.lr
    << YAML::Key << "betas" << YAML::Value << YAML::Flow << std::vector<double>{c.optim.beta1, c.optim.beta2}
    << YAML::Key << "eps" << YAML::Value << c.optim.eps << YAML::Key << "weight_decay" << YAML::Value
    << c.optim.weight_decay << YAML::Key << "decay_embeddings" << YAML::Value << c.optim.decay_embeddings << YAML::Key
    << "decay_norms_and_biases" << YAML::Value << c.optim.decay_norms_and_biases << YAML::Key << "fused" << YAML::Value
    << c.optim.fused << YAML::EndMap;
  e << YAML::Key << "schedule" << YAML::Value << YAML::BeginMap << YAML::Key << "type" << YAML::Value
    << std::string(name_of(c.schedule.type)) << YAML::Key << "warmup" << YAML::Value << c.schedule.warmup << YAML::Key
    << "steps" << YAML::Value << c.schedule.steps << YAML::Key << "min_lr_ratio" << YAML::Value
    << c.schedule.min_lr_ratio << YAML::Key << "decay_fraction" << YAML::Value << c.schedule.decay_fraction << YAML::Key
    << "decay_shape" << YAML::Value << std::string(name_of(c.schedule.decay_shape)) << YAML::EndMap;
  const auto& t = c.train;
  e << YAML::Key << "train" << YAML::Value << YAML::BeginMap << YAML::Key << "steps" << YAML::Value << t.steps
    << YAML::Key << "log_every" << YAML::Value << t.log_every << YAML::Key << "eval_every" << YAML::Value
    << t.eval_every << YAML::Key << "eval_batches" << YAML::Value << t.eval_batches << YAML::Key << "checkpoint_every"
    << YAML::Value << t.checkpoint_every << YAML::Key << "keep_last" << YAML::Value << t.keep_last << YAML::Key
    << "clip" << YAML::Value << t.clip << YAML::Key << "dtype" << YAML::Value << std::string(name_of(t.dtype))
    << YAML::Key << "device" << YAML::Value << std::string(name_of(t.device)) << YAML::Key << "peak_tflops"
    << YAML::Value << t.peak_tflops << YAML::Key << "dist_timeout_s" << YAML::Value << t.dist_timeout_s << YAML::Key
    << "allreduce_bucket_mb" << YAML::Value << t.allreduce_bucket_mb << YAML::Key << "max_bad_steps" << YAML::Value
    << t.max_bad_steps << YAML::Key << "chunked_loss" << YAML::Value << t.chunked_loss << YAML::Key << "fused_loss"
    << YAML::Value << t.fused_loss << YAML::Key << "cuda_graphs" << YAML::Value << t.cuda_graphs << YAML::Key << "shard"
    << YAML::Value << std::string(name_of(t.shard)) << YAML::Key << "activation_checkpointing" << YAML::Value
    << activation_checkpointing_name(t.activation_checkpointing) << YAML::Key << "tensorboard" << YAML::Value
    << t.tensorboard << YAML::EndMap;
  const auto& v = c.eval;
  e << YAML::Key << "eval" << YAML::Value << YAML::BeginMap << YAML::Key << "lengths" << YAML::Value << YAML::Flow
    << v.lengths << YAML::Key << "max_tokens" << YAML::Value << v.max_tokens << YAML::Key << "stride" << YAML::Value
    << v.stride << YAML::Key << "niah_lengths" << YAML::Value << YAML::Flow << v.niah_lengths << YAML::Key
    << "niah_task" << YAML::Value << v.niah_task << YAML::Key << "niah_trials" << YAML::Value << v.niah_trials
    << YAML::Key << "niah_max_new_tokens" << YAML::Value << v.niah_max_new_tokens << YAML::Key << "niah_seed"
    << YAML::Value << v.niah_seed << YAML::Key << "niah_haystack" << YAML::Value << v.niah_haystack << YAML::Key
    << "at_start" << YAML::Value << v.at_start << YAML::EndMap;
  e << YAML::EndMap;
  return std::string(e.c_str()) + "\n";
}

int64_t micro_batch_size(const RunConfig& c, int64_t world) {
  const int64_t B = c.data.batch_size;
  if (B % world != 0) fail("{}: data.batch_size {} is not a multiple of the world size {}", c.source, B, world);
  const int64_t micro = c.data.micro_batch > 0 ? c.data.micro_batch : B / world;
  if (micro < 1 || B % (micro * world) != 0)
    fail("{}: data.batch_size {} is not a multiple of micro_batch ({}) x world size ({})", c.source, B, micro, world);
  return micro;
}

}  // namespace drope::train
