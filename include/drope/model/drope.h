// DroPE: a transform from a model (or its config) with positional embeddings to the same model without
// them (NoPE in every layer), keeping every weight; optional QK-norm added with weight 1.
#pragma once

#include <string>

#include "drope/config/model_config.h"
#include "drope/model/transformer.h"

namespace drope {

struct DropOptions {
  QkNorm qk_norm = QkNorm::kNone;
  bool per_head = false;         // per-head norm (Qwen3 style) instead of the whole projection
};

// The config of the dropped model: every layer NoPE (sliding windows, which are masks, are kept), RoPE
// scaling removed.
ModelConfig drop_positional(const ModelConfig& cfg, const DropOptions& opt = {});

// A new model with the dropped config and the same weights; new norm weights start at 1.
DecoderLM drop_positional(DecoderLM& model, const DropOptions& opt = {});

// The same weights with RoPE scaling `s` (PI, NTK, YaRN, ...) in the config: eval/fine-tune baselines.
DecoderLM with_rope_scaling(DecoderLM& model, const RopeScalingConfig& s);

// Copies every parameter of `src` into `dst` by name; each must exist in dst with the same shape, else the
// error names `what` (the transform, in the user's terms: "method drope", "RoPE scaling yarn") and the weight.
void copy_parameters(DecoderLM& dst, DecoderLM& src, const std::string& what = "the model transform");

}  // namespace drope
