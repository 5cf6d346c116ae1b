#include "drope/model/rope_scaling.h"

#include <algorithm>
#include <cmath>

#include "drope/core/error.h"

namespace drope {

std::vector<double> rope_base_frequencies(double theta, int64_t head_dim) {
  std::vector<double> f(head_dim / 2);
  for (int64_t i = 0; i < head_dim / 2; ++i) f[i] = 1.0 / std::pow(theta, double(2 * i) / double(head_dim));
  return f;
}

double yarn_mscale(double factor) { return factor <= 1.0 ? 1.0 : 0.1 * std::log(factor) + 1.0; }

YarnRange yarn_correction_range(double beta_fast, double beta_slow, int64_t head_dim, double theta,
                                int64_t original_max_position, bool truncate) {
  const double d = double(head_dim);
  auto corr_dim = [&](double rotations) {
    return d * std::log(double(original_max_position) / (rotations * 2.0 * M_PI)) / (2.0 * std::log(theta));
  };
  double low = corr_dim(beta_fast);
  double high = corr_dim(beta_slow);
  if (truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  return {std::max(low, 0.0), std::min(high, d - 1.0)};
}

RopeFrequencies rope_frequencies(double theta, int64_t head_dim, const RopeScalingConfig& s, int64_t max_position,
                                 int64_t seq_len) {
  const double d = double(head_dim);
  const int64_t half = head_dim / 2;
  const int64_t L0 = s.original_max_position > 0 ? s.original_max_position : max_position;
  RopeFrequencies out;
  const RopeScalingType t = s.type;
  if (t == RopeScalingType::kNone) {
    out.inv_freq = rope_base_frequencies(theta, head_dim);
  } else if (t == RopeScalingType::kPi) {
    out.inv_freq = rope_base_frequencies(theta, head_dim);
    for (auto& f : out.inv_freq) f /= s.factor;
  } else if (t == RopeScalingType::kNtk) {
    // θ' = θ · s^(d/(d−2)), equivalently γ_m = s^(−2m/(d−2)).
    out.inv_freq = rope_base_frequencies(theta * std::pow(s.factor, d / (d - 2.0)), head_dim);
  } else if (t == RopeScalingType::kDynamicNtk) {
    // HF: L0 = max_position_embeddings; frequencies change only once the sequence exceeds it.
    const double L = double(std::max(seq_len, L0));
    const double base = theta * std::pow(s.factor * L / double(L0) - (s.factor - 1.0), d / (d - 2.0));
    out.inv_freq = rope_base_frequencies(base, head_dim);
  } else if (t == RopeScalingType::kYarn || t == RopeScalingType::kDynamicYarn) {
    double factor = s.factor;
    if (t == RopeScalingType::kDynamicYarn) factor = std::max(1.0, double(seq_len) / double(L0));
    auto base = rope_base_frequencies(theta, head_dim);
    out.inv_freq.resize(half);
    if (factor <= 1.0) {
      out.inv_freq = base;
    } else {
      YarnRange r = yarn_correction_range(s.beta_fast, s.beta_slow, head_dim, theta, L0, s.truncate);
      double high = r.high == r.low ? r.high + 0.001 : r.high;
      for (int64_t i = 0; i < half; ++i) {
        // ramp = 0 → keep ω (extrapolate, high frequencies), ramp = 1 → ω/s (interpolate).
        double ramp = std::clamp((double(i) - r.low) / (high - r.low), 0.0, 1.0);
        out.inv_freq[i] = base[i] / factor * ramp + base[i] * (1.0 - ramp);
      }
    }
    out.attention_factor = s.attention_factor > 0 ? s.attention_factor : yarn_mscale(factor);
  } else if (t == RopeScalingType::kLlama3) {
    auto base = rope_base_frequencies(theta, head_dim);
    const double low_wavelen = double(L0) / s.low_freq_factor;
    const double high_wavelen = double(L0) / s.high_freq_factor;
    out.inv_freq.resize(half);
    for (int64_t i = 0; i < half; ++i) {
      const double wavelen = 2.0 * M_PI / base[i];
      if (wavelen < high_wavelen) {
        out.inv_freq[i] = base[i];
      } else if (wavelen > low_wavelen) {
        out.inv_freq[i] = base[i] / s.factor;
      } else {
        const double smooth = (double(L0) / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
        out.inv_freq[i] = (1.0 - smooth) * base[i] / s.factor + smooth * base[i];
      }
    }
  }
  return out;
}

}  // namespace drope
