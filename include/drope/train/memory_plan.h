// The memory plan of a training run (`drope-train CONFIG --plan`): bytes per rank for parameters, gradients,
// AdamW moments, activations (with and without activation checkpointing), the loss's logits chunk and
// communication buffers, for each shard mode, and the largest micro-batch that fits a device.
//
// Activations follow what our decoder block keeps for backward, per token (floats): the RMSNorm inputs and
// outputs (4C), RoPE'd queries, keys, values, the attention output and its o_proj copy (3·H·D + 2·Hkv·D),
// the log-sum-exp (H), and SwiGLU's gate, up, silu(gate) and product (4F). A recomputed block keeps only its
// input (C) and, during its backward, one block's worth. Checked against the tensor bytes a run really holds
// (DROPE_TRACK_TENSOR_MEMORY, tests/py/test_memory_plan.py, bench/memory_plan.py, docs/training.md).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "drope/config/model_config.h"
#include "drope/config/names.h"

namespace drope::train {

struct PlanInput {
  ModelConfig model;
  int64_t seq_len = 256;
  int64_t micro_batch = 1;        // sequences per rank per forward
  int world = 1;
  int64_t activation_checkpointing = 0;  // 0 none, 1 full, K every K-th block
  bool bf16 = false;              // autocast: activations of matmuls in bf16
  bool chunked_loss = true;
  double allreduce_bucket_mb = 25;
};

struct MemoryPlan {
  ShardMode shard = ShardMode::kNone;
  int64_t params = 0, grads = 0, optimizer = 0;
  int64_t activations = 0;        // with the configured checkpointing
  int64_t activations_none = 0;   // without checkpointing (sharded blocks always recompute)
  int64_t activations_full = 0;   // with every block recomputed
  int64_t logits = 0;             // the loss: a logits chunk, the LM-head weight's and the hidden states' gradients
  int64_t comm = 0;               // communication buffers (buckets, gathered blocks, flat gradient copies)
  int64_t grads_transient = 0;    // the part of `grads` that exists only during backward (freed each step)
  // What exists only within a step, at its highest: zero_grad frees the gradients before each forward and
  // backward frees activations as it creates gradients, so this is the larger of (stored activations + the
  // loss) at the end of the forward and (activations left + the rebuilt block + gradients so far) during
  // some block's backward.
  int64_t transient_peak = 0;
  int64_t total() const { return params + optimizer + comm + (grads - grads_transient) + transient_peak; }
};

MemoryPlan plan_memory(const PlanInput& in, ShardMode shard);
// The largest micro-batch (≥ 0) whose plan fits `budget_bytes` with this shard mode.
int64_t largest_micro_batch(PlanInput in, ShardMode shard, int64_t budget_bytes);
// The plan table for every shard mode (Markdown), with the largest micro-batch for `gpu_mem_gb`.
std::string plan_table(const PlanInput& in, double gpu_mem_gb);

}  // namespace drope::train
