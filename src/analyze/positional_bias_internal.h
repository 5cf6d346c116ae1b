// Internal to the positional-bias analyses (src/analyze/*.cpp): helpers more than one analysis uses.
#pragma once

#include <vector>

#include <torch/torch.h>

namespace drope::analyze::detail {

// sqrt of the summed squares of every defined tensor in `grads` (undefined ones, unused parameters,
// count as zero).
double norm_of(const std::vector<torch::Tensor>& grads);

}  // namespace drope::analyze::detail
