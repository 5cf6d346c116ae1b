#include "drope/train/run_config.h"

#include <fmt/format.h>

#include "drope/core/error.h"
#include "drope/tasks/niah.h"
#include "drope/tasks/offset_key.h"
#include "drope/train/settings.h"

namespace drope::train {

namespace {
// Sets parent[key] to value in this place only. yaml-cpp gives an alias the node of its anchor, and assigning
// to an existing node rebinds every name of it: `seq_len: *n` beside `max_position: &n 256` would have
// `--set data.seq_len=512` change model.max_position too. Removing the key first makes a fresh node.
YAML::Node set_here(YAML::Node parent, const std::string& key, const YAML::Node& value) {
  parent.remove(key);
  parent[key] = value;
  return parent[key];
}
}  // namespace

void apply_overrides(YAML::Node& root, const std::vector<std::string>& sets, const std::string& source) {
  for (const auto& s : sets) {
    const auto eq = s.find('=');
    if (eq == std::string::npos || eq == 0) fail("--set '{}': expected key.path=value", s);
    const std::string path = s.substr(0, eq), value = s.substr(eq + 1);
    // The same strict reading as a file (one document, UTF-8, no repeated keys).
    YAML::Node parsed = parse_yaml(value, fmt::format("--set '{}': value", s));
    // Null is no key's value, but a section's: `--set train=` would drop the file's train section without a word.
    if (parsed.IsNull()) fail("--set '{}': no value after '=' (null); expected {}=VALUE", s, path);
    std::vector<std::string> keys;
    size_t start = 0;
    while (true) {
      auto dot = path.find('.', start);
      keys.push_back(path.substr(start, dot - start));
      if (keys.back().empty()) fail("--set '{}': empty key in '{}'; expected key.path=value", s, path);
      if (dot == std::string::npos) break;
      start = dot + 1;
    }
    if (!root.IsMap() && !root.IsNull()) fail("{}: top level must be a mapping to apply --set {}", source, s);
    // Walk with fresh handles: yaml-cpp node assignment rebinds, so keep the chain explicit.
    std::vector<YAML::Node> chain{root};
    // Each mapping on the path is replaced by a copy of its own, so that no alias of it sees the change.
    for (size_t i = 0; i + 1 < keys.size(); ++i) {
      YAML::Node next = chain.back()[keys[i]];
      if (next.IsDefined() && !next.IsNull() && !next.IsMap())
        fail("--set '{}': '{}' is not a mapping in {}", s, keys[i], source);
      const bool fresh = !next.IsDefined() || next.IsNull();
      chain.push_back(set_here(chain.back(), keys[i], fresh ? YAML::Node(YAML::NodeType::Map) : YAML::Clone(next)));
    }
    set_here(chain.back(), keys.back(), parsed);
  }
}

namespace {

// eval.*: a known NIAH task, a token dataset to read the val split and tokenizer from (ranges: the settings table).
void check_eval(const RunConfig& c, const std::string& source) {
  const EvalConfig& e = c.eval;
  auto need = [&](bool ok, const std::string& what) {
    if (!ok) fail("{}: {}", source, what);
  };
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
  need(c.schedule.warmup >= 0 && c.schedule.steps > 0, "schedule.warmup must be >= 0, schedule.steps > 0");
  // One-key ranges (numbers finite and in range, drope/core/numbers.h): the settings table's.
  for (const auto& s : run_settings())
    if (s.check) s.check(c, source);
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
}

}  // namespace

RunConfig parse_run_config(const YAML::Node& root, const std::string& source) {
  RunConfig c;
  c.source = source;
  YamlMap top(root, source, "");
  bool schedule_steps_given = false;
  for (const auto& section : setting_sections()) {
    if (section == "model") {
      c.has_model = top.has("model");
      YamlMap m = top.map("model");
      if (c.has_model) c.model = parse_model_config(m);
      continue;
    }
    YamlMap m = top.map(section);
    for (const auto& s : run_settings())
      if (s.section() == section && s.read(m, s.name(), c) && s.key == "schedule.steps") schedule_steps_given = true;
    m.finish();
  }
  if (!schedule_steps_given) c.schedule.steps = c.train.steps;
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
  for (const auto& section : setting_sections()) {
    if (section == "model") {
      if (c.has_model) e << YAML::Key << "model" << YAML::Value << YAML::Load(model_config_to_yaml(c.model));
      continue;
    }
    e << YAML::Key << section << YAML::Value << YAML::BeginMap;
    for (const auto& s : run_settings()) {
      if (s.section() != section || (s.omitted && s.omitted(c))) continue;
      e << YAML::Key << s.name() << YAML::Value;
      s.emit(e, c);
    }
    e << YAML::EndMap;
  }
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
