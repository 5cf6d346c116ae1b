#include "drope/train/settings.h"

#include <fmt/format.h>

#include <cmath>
#include <map>
#include <type_traits>
#include <utility>

#include "drope/config/names.h"
#include "drope/core/error.h"

namespace drope::train {

namespace {

// A bound as written in messages and docs: an integer when it is one, else the shortest form.
std::string bound(double v) {
  if (std::abs(v) < 9e15 && v == std::floor(v)) return fmt::format("{}", static_cast<int64_t>(v));
  return fmt::format("{:g}", v);
}

}  // namespace

std::string range_text(const Interval& r) {
  const bool lo = std::isfinite(r.lo), hi = std::isfinite(r.hi);
  if (lo && !hi) return fmt::format("{} {}", r.lo_open ? ">" : ">=", bound(r.lo));
  if (!lo && hi) return fmt::format("{} {}", r.hi_open ? "<" : "<=", bound(r.hi));
  if (!lo && !hi) return "";
  return fmt::format("{}{}, {}{}", r.lo_open ? "(" : "[", bound(r.lo), bound(r.hi), r.hi_open ? ")" : "]");
}

namespace {

// The field a row reads and writes, for a RunConfig and a const RunConfig alike.
#define DROPE_FIELD(member) [](auto& c) -> auto& { return c.member; }

// "in [2, 4096]" or ">= 1": what an integer must be, for messages.
std::string int_range_message(const Interval& r) {
  const std::string t = range_text(r);
  return t[0] == '[' || t[0] == '(' ? "in " + t : t;
}

void check_range(int64_t v, const std::string& key, const Interval& r, const std::string& source) {
  if (!r.contains(static_cast<double>(v))) fail("{}: {} must be {}, got {}", source, key, int_range_message(r), v);
}

void check_range(double v, const std::string& key, const Interval& r, const std::string& source) {
  check_number(v, fmt::format("{}: {}", source, key), r);
}

// A list of sequence lengths: each inside the range, none given twice.
void check_range(const std::vector<int64_t>& list, const std::string& key, const Interval& r,
                 const std::string& source) {
  for (size_t i = 0; i < list.size(); ++i) {
    if (!r.contains(static_cast<double>(list[i])))
      fail("{}: {}: each length must be {}, got {}", source, key, int_range_message(r), list[i]);
    for (size_t j = 0; j < i; ++j)
      if (list[j] == list[i]) fail("{}: {}: length {} is given twice", source, key, list[i]);
  }
}

template <class T>
const char* type_name() {
  if constexpr (std::is_same_v<T, int64_t>) return "integer";
  else if constexpr (std::is_same_v<T, double>) return "number";
  else if constexpr (std::is_same_v<T, bool>) return "bool";
  else if constexpr (std::is_same_v<T, std::string>) return "string";
  else return "lengths";  // std::vector<int64_t>
}

Setting row(std::string key, const char* type, OnResume resume, std::string doc) {
  Setting s;
  s.key = std::move(key);
  s.type = type;
  s.resume = resume;
  s.doc = std::move(doc);
  return s;
}

// A value YamlMap reads directly (integer, number, bool, string, list of lengths), with an optional range.
template <class Get>
Setting field(std::string key, Get get, OnResume resume, std::string doc, std::optional<Interval> range = {}) {
  using T = std::decay_t<decltype(get(std::declval<RunConfig&>()))>;
  Setting s = row(std::move(key), type_name<T>(), resume, std::move(doc));
  s.range = range;
  s.read = [get](YamlMap& m, const std::string& name, RunConfig& c) { return m.get(name, get(c)); };
  s.emit = [get](YAML::Emitter& e, const RunConfig& c) {
    if constexpr (std::is_same_v<T, std::vector<int64_t>>) e << YAML::Flow << get(c);
    else e << get(c);
  };
  if constexpr (!std::is_same_v<T, bool> && !std::is_same_v<T, std::string>)
    if (range)
      s.check = [get, key = s.key, r = *range](const RunConfig& c, const std::string& source) {
        check_range(get(c), key, r, source);
      };
  return s;
}

// A path: a file or directory the run reads or writes (compared by the file it names on resume).
template <class Get>
Setting path(std::string key, Get get, OnResume resume, std::string doc) {
  Setting s = field(std::move(key), get, resume, std::move(doc));
  s.type = "path";
  return s;
}

// A seed: a non-negative integer stored unsigned.
template <class Get>
Setting seed(std::string key, Get get, OnResume resume, std::string doc) {
  Setting s = row(std::move(key), "integer", resume, std::move(doc));
  s.range = Interval::at_least(0);
  s.read = [get, key = s.key](YamlMap& m, const std::string& name, RunConfig& c) {
    int64_t v = 0;
    if (!m.get(name, v)) return false;
    if (v < 0) fail("{}: {} must be >= 0", m.where(name), key);
    get(c) = static_cast<uint64_t>(v);
    return true;
  };
  s.emit = [get](YAML::Emitter& e, const RunConfig& c) { e << get(c); };
  return s;
}

std::string choices_of(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : " | ") + n;
  return out;
}

// One of an enum's names (its NameTable).
template <class Get>
Setting named(std::string key, Get get, OnResume resume, std::string doc) {
  using E = std::decay_t<decltype(get(std::declval<RunConfig&>()))>;
  Setting s = row(std::move(key), "name", resume, std::move(doc));
  s.choices = choices_of(names_of<E>());
  s.read = [get](YamlMap& m, const std::string& name, RunConfig& c) { return get_name(m, name, get(c)); };
  s.emit = [get](YAML::Emitter& e, const RunConfig& c) { e << std::string(name_of(get(c))); };
  return s;
}

Setting init_positional() {
  Setting s = row("run.init_positional", "name", OnResume::kFixed,
                  "override of run.init's positional encoding (a RoPE-less model saved as plain Llama: "
                  "docs/formats.md#imported-configjson-formats)");
  s.choices = "rope | nope";
  s.default_note = "the directory's";
  s.read = [](YamlMap& m, const std::string& name, RunConfig& c) {
    PositionalType p = PositionalType::kRope;
    if (!get_name(m, name, p)) return false;
    io::check_import_positional(p, m.where(name));
    c.init_import.positional = p;
    return true;
  };
  s.emit = [](YAML::Emitter& e, const RunConfig& c) { e << std::string(name_of(*c.init_import.positional)); };
  s.omitted = [](const RunConfig& c) { return !c.init_import.positional; };
  return s;
}

Setting data_task() {
  Setting s = row("data.task", "name", OnResume::kFixed,
                  "or generated sequences of seq_len + 1 tokens seeded by run.seed, loss on the answers only, a "
                  "held-out split for validation (docs/evaluation.md)");
  s.choices = "offset-key";
  s.read = [](YamlMap& m, const std::string& name, RunConfig& c) {
    return m.get_choice(name, c.data.task, {"offset-key"});
  };
  s.emit = [](YAML::Emitter& e, const RunConfig& c) { e << c.data.task; };
  s.omitted = [](const RunConfig& c) { return c.data.task.empty(); };
  return s;
}

Setting betas() {
  Setting s = row("optim.betas", "[number, number]", OnResume::kFixed, "AdamW's beta1 and beta2");
  s.range = Interval::half_open(0, 1);
  s.read = [](YamlMap& m, const std::string& name, RunConfig& c) {
    std::vector<double> b;
    if (!m.get(name, b)) return false;
    if (b.size() != 2) fail("{}: expected [beta1, beta2]", m.where(name));
    c.optim.beta1 = b[0];
    c.optim.beta2 = b[1];
    return true;
  };
  s.emit = [](YAML::Emitter& e, const RunConfig& c) {
    e << YAML::Flow << std::vector<double>{c.optim.beta1, c.optim.beta2};
  };
  s.check = [r = *s.range](const RunConfig& c, const std::string& source) {
    check_range(c.optim.beta1, "optim.betas[0]", r, source);
    check_range(c.optim.beta2, "optim.betas[1]", r, source);
  };
  return s;
}

Setting activation_checkpointing() {
  Setting s = row("train.activation_checkpointing", "name or integer", OnResume::kSameStep,
                  "recompute decoder blocks in backward: none, full (every block) or every K-th block");
  s.choices = "none | full | K";
  s.read = [](YamlMap& m, const std::string& name, RunConfig& c) {
    std::string v;
    if (!m.get(name, v)) return false;
    c.train.activation_checkpointing = parse_activation_checkpointing(v, m.where(name));
    return true;
  };
  s.emit = [](YAML::Emitter& e, const RunConfig& c) {
    e << activation_checkpointing_name(c.train.activation_checkpointing);
  };
  return s;
}

Setting scaling_factor() {
  Setting s = field("scaling.factor", DROPE_FIELD(scaling.factor), OnResume::kFixed,
                    "the extension factor s (with scaling.type)");
  s.range = scaling_factor_range();
  s.check = [](const RunConfig& c, const std::string& source) {
    check_range(c.scaling.factor, "scaling.factor",
                c.scaling.type != RopeScalingType::kNone ? scaling_factor_range() : Interval::any(), source);
  };
  return s;
}

constexpr int64_t kMaxBatch = int64_t{1} << 24;
constexpr int64_t kMaxProbeLength = int64_t{1} << 22;

void add_run_rows(std::vector<Setting>& t) {
  using R = OnResume;
  t.push_back(field("run.name", DROPE_FIELD(name), R::kReports, "the run's name (console and log lines)"));
  t.push_back(path("run.out_dir", DROPE_FIELD(out_dir), R::kReports,
                   "run directory: checkpoints, log.jsonl, config.yaml (required)"));
  t.back().default_note = "required";
  t.push_back(seed("run.seed", DROPE_FIELD(seed), R::kFixed,
                   "seed of the initial weights, the data order and data.task's sequences"));
  t.push_back(named("run.phase", DROPE_FIELD(phase), R::kFixed,
                    "pretraining, DroPE recalibration or RoPE-scaling fine-tuning"));
  t.push_back(path("run.init", DROPE_FIELD(init), R::kSameFile,
                   "checkpoint or HF directory to start from (required for drope and finetune)"));
  t.push_back(init_positional());
  t.push_back(named("drope.qk_norm", DROPE_FIELD(drope_qk_norm), R::kDropAhead,
                    "QK-norm added where the positional embeddings are dropped (phase drope, drop_at_step)"));
  t.push_back(field("drope.per_head", DROPE_FIELD(drope_per_head), R::kDropAhead,
                    "that QK-norm per head (Qwen3 style) instead of over the whole projection"));
  t.push_back(field("drope.drop_at_step", DROPE_FIELD(drop_at_step), R::kDropAhead,
                    "pretrain: drop the positional embeddings at this step (paper Table 7); -1 = never"));
  t.push_back(named("scaling.type", DROPE_FIELD(scaling.type), R::kFixed,
                    "finetune: the RoPE scaling applied to the initial model (required there)"));
  t.push_back(scaling_factor());
  t.push_back(field("scaling.original_max_position", DROPE_FIELD(scaling.original_max_position), R::kFixed,
                    "L0, the length trained so far; 0 = the model's max_position"));
}

void add_data_rows(std::vector<Setting>& t) {
  using R = OnResume;
  t.push_back(path("data.dataset", DROPE_FIELD(data.dataset), R::kSameFile,
                   "a `drope-data prepare` directory (index.json + shards); one of dataset, text or task"));
  t.push_back(path("data.text", DROPE_FIELD(data.text), R::kSameFile,
                   "or a text file or directory read as bytes (vocab 256, split 90/10, held in memory; refused "
                   "when larger than the memory available)"));
  t.push_back(data_task());
  t.push_back(field("data.seq_len", DROPE_FIELD(data.seq_len), R::kFixed, "tokens per training sequence",
                    Interval::closed(1, kMaxBatch)));
  t.push_back(field("data.batch_size", DROPE_FIELD(data.batch_size), R::kFixed,
                    "global sequences per optimizer step (all ranks, all micro-steps)",
                    Interval::closed(1, kMaxBatch)));
  t.push_back(field("data.micro_batch", DROPE_FIELD(data.micro_batch), R::kSameStep,
                    "sequences per rank per forward, at most batch_size; 0 = batch_size / world size (no "
                    "accumulation)",
                    Interval::closed(0, kMaxBatch)));
  t.push_back(field("data.shuffle", DROPE_FIELD(data.shuffle), R::kFixed, "deterministic shuffle of the blocks"));
}

void add_optim_rows(std::vector<Setting>& t) {
  using R = OnResume;
  t.push_back(field("optim.lr", DROPE_FIELD(optim.lr), R::kSameLr, "AdamW's peak learning rate", Interval::positive()));
  t.push_back(betas());
  t.push_back(field("optim.eps", DROPE_FIELD(optim.eps), R::kFixed, "AdamW's epsilon", Interval::positive()));
  t.push_back(field("optim.weight_decay", DROPE_FIELD(optim.weight_decay), R::kFixed,
                    "decoupled weight decay, applied to matrices only", Interval::non_negative()));
  t.push_back(
      field("optim.decay_embeddings", DROPE_FIELD(optim.decay_embeddings), R::kFixed, "also decay the embeddings"));
  t.push_back(field("optim.decay_norms_and_biases", DROPE_FIELD(optim.decay_norms_and_biases), R::kFixed,
                    "also decay norm weights and biases"));
  t.push_back(field("optim.fused", DROPE_FIELD(optim.fused), R::kSameStep,
                    "LibTorch's fused AdamW kernel where it applies (within one float32 ulp of the separate ops)"));
  t.push_back(named("schedule.type", DROPE_FIELD(schedule.type), R::kSameLr, "the learning-rate schedule"));
  t.push_back(field("schedule.warmup", DROPE_FIELD(schedule.warmup), R::kSameLr,
                    "linear warmup steps from lr / warmup to lr", Interval::at_least(0)));
  t.push_back(field("schedule.steps", DROPE_FIELD(schedule.steps), R::kSameLr, "steps the schedule spans",
                    Interval::at_least(1)));
  t.back().default_note = "= train.steps";
  t.push_back(field("schedule.min_lr_ratio", DROPE_FIELD(schedule.min_lr_ratio), R::kSameLr,
                    "cosine and wsd: the floor as a fraction of optim.lr", Interval::closed(0, 1)));
  t.push_back(field("schedule.decay_fraction", DROPE_FIELD(schedule.decay_fraction), R::kSameLr,
                    "wsd: the final fraction of the steps spent decaying", Interval{0, 1, true, false}));
  t.push_back(named("schedule.decay_shape", DROPE_FIELD(schedule.decay_shape), R::kSameLr,
                    "wsd: the decay from lr to the floor (half a cosine, or a line)"));
}

void add_train_rows(std::vector<Setting>& t) {
  using R = OnResume;
  const auto ge = [](double lo) { return Interval::at_least(lo); };
  t.push_back(field("train.steps", DROPE_FIELD(train.steps), R::kReports, "optimizer steps of this phase", ge(1)));
  t.push_back(field("train.log_every", DROPE_FIELD(train.log_every), R::kReports, "steps between log lines", ge(1)));
  t.push_back(field("train.eval_every", DROPE_FIELD(train.eval_every), R::kReports,
                    "steps between validations; 0 = only at the end", ge(0)));
  t.push_back(field("train.eval_batches", DROPE_FIELD(train.eval_batches), R::kReports,
                    "validation sequences = eval_batches x micro-batch", ge(1)));
  t.push_back(field("train.checkpoint_every", DROPE_FIELD(train.checkpoint_every), R::kReports,
                    "steps between checkpoints; 0 = only at the end", ge(0)));
  t.push_back(field("train.keep_last", DROPE_FIELD(train.keep_last), R::kReports, "checkpoints kept", ge(1)));
  t.push_back(field("train.clip", DROPE_FIELD(train.clip), R::kFixed, "gradient-norm clip; 0 = off", ge(0)));
  t.push_back(
      named("train.dtype", DROPE_FIELD(train.dtype), R::kFixed, "bfloat16: autocast of the forward on CPU or CUDA"));
  t.push_back(named("train.device", DROPE_FIELD(train.device), R::kSameStep, "auto: CUDA when there is one"));
  t.push_back(field("train.peak_tflops", DROPE_FIELD(train.peak_tflops), R::kReports,
                    "the device's peak, for the logged MFU; 0 = unknown", ge(0)));
  t.push_back(field("train.dist_timeout_s", DROPE_FIELD(train.dist_timeout_s), R::kReports,
                    "collective timeout: a dead or hung rank gives an error, not a hang", Interval::positive()));
  t.push_back(field("train.allreduce_bucket_mb", DROPE_FIELD(train.allreduce_bucket_mb), R::kSameStep,
                    "gradient all-reduce bucket size (MiB), overlapped with backward",
                    Interval{0, 1 << 20, true, false}));
  t.push_back(field("train.max_bad_steps", DROPE_FIELD(train.max_bad_steps), R::kReports,
                    "abort after this many non-finite (skipped) steps in a row", ge(1)));
  t.push_back(field("train.chunked_loss", DROPE_FIELD(train.chunked_loss), R::kSameStep,
                    "LM head + cross-entropy in row chunks, without the full logits"));
  t.push_back(field("train.fused_loss", DROPE_FIELD(train.fused_loss), R::kSameStep,
                    "each chunk's loss and logit gradient in one fused operation"));
  t.push_back(field("train.cuda_graphs", DROPE_FIELD(train.cuda_graphs), R::kSameStep,
                    "capture forward and backward in a CUDA graph: CUDA, one rank, chunked_loss false, no "
                    "accumulation, sharding or activation checkpointing (docs/gpu.md)"));
  t.push_back(named("train.shard", DROPE_FIELD(train.shard), R::kSameStep,
                    "what the data-parallel ranks split (ZeRO-1/2/3; below)"));
  t.push_back(activation_checkpointing());
  t.push_back(field("train.tensorboard", DROPE_FIELD(train.tensorboard), R::kReports,
                    "rank 0 also writes the log's scalars as TensorBoard events in run.out_dir"));
}

void add_eval_rows(std::vector<Setting>& t) {
  using R = OnResume;
  const Interval lengths = Interval::closed(2, kMaxProbeLength);
  t.push_back(field("eval.lengths", DROPE_FIELD(eval.lengths), R::kReports,
                    "perplexity probe's window lengths, e.g. [256, 512, 1024]; [] = none (needs data.dataset)",
                    lengths));
  t.push_back(field("eval.max_tokens", DROPE_FIELD(eval.max_tokens), R::kReports, "validation tokens scored per length",
                    Interval::closed(2, int64_t{1} << 26)));
  t.push_back(field("eval.stride", DROPE_FIELD(eval.stride), R::kReports, "sliding-window stride",
                    Interval::closed(1, kMaxProbeLength)));
  t.push_back(field("eval.niah_lengths", DROPE_FIELD(eval.niah_lengths), R::kReports,
                    "NIAH probe's target lengths; [] = none (needs data.dataset, not train.shard params)", lengths));
  t.push_back(field("eval.niah_task", DROPE_FIELD(eval.niah_task), R::kReports,
                    "one of RULER's eight tasks (drope-eval niah --tasks)"));
  t.push_back(field("eval.niah_trials", DROPE_FIELD(eval.niah_trials), R::kReports, "samples per length",
                    Interval::closed(1, 4096)));
  t.push_back(field("eval.niah_max_new_tokens", DROPE_FIELD(eval.niah_max_new_tokens), R::kReports,
                    "generation budget (drope-eval niah --max-new-tokens)", Interval::closed(1, 4096)));
  t.push_back(seed("eval.niah_seed", DROPE_FIELD(eval.niah_seed), R::kReports, "seed of the NIAH samples"));
  t.push_back(path("eval.niah_haystack", DROPE_FIELD(eval.niah_haystack), R::kReports,
                   "essay file or directory of the haystack"));
  t.back().default_note = "drope-eval niah's";
  t.push_back(field("eval.at_start", DROPE_FIELD(eval.at_start), R::kReports,
                    "also probe the model a fresh run starts from (step 0)"));
}

#undef DROPE_FIELD

std::vector<Setting> make_settings() {
  std::vector<Setting> t;
  add_run_rows(t);
  add_data_rows(t);
  add_optim_rows(t);
  add_train_rows(t);
  add_eval_rows(t);
  return t;
}

}  // namespace

const std::vector<Setting>& run_settings() {
  static const std::vector<Setting> table = make_settings();
  return table;
}

const std::vector<std::string>& setting_sections() {
  static const std::vector<std::string> sections = {"run",   "model",    "drope", "scaling", "data",
                                                    "optim", "schedule", "train", "eval"};
  return sections;
}

const Setting* find_setting(const std::string& key) {
  static const std::map<std::string, const Setting*> index = [] {
    std::map<std::string, const Setting*> m;
    for (const auto& s : run_settings()) m[s.key] = &s;
    return m;
  }();
  const auto it = index.find(key);
  return it == index.end() ? nullptr : it->second;
}

OnResume resume_rule(const std::string& key) {
  const Setting* s = find_setting(key);
  return s ? s->resume : OnResume::kFixed;
}

std::string setting_value(const Setting& s, const RunConfig& c) {
  YAML::Emitter e;
  s.emit(e, c);
  return e.c_str();
}

}  // namespace drope::train
