// The analyses behind drope-analyze's subcommands, as library calls: each takes its options, validates them
// before any model is loaded, prints its summary and writes its files (JSON, CSV, PNG, SVG; "wrote PATH" on
// stderr). drope-analyze only parses flags into these structs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "drope/config/model_config.h"

namespace drope::analyze {

// rope-scaling: the scaled RoPE frequencies γ_m as JSON on stdout; with `out` also rope_scaling.{csv,png,svg}
// (paper Figure 6: PI, NTK and YaRN, and `type`, per factor).
struct RopeScalingRun {
  std::string type = "none";         // the method of the JSON output (a RopeScalingType name)
  std::vector<double> factors;       // extension factors s; default 2, 3, 4
  double theta = 10000.0;            // RoPE base θ
  int64_t head_dim = 64;             // d
  int64_t train_length = 2048;       // original context length L0
  int64_t seq_len = 0;               // current length for the dynamic methods; 0 = train_length
  RopeScalingConfig scaling;         // YaRN β_fast / β_slow (type and factor are set from the fields above)
  std::string out;                   // directory; empty = JSON only
};
void run_rope_scaling(const RopeScalingRun& r);

// bias-grad: gradients of the attention positional bias A^c at initialisation (paper Figure 3) for each
// model; without models and configs, `preset` (default tiny) with RoPE and with NoPE.
struct BiasGradRun {
  std::vector<std::string> models;   // model directories; seeds vary only the inputs
  std::vector<std::string> configs;  // model YAML files, initialised once per seed
  std::string preset;
  int64_t seqs = 8, seeds = 3, seq_len = 128;
  std::string text;                  // text file: byte-level token windows instead of random tokens
  std::string out;                   // directory for bias_grad.{json,csv,png,svg}
};
void run_bias_grad(const BiasGradRun& r);

// One model from exactly one of a model directory, a model YAML or a preset (default tiny); configs and
// presets are initialised with `seed`.
struct ModelChoice {
  std::string dir, config, preset;
  std::string positional;            // positional type for a preset
  uint64_t seed = 0;
};

// constant-seq: Proposition 3.1 on a sequence of one repeated token, in float64.
struct ConstantSeqRun {
  ModelChoice model;
  int64_t token = 5, seq_len = 32;
  std::string out;                   // directory for constant_seq.json; empty = print only
};
void run_constant_seq(const ConstantSeqRun& r);

// attention: a heatmap of one head's attention map for a prompt (a text file as bytes, or token ids).
struct AttentionMapRun {
  ModelChoice model;
  std::string text;                  // prompt as a text file (byte-level tokens), or
  std::string tokens;                // a JSON list of token-id lists (the first is used)
  int64_t max_tokens = 64;
  int64_t layer = -1, head = -1;
  bool log_color = false;            // colour by log10(α)
  std::string out;                   // directory for attention_L<layer>_H<head>.{png,svg,json}
};
void run_attention_map(const AttentionMapRun& r);

// head-scores: previous-token and first-token attention of every layer × head (analyze/head_scores.h) over
// token lists, or over the offset-key task's own sequences, which adds what the answer position (SEP) and the
// query marker attend to.
struct HeadScoresRun {
  ModelChoice model;
  std::string tokens;                // a JSON list of equally long token-id lists, or
  std::string task;                  // "offset-key": sequences of tasks/offset_key.h
  int64_t length = 0;                // offset-key sequence length; 0 = the model's max_position
  int64_t sequences = 64;            // offset-key sequences
  std::string split = "heldout";     // their index split: heldout | test
  uint64_t task_seed = 42;           // their generator seed (drope-eval offset-key's default)
  int64_t batch = 16;                // rows per forward
  std::string out;                   // directory for head_scores.{json,csv}; with task also sequences.json
};
void run_head_scores(const HeadScoresRun& r);

// needle-attention: where the last query attends around a needle, per model and method (paper Figures 7–8).
struct NeedleAttentionRun {
  std::vector<std::string> models;
  std::vector<std::string> methods{"none"};  // parse_variant specs (model/variant.h)
  std::string tokenizer;             // default: the model directory's; byte tokens if it has none
  std::string haystack = "/usr/share/common-licenses/GPL-3";
  int64_t length = 0;                // prompt tokens; 0 = 2 × the model's training length
  int64_t window = 32;               // keys shown on each side of the needle
  double depth = 50;                 // needle depth in % of the haystack
  uint64_t seed = 0;                 // the needle's key and value
  std::string out;                   // directory for needle_attention.{png,svg,json,csv}
};
void run_needle_attention(const NeedleAttentionRun& r);

// Whether a command writes a file of this name into its --out directory: the outputs above (tables, JSON, and
// each figure as .png and .svg). The CLI refuses an input that lies in --out under such a name, which the run
// would write over; writing a name not listed here is a programming error (std::logic_error).
bool is_output_name(const std::string& name);

}  // namespace drope::analyze
