// One positional interface with small implementations: RoPE, NoPE, ALiBi. The layer plan (per-layer
// kind + window, e.g. RNoPE-SWA) is resolved by ModelConfig::layer_plan().
#pragma once

#include <memory>

#include <torch/torch.h>

#include "drope/config/model_config.h"
#include "drope/ops/attention.h"

namespace drope {

// Shared by all layers of one forward pass.
struct PositionContext {
  torch::Tensor cos;        // (T, D) or per row (B, 1, T, D): RoPE table (undefined without RoPE layers)
  torch::Tensor sin;        // same shape as cos
  int64_t q_offset = 0;     // absolute position of the first token of this forward
  int64_t total_len = 0;    // keys visible to the last query (q_offset + T)
  double logit_scale = 0;   // β/√D (β·softmax_scale when the config sets one)
  torch::Tensor q_scale;    // optional (B, 1, 1, 1): per-row β_b/β for padded batches (multiplies q)
  torch::Tensor key_start;  // optional (B) int64: first real key slot per row (left padding)
};

class Positional {
 public:
  virtual ~Positional() = default;
  // Applies the encoding to q (B, H, T, D) and k (B, H_kv, T, D) in place of the inputs.
  virtual void encode(torch::Tensor& q, torch::Tensor& k, const PositionContext& ctx) const = 0;
  // Adds what the attention op needs (bias slopes, window).
  virtual void configure(ops::AttentionParams& p) const = 0;
  virtual PositionalKind kind() const = 0;
};

std::unique_ptr<Positional> make_positional(const LayerPositional& layer, int64_t num_heads);

// RoPE (rotate_half pairing: dim i with i + D/2, as HF Llama): x·cos + rotate_half(x)·sin.
torch::Tensor apply_rotary(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);

// cos/sin tables (T, D) for positions [offset, offset + T), scaled by the attention factor.
std::pair<torch::Tensor, torch::Tensor> rotary_table(const std::vector<double>& inv_freq, double attention_factor,
                                                     int64_t offset, int64_t T, torch::TensorOptions opt);

}  // namespace drope
