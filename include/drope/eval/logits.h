// `drope-eval logits`: token lists in (JSON), logits out (safetensors).
#pragma once

#include <string>

#include <ATen/ATen.h>

#include "drope/model/transformer.h"

namespace drope::eval {

// Reads a JSON list of equally long, non-empty token-id lists with ids in [0, vocab). Returns (B, T) int64.
at::Tensor read_token_batch(const std::string& path, int64_t vocab_size);

// Runs the model (no grad) and writes `logits` float32 (B, T, V) to `out` atomically.
void write_logits(DecoderLM& model, const at::Tensor& tokens, const std::string& out);

}  // namespace drope::eval
