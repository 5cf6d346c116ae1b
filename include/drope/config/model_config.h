// Typed model configuration: architecture sizes, positional plan, QK-norm and long-context temperature.
// Loaded strictly from YAML (unknown keys and wrong types are errors naming file, line and key).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "drope/config/names.h"
#include "drope/core/yaml.h"

namespace drope {

// RoPE frequency scaling (docs/design.md#rope-scaling). One struct for every method; unused fields are ignored.
struct RopeScalingConfig {
  RopeScalingType type = RopeScalingType::kNone;
  double factor = 1.0;                // s = extension factor (scaling_factor_range())
  int64_t original_max_position = 0;  // L0; 0 means the model's max_position
  double beta_fast = 32.0;            // YaRN
  double beta_slow = 1.0;             // YaRN
  double attention_factor = 0.0;      // YaRN mscale; 0 means 0.1·ln(s) + 1
  bool truncate = true;               // YaRN: floor/ceil the correction range (HF default)
  double low_freq_factor = 1.0;       // llama3
  double high_freq_factor = 4.0;      // llama3
};

struct PositionalConfig {
  PositionalType type = PositionalType::kRope;
  double rope_theta = 10000.0;       // RoPE base θ
  int64_t window = 0;                // sliding window W (rnope-swa; 0 = full attention)
  RopeScalingConfig scaling;         // RoPE scaling method (eval-time baselines)
  std::vector<std::string> layers;   // optional per-layer plan: rope | nope | alibi | rope-swa | nope-swa
};

enum class PositionalKind { kRope, kNope, kAlibi };

// The resolved positional setting of one layer.
struct LayerPositional {
  PositionalKind kind = PositionalKind::kRope;
  int64_t window = 0;  // 0 = full causal attention
  bool operator==(const LayerPositional& o) const { return kind == o.kind && window == o.window; }
};

// The largest context a model config may declare (model.max_position), and so the largest training length.
constexpr int64_t kMaxPosition = int64_t{1} << 30;

struct ModelConfig {
  std::string arch = "llama";       // llama | qwen2 (HF architecture written on export)
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;         // GQA: num_heads % num_kv_heads == 0
  int64_t head_dim = 0;             // 0 = hidden_size / num_heads
  double rms_eps = 1e-6;
  bool tie_embeddings = true;       // LM head shares the embedding matrix
  bool attention_bias = false;      // q/k/v projection biases (Qwen2)
  bool attention_out_bias = false;  // o projection bias (Llama attention_bias=true)
  bool mlp_bias = false;            // gate/up/down biases (Llama mlp_bias)
  int64_t max_position = 1024;      // training context length C_train
  double init_std = 0.02;           // weights ~ N(0, init_std)
  PositionalConfig positional;
  QkNorm qk_norm = QkNorm::kNone;   // RMSNorm on the q and/or k projections (weight 1 at creation)
  bool qk_norm_per_head = false;    // false: norm over the whole projection (DroPE reference); true: per head
  double softmax_temperature = 0.0; // c in β = 1 + c·ln(s), s = length / max_position, applied when s > 1
  double softmax_scale = 0.0;  // constant logit scale in place of 1/√d_k (DroPE reference's softmax_scale); 0 = 1/√d_k
  int64_t bos_token_id = -1;  // -1: unset
  int64_t eos_token_id = -1;

  int64_t resolved_head_dim() const { return head_dim > 0 ? head_dim : hidden_size / num_heads; }
  // Positional setting per layer (RNoPE-SWA: RoPE+window when (i+1) % 4 != 0, else NoPE full).
  std::vector<LayerPositional> layer_plan() const;
  // True when every layer is plain RoPE with full attention and nothing HF Llama/Qwen2 cannot express.
  bool hf_expressible() const;
  // True when the biases fit an HF Llama (one attention_bias for q/k/v/o, no MLP bias) or Qwen2 (q/k/v only).
  bool hf_shape_expressible() const;
  // Parameters of a model of this shape (exact for the layers we build; computed without allocating, in
  // double so that absurd shapes do not overflow).
  double parameter_count() const;
  // Checks sizes and combinations; `source` names the config in messages.
  void validate(const std::string& source) const;
};

// Named presets: the paper's model shapes (docs/design.md#model) and tiny CPU models.
ModelConfig model_preset(const std::string& name);
std::vector<std::string> model_preset_names();

// Reads a `model:` mapping (optionally starting from `preset:`). Unknown keys are errors.
ModelConfig parse_model_config(YamlMap map);
// Loads a YAML file whose top level is either a model mapping or has a `model:` key.
ModelConfig load_model_config_file(const std::string& path);
// YAML text that parse_model_config reads back to the same config.
std::string model_config_to_yaml(const ModelConfig& cfg);

// Parses a positional layer name (rope, nope, alibi, rope-swa, nope-swa).
LayerPositional parse_layer_positional(const std::string& name, int64_t window, const std::string& where);

}  // namespace drope
