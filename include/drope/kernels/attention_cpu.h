// Flash-style fused attention on CPU: tiled online softmax, O(T·D) extra memory, threaded on LibTorch's
// OpenMP team. Raw pointers, sizes and strides only (the arguments of attention_math.h): the op layer
// (src/ops/attention_cpu_fused.cpp) checks shapes, builds the parameters once and allocates the outputs.
// float32 and bfloat16 inputs accumulate in float32 (acc_t = float), float64 in float64.
#pragma once

#include <cstdint>

#include "drope/kernels/attention_math.h"

namespace drope::kernels {

// dtype kFloat32 or kBFloat16 with float accumulation; kFloat64 with double. Other pairings throw
// std::invalid_argument.
void attention_forward_cpu(const AttnForwardArgs<float>& a);
void attention_forward_cpu(const AttnForwardArgs<double>& a);
void attention_backward_cpu(const AttnBackwardArgs<float>& a);
void attention_backward_cpu(const AttnBackwardArgs<double>& a);

}  // namespace drope::kernels
