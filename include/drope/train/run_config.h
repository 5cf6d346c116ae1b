// The training run configuration (configs/*.yaml): strict YAML, `--set a.b=value` overrides, and the
// resolved config written next to the run's outputs. The fields below hold the values and their defaults; each
// key's reading, range, YAML spelling, resume rule and documentation is its row in the settings table
// (settings.h), which parse_run_config and run_config_to_yaml go through.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "drope/config/model_config.h"
#include "drope/io/model_io.h"
#include "drope/train/adamw.h"
#include "drope/train/lr_schedule.h"

namespace drope::train {

struct DataConfig {
  std::string dataset;           // directory written by `drope-data prepare` (index.json + shards)
  std::string text;              // or: a text file / directory read as bytes (vocab 256), split 90/10
  std::string task;              // or: a synthetic task's generated sequences (offset-key), seeded by run.seed
  int64_t seq_len = 256;         // tokens per training sequence
  int64_t batch_size = 16;       // global sequences per optimizer step (all ranks, all micro-steps)
  int64_t micro_batch = 0;       // sequences per rank per forward; 0 = batch_size / world (no accumulation)
  bool shuffle = true;           // deterministic shuffle of blocks per epoch
};

struct TrainLoopConfig {
  int64_t steps = 1000;          // optimizer steps of this phase
  int64_t log_every = 10;
  int64_t eval_every = 0;        // 0 = only at the end
  int64_t eval_batches = 8;      // validation sequences = eval_batches · micro_batch
  int64_t checkpoint_every = 0;  // 0 = only at the end
  int64_t keep_last = 3;         // checkpoints kept
  double clip = 1.0;             // gradient-norm clip (0 = off)
  TrainDType dtype = TrainDType::kFloat32;  // bfloat16: autocast of the forward on CPU or CUDA
  TrainDevice device = TrainDevice::kAuto;
  double peak_tflops = 0;        // for MFU; 0 = unknown (CPU)
  double dist_timeout_s = 300;   // collective timeout: a dead peer gives an error, not a hang
  double allreduce_bucket_mb = 25;  // gradient all-reduce bucket size (MiB), overlapped with backward
  int64_t max_bad_steps = 5;     // abort after this many non-finite (skipped) steps in a row
  bool chunked_loss = true;      // LM head + cross-entropy in row chunks (ops::linear_cross_entropy), no full logits
  bool fused_loss = true;        // each chunk's loss and logit gradient in one fused operation (ops/loss.h)
  bool cuda_graphs = false;      // capture forward + backward in a CUDA graph (CUDA, one rank; docs/gpu.md)
  ShardMode shard = ShardMode::kNone;  // none | optimizer | grads | params (ZeRO-1/2/3 over the data-parallel ranks)
  int64_t activation_checkpointing = 0;  // 0 none, 1 full (every block), K every K-th block recomputed in backward
  bool tensorboard = false;      // rank 0 also writes the log lines' scalars to a TensorBoard events file in out_dir
};

// Long-context probes at every validation (train.eval_every, the run's end, and its start): perplexity at each
// window length of `lengths` over the first max_tokens tokens of data.dataset's val split (drope-eval ppl's sliding
// windows), and with niah_lengths a small RULER NIAH probe (drope-eval niah's cells). Logged per length to
// log.jsonl / TensorBoard ("ppl@L", "niah_<task>@L") and drawn by `drope-train plot`.
struct EvalConfig {
  std::vector<int64_t> lengths;       // eval.lengths, e.g. [256, 512, 1024]; empty = no perplexity probe
  int64_t max_tokens = 16384;         // validation tokens scored per length
  int64_t stride = 256;               // sliding-window stride
  std::vector<int64_t> niah_lengths;  // NIAH target lengths; empty = no NIAH probe
  std::string niah_task = "single_1";  // one of RULER's eight (drope-eval niah --tasks)
  int64_t niah_trials = 4;            // samples per length
  int64_t niah_max_new_tokens = 32;   // generation budget (drope-eval niah --max-new-tokens)
  uint64_t niah_seed = 42;
  std::string niah_haystack;          // essay file or directory (default: drope-eval niah's)
  bool at_start = true;               // also probe the model a fresh run starts from (step 0)
  bool enabled() const { return !lengths.empty() || !niah_lengths.empty(); }
};

// "none" → 0, "full" → 1, an integer K >= 1 → K; anything else fails naming `where`.
int64_t parse_activation_checkpointing(const std::string& value, const std::string& where);
std::string activation_checkpointing_name(int64_t every);

struct RunConfig {
  std::string name = "run";
  std::string out_dir;                 // run directory (checkpoints, logs, resolved config)
  uint64_t seed = 0;
  TrainPhase phase = TrainPhase::kPretrain;
  std::string init;                    // checkpoint or HF directory to start from (drope / finetune)
  io::ImportOptions init_import;       // run.init_positional: rope | nope override of the init directory's config
  bool has_model = false;              // a `model:` section was given
  ModelConfig model;                   // pretrain: the architecture (ignored when `init` is set)
  QkNorm drope_qk_norm = QkNorm::kNone;  // drope phase / drop_at_step
  bool drope_per_head = false;
  int64_t drop_at_step = -1;           // pretrain: drop positional embeddings at this step (paper Table 7)
  RopeScalingConfig scaling;           // finetune: RoPE scaling applied to the initial model
  DataConfig data;
  AdamWConfig optim;
  ScheduleConfig schedule;             // schedule.steps defaults to train.steps
  TrainLoopConfig train;
  EvalConfig eval;
  std::string source;                  // file the config came from
};

// Applies "a.b.c=value" overrides (YAML scalars or flow collections) to a parsed document.
void apply_overrides(YAML::Node& root, const std::vector<std::string>& sets, const std::string& source);
// Parses and validates a run config (strict: unknown keys, wrong types, bad combinations are errors).
RunConfig parse_run_config(const YAML::Node& root, const std::string& source);
RunConfig load_run_config(const std::string& path, const std::vector<std::string>& sets = {});
// YAML that parse_run_config reads back to the same config.
std::string run_config_to_yaml(const RunConfig& c);

// Sequences per rank per forward for `world` ranks: data.micro_batch, or data.batch_size / world. Fails naming
// the config when data.batch_size is not a multiple of the world size, or of micro_batch x world size
// (batch = accumulation x micro x world). The trainer and `drope-train --plan` both size batches with it.
int64_t micro_batch_size(const RunConfig& c, int64_t world);

}  // namespace drope::train
