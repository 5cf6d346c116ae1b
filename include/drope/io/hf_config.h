// HF config.json for Llama/Qwen2 models, read and written without LibTorch (drope_base).
#pragma once

#include <string>

#include "drope/config/model_config.h"

namespace drope::io {

// Parses an HF config.json (LlamaForCausalLM / Qwen2ForCausalLM, rope_parameters or legacy rope_scaling).
ModelConfig parse_hf_config(const std::string& json_text, const std::string& path);
// HF config.json text for a model that HF can express (throws otherwise).
std::string hf_config_json(const ModelConfig& cfg);

}  // namespace drope::io
