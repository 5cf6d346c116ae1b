// One attention call of the attention tests (CPU kernel, CUDA plan emulated on the CPU, CUDA backends):
// sizes, the options of ops::AttentionParams, and a description for SCOPED_TRACE; and the backends of the
// registry the tests iterate.
#pragma once

#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "drope/ops/attention.h"
#include "drope/ops/attention_registry.h"

namespace drope::test {

struct AttentionCase {
  int64_t B = 2, H = 4, Hkv = 4, T = 16, S = 16, D = 8;  // q (B, H, T, D), k/v (B, Hkv, S, D)
  bool causal = true;
  int64_t window = 0;
  bool alibi = false;
  double scale = 0.0;
  int64_t q_offset = -1;
  std::vector<int64_t> key_start;  // left padding (one per batch row) or empty
  int64_t capacity = 0;            // > S: k/v are a KV cache (B, Hkv, capacity, D) narrowed to S

  std::string str() const {
    std::ostringstream o;
    o << "B=" << B << " H=" << H << " Hkv=" << Hkv << " T=" << T << " S=" << S << " D=" << D << " causal=" << causal
      << " window=" << window << " alibi=" << alibi << " scale=" << scale << " q_offset=" << q_offset;
    if (!key_start.empty() || capacity > 0) o << " key_start=" << key_start.size() << " capacity=" << capacity;
    return o.str();
  }

  // The call's parameters; ALiBi slopes (H) in `slopes_dtype` on `device`.
  ops::AttentionParams params(torch::Dtype slopes_dtype = torch::kDouble, torch::Device device = torch::kCPU) const {
    ops::AttentionParams p;
    p.causal = causal;
    p.window = window;
    p.scale = scale;
    p.q_offset = q_offset;
    if (alibi) p.alibi_slopes = torch::tensor(ops::alibi_slopes(H), slopes_dtype).to(device);
    if (!key_start.empty()) p.key_start = torch::tensor(key_start, torch::kLong).to(device);
    return p;
  }
};

// The registered attention backends that run on `device` (ops::kAttnCpu or ops::kAttnCuda), in registry order.
inline std::vector<const ops::AttnBackendDef*> backends_on(unsigned device) {
  std::vector<const ops::AttnBackendDef*> v;
  for (const auto* d : ops::attn_backends())
    if (d->devices & device) v.push_back(d);
  return v;
}

}  // namespace drope::test
