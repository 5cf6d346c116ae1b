// HF config.json for Llama/Qwen2 models, the DroPE authors' llama_drope / qwen2_drope configs and SmolLM3's
// per-layer NoPE, read and written without LibTorch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "drope/config/model_config.h"

namespace drope::io {

// A stored per-layer tensor that the imported model does not use (the DroPE reference's q-only / k-only
// variants keep the other norm's weight): tolerated with one warning, never loaded.
struct UnusedTensor {
  std::string suffix;  // name inside a layer: "self_attn.k_norm.weight" (model.layers.<i>.<suffix>)
  int64_t size = 0;    // its one dimension
};

// A config.json read into our config, with what its format says about the weight files.
struct HfImport {
  ModelConfig config;
  std::string model_type;             // as written: llama, qwen2, llama_drope, qwen2_drope or smollm3
  std::vector<UnusedTensor> unused;   // per-layer tensors that may be stored but are not used
  std::string unused_reason;          // why (for the warning): "attention_type q_norm_nope normalises only q"
};

// Parses an HF config.json: model_type llama / qwen2 (rope_parameters or legacy rope_scaling), llama_drope /
// qwen2_drope (the DroPE authors' format: NoPE everywhere, attention_type, optional softmax_scale) or smollm3
// (no_rope_layers, sliding-window layer types). Every error names `path` and the key.
HfImport import_hf_config(const std::string& json_text, const std::string& path);
// import_hf_config(...).config.
ModelConfig parse_hf_config(const std::string& json_text, const std::string& path);
// HF config.json text for a model that HF can express (throws otherwise).
std::string hf_config_json(const ModelConfig& cfg);

// The DroPE authors' config.json (model_type llama_drope / qwen2_drope) for `cfg`; fails, naming what is in
// the way, when the format cannot express the model (a RoPE/ALiBi layer, a window, per-head QK-norm, a
// long-context temperature).
std::string drope_reference_config_json(const ModelConfig& cfg);
// The per-layer tensors that format stores beyond our parameters: the unused norm of the q-only / k-only
// variants (weight 1, as the authors' code creates it).
std::vector<UnusedTensor> drope_reference_extra_tensors(const ModelConfig& cfg);

}  // namespace drope::io
