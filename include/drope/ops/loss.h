// The language-model loss without the (N, V) logits: cross-entropy of hidden · weightᵀ, computed over row
// chunks whose logits stay small, with the gradients of hidden and weight formed chunk by chunk in the same
// pass (the loss is the end of the graph, so its backward only scales them by the incoming gradient).
#pragma once

#include <ATen/ATen.h>

namespace drope::ops {

// Mean over the rows whose label != ignore_index of  logsumexp(h_i · Wᵀ) − h_i · W_{y_i}.
// hidden (N, C), weight (V, C), labels (N) int64 with values in [0, V) or ignore_index. The logits are
// computed in float32 (float64 for float64 inputs; GEMMs in the autocast dtype when autocast is on).
// chunk_rows: rows per chunk; 0 picks them so that a chunk's logits take about 256 MB in float32.
// Differentiable in hidden and weight; matches at::cross_entropy(hidden.matmul(weight.t()), labels) with
// mean reduction (NaN when every label is ignored, as there).
// fused: each chunk's loss and logit gradient in one operation after its GEMM: on the CPU (float32/float64
// logits) one row kernel (kernels::softmax_xent_cpu: a row read once from memory, the gradient written in
// place), elsewhere ATen's log-softmax read from the GEMM's dtype and its backward written into it. Unfused:
// separate max / exp / sum / divide / scale passes over a float copy of the logits (kept for comparison).
at::Tensor linear_cross_entropy(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& labels,
                                int64_t ignore_index = -100, int64_t chunk_rows = 0, bool fused = true);

}  // namespace drope::ops
