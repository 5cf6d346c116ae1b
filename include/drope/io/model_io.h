// Model directories: HF Llama/Qwen2 (`config.json` + `model.safetensors` or a sharded index) and our
// own (`drope.yaml` + the same HF-named safetensors). Import, export and strict weight loading.
#pragma once

#include <string>

#include <ATen/ATen.h>

#include "drope/config/model_config.h"
#include "drope/io/hf_config.h"
#include "drope/model/transformer.h"

namespace drope::io {

// The config of a model directory: drope.yaml when present, else config.json.
ModelConfig load_model_config_dir(const std::string& dir);

// Loads weights by HF name into `model` (converted to the model's dtype). Every parameter must be
// present with the right shape; unknown tensors are errors (rotary inv_freq buffers are ignored).
void load_weights(DecoderLM& model, const std::string& dir);

// Config + weights, float32 on CPU.
DecoderLM load_model(const std::string& dir);

struct SaveOptions {
  at::ScalarType dtype = at::kFloat;  // stored dtype of the weights
  bool replace_any = false;           // replace an existing non-empty directory even if it is not a model of ours
};
// Writes drope.yaml, model.safetensors and (when HF can express the model) config.json, atomically
// as a directory. An existing non-empty `dir` without drope.yaml is refused unless opt.replace_any.
// Returns whether config.json was written.
bool save_model(DecoderLM& model, const std::string& dir, const SaveOptions& opt = {});
// The same files written into an existing directory (for callers that build a directory atomically).
bool write_model_files(DecoderLM& model, const std::string& dir, const SaveOptions& opt = {});

}  // namespace drope::io
