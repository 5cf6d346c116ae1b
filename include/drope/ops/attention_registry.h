// The attention backends as a registry: one record per backend, defined in the backend's own file
// (src/ops/attention_<backend>.cpp: its argument mapping, its refusals, its forward and backward glue and the
// ATen ops it calls), and one ordered table of routes (src/ops/attention_registry.cpp), which is also the list of
// backends, from which one dispatch picks the backend of every call, CPU and CUDA alike. CONTRIBUTING.md ("Add an
// attention backend") shows how a backend is added: one file, one row, one emulation.
#pragma once

#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "drope/ops/attention.h"
#include "drope/ops/attention_backends.h"
#include "drope/ops/attention_plan.h"

namespace drope::ops {

// The devices a backend runs on (a bit mask).
enum AttnDevice : unsigned { kAttnCpu = 1u, kAttnCuda = 2u };

// One backend.
struct AttnBackendDef {
  const char* name;   // the AttnBackend name: "flash", "cpu_fused", ...
  const char* title;  // for messages: "FlashAttention-2", "our CPU kernel", ...
  unsigned devices;   // AttnDevice bits
  // Why the backend cannot run the call (plan: its geometry and every CUDA backend's arguments), or nullptr.
  const char* (*refuses)(const AttnCall& c, const AttnPlan& plan);
  // out (B, H, T, D) in q's dtype; lse (B, H, T) in the accumulation dtype, undefined when the backend has none;
  // the state its backward reads.
  backends::Forward (*forward)(const AttnPlan& plan, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                               const AttentionParams& p, const backends::BackendOps& ops);
  // dq, dk, dv shaped like q, k, v from the forward's state; nullptr: the forward is differentiable by itself
  // (autograd through its ATen ops).
  AttentionGrads (*backward)(const AttnPlan& plan, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                             const AttentionParams& p, const backends::NativeState& state, const at::Tensor& dout,
                             const backends::BackendOps& ops);
  // Binds the backend's real ops into backends::aten_ops(); nullptr: it calls none through BackendOps.
  void (*bind)(backends::BackendOps& ops);
  // Checks the tensors once the plan picked the backend (cuDNN builds its graph or not); nullptr: no check.
  bool (*builds)(const AttnPlan& plan, const at::Tensor& q, const at::Tensor& k, bool training, std::string* why);
};

// Every backend of the dispatch table once, in the order of its rows' `listed`: flash, mem_efficient, cudnn,
// cudnn_graph, sdpa, own_cuda, cpu_fused, decode, reference.
const std::vector<const AttnBackendDef*>& attn_backends();
// The record of a backend (an error for a name that is not registered).
const AttnBackendDef& attn_backend_def(AttnBackend b);

// One row of the dispatch table: for a call on one of `devices`, `backend` runs it when it does not refuse it
// and `takes` gives a reason (the plan's reason); otherwise the next row decides.
struct AttnRoute {
  const AttnBackendDef* backend;
  unsigned devices;
  const char* (*takes)(const AttnCall& c, const AttnPlan& plan);
  int listed;  // the backend's place in attn_backends() (1, 2, ...), the same on each of its rows
};
// The table, in order of preference; a backend is registered by its rows.
const std::vector<AttnRoute>& attn_routes();

// The plan of a call (c.cuda says the device): its geometry, every CUDA backend's arguments (CUDA calls), and the
// backend and reason of the first route that takes it; no route picks `excluded`.
AttnPlan route_attention(const AttnCall& c, const AttnBackendDef* excluded = nullptr);

// The plan attention() follows for these validated tensors, CPU or CUDA (training: a backward will follow): the
// call described once (backends::make_call) and routed, or the backend of a ForceAttentionBackend /
// ForceReferenceAttention alive on this thread.
AttnPlan attention_plan(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const AttentionParams& p,
                        bool training);

// Runs a plan on validated tensors: through the one autograd Function (which saves the call and the backend's
// name) for a backend with a backward of its own, directly for the others.
at::Tensor run_attention(const AttnPlan& plan, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                         const AttentionParams& p);

}  // namespace drope::ops
