// RoPE frequencies and their scaling (PI, NTK, dynamic NTK, YaRN, dynamic YaRN, Llama-3): one function
// from config to inverse frequencies + attention factor, shared by the model and the Figure-6 plot.
// Torch-free so that analysis and plotting code can use it directly.
#pragma once

#include <cstdint>
#include <vector>

#include "drope/config/model_config.h"

namespace drope {

struct RopeFrequencies {
  std::vector<double> inv_freq;    // ω'_i, i in [0, head_dim/2)
  double attention_factor = 1.0;   // multiplies cos and sin (YaRN mscale); logits scale by its square
};

// Unscaled ω_i = θ^(−2i/d).
std::vector<double> rope_base_frequencies(double theta, int64_t head_dim);

// Scaled frequencies for a forward pass whose longest position is `seq_len` (only dynamic methods use
// it). `max_position` is the model's context length, the default L0 when scaling.original_max_position
// is 0.
RopeFrequencies rope_frequencies(double theta, int64_t head_dim, const RopeScalingConfig& scaling, int64_t max_position,
                                 int64_t seq_len);

// YaRN correction range (low, high) in pair indices, as in HF `find_correction_range`.
struct YarnRange {
  double low = 0;
  double high = 0;
};
YarnRange yarn_correction_range(double beta_fast, double beta_slow, int64_t head_dim, double theta,
                                int64_t original_max_position, bool truncate);

// YaRN's default attention factor 0.1·ln(s) + 1 (1 when s <= 1).
double yarn_mscale(double factor);

}  // namespace drope
