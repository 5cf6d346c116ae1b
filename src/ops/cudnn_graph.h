// cuDNN's SDPA node through cudnn-frontend graphs (src/ops/cudnn_graph.cpp): one forward and one backward graph
// per shape and attribute set, built on first use and cached; only in CUDA builds that found the frontend's
// headers (DROPE_WITH_CUDNN_FRONTEND). The attributes come from ops::cudnn_graph_args (attention_plan.h), which
// tests/test_attention_plan.cpp checks against a float64 emulation of the node's documented semantics.
#pragma once

#include <string>

#include "drope/ops/attention_backends.h"

#ifdef DROPE_WITH_CUDNN_FRONTEND

namespace drope::ops::cudnn_graph {

// Whether cuDNN builds the forward graph (and, with training, the backward graph) of these attributes for
// these tensors: the graphs are built, checked (check_support) and cached on the way. *why: cuDNN's reason.
bool supported(const at::Tensor& q, const at::Tensor& k, const CudnnGraphArgs& args, bool training, std::string* why);

backends::CudnnGraphFwdOut forward(const backends::CudnnGraphFwdIn& in);
backends::Grads3 backward(const backends::CudnnGraphBwdIn& in);

}  // namespace drope::ops::cudnn_graph

#endif  // DROPE_WITH_CUDNN_FRONTEND
