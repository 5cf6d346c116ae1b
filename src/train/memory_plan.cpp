#include "drope/train/memory_plan.h"

#include <algorithm>

#include <fmt/format.h>

#include "drope/core/error.h"
#include "drope/train/recompute.h"

namespace drope::train {

namespace {
struct Counts {
  double block = 0, rest = 0;  // parameters of one decoder block, of the rest
};
Counts counts(const ModelConfig& m) {
  const double L = double(m.num_layers);
  const double all = m.parameter_count();
  const double rest = double(m.vocab_size) * double(m.hidden_size) * (m.tie_embeddings ? 1 : 2) + double(m.hidden_size);
  return {(all - rest) / L, rest};
}
int64_t ceil_div(double a, int w) { return int64_t((a + w - 1) / w); }

// Bytes as an integer. A part beyond 2^59 bytes per rank is refused (naming it and the sizes that make it), so that
// no part and no total of parts overflows int64.
int64_t bytes(double b, const char* what, const PlanInput& in) {
  if (!(b <= 0x1p59))
    fail("memory plan: the {} would take {:.3g} bytes per rank, more than the 2^59 a plan counts (data.seq_len {} x "
         "micro-batch {}, vocabulary {}, hidden size {}, {} layers)",
         what, b, in.seq_len, in.micro_batch, in.model.vocab_size, in.model.hidden_size, in.model.num_layers);
  return int64_t(b);
}
}  // namespace

MemoryPlan plan_memory(const PlanInput& in, ShardMode shard) {
  const auto& m = in.model;
  const Counts n = counts(m);
  const int W = std::max(1, in.world);
  const double L = double(m.num_layers), C = double(m.hidden_size), F = double(m.intermediate_size);
  const double H = double(m.num_heads), K = double(m.num_kv_heads), D = double(m.resolved_head_dim());
  const double N = n.block * L + n.rest;
  const int64_t padded_units = ceil_div(n.block, W) * int64_t(L) + ceil_div(n.rest, W);  // elements per rank
  MemoryPlan p;
  p.shard = shard;
  // Weights (fp32 master = the weights), gradients, AdamW moments (2 × fp32).
  switch (shard) {
    case ShardMode::kNone:
      p.params = bytes(4 * N, "parameters", in);
      p.grads = p.grads_transient = bytes(4 * N, "gradients", in);
      p.optimizer = bytes(8 * N, "optimizer state", in);
      // a bucket being reduced and its flat copy (no buckets in one process)
      p.comm = W == 1 ? 0 : bytes(2 * std::min<double>(in.allreduce_bucket_mb * (1 << 20), 4 * N), "buckets", in);
      break;
    case ShardMode::kOptimizer:
      p.params = bytes(4 * N, "parameters", in);
      p.grads_transient = bytes(4 * N, "gradients", in);  // whole gradients until this rank's chunks are copied out
      p.grads = p.grads_transient + 4 * padded_units;
      p.optimizer = 8 * padded_units;
      p.comm = (W == 1 ? 0 : bytes(2 * std::min<double>(in.allreduce_bucket_mb * (1 << 20), 4 * N), "buckets", in)) +
               4 * ceil_div(n.rest, W);
      break;
    case ShardMode::kGrads:
      p.params = bytes(4 * N, "parameters", in);
      // chunks, plus one unit's whole gradients while it is reduced (its padded flat copy is in comm)
      p.grads_transient = bytes(4 * std::max(n.block, n.rest), "gradients", in);
      p.grads = 4 * padded_units + p.grads_transient;
      p.optimizer = 8 * padded_units;
      p.comm = bytes(4 * std::max(n.block, n.rest), "gradients", in) + 4 * ceil_div(n.rest, W);
      break;
    case ShardMode::kParams:
      p.params = 4 * (ceil_div(n.block, W) * int64_t(L)) + bytes(4 * n.rest, "parameters", in);
      p.grads_transient = bytes(4 * std::max(n.block, n.rest), "gradients", in);
      p.grads = 4 * padded_units + p.grads_transient;
      p.optimizer = 8 * padded_units;
      // the gathered block, the next one being prefetched, and the block's flat gradient
      p.comm = bytes(12 * n.block, "gathered blocks", in);
      break;
  }
  // One step: zero_grad has freed the gradients; the forward stores each block's activations (only its input
  // when the block is recomputed); the loss then holds one logits chunk besides the LM-head weight's gradient
  // and the hidden states' gradient (kept until backward ends); backward walks the blocks from the last,
  // rebuilding a recomputed block, freeing each block's activations as its gradients appear.
  const double tokens = double(in.micro_batch) * double(in.seq_len);
  const double act_bytes = in.bf16 ? 2.0 : 4.0;
  const double per_block = tokens * (4 * C + 3 * H * D + 2 * K * D + H + 4 * F) * act_bytes;
  const double kept_input = tokens * C * 4;
  const double trunk = tokens * 3 * C * 4;  // embedding output, final norm input and output
  const double V = double(m.vocab_size);
  const double loss_saved = V * C * 4 + tokens * C * 4;  // d(loss)/d(LM-head weight), d(loss)/d(hidden)
  // Chunked loss: one chunk of about 64M float32 logits (the softmax is formed in place); otherwise the
  // full logits and their float32 gradient.
  const double rows = in.chunked_loss ? std::min(tokens, std::max(64.0, double(int64_t(64) << 20) / V)) : tokens;
  p.logits = bytes((in.chunked_loss ? 1 : 2) * rows * V * 4 + loss_saved, "logits", in);
  const int64_t every = shard == ShardMode::kParams ? 1 : in.activation_checkpointing;
  const bool whole_grads = shard == ShardMode::kNone || shard == ShardMode::kOptimizer;
  const int64_t layers = m.num_layers;
  auto stored = [&](int64_t k, int64_t j) { return checkpoints_layer(k, size_t(j)) ? kept_input : per_block; };
  auto activations = [&](int64_t k) {  // stored by the forward, plus one rebuilt block if any is recomputed
    double sum = trunk, rebuilt = 0;
    for (int64_t j = 0; j < layers; ++j) {
      sum += stored(k, j);
      if (checkpoints_layer(k, size_t(j))) rebuilt = per_block;
    }
    return bytes(sum + rebuilt, "activations", in);
  };
  p.activations = activations(every);
  p.activations_none = activations(shard == ShardMode::kParams ? 1 : 0);
  p.activations_full = activations(1);
  // The transient peak: the loss at the end of the forward, or some block's backward.
  double forward_stored = trunk;
  for (int64_t j = 0; j < layers; ++j) forward_stored += stored(every, j);
  double peak = forward_stored + double(p.logits);
  double below = forward_stored;  // activations of blocks 0..l and the trunk, while block l runs backward
  for (int64_t l = layers - 1; l >= 0; --l) {
    const double rebuilt = checkpoints_layer(every, size_t(l)) ? per_block : 0;
    const double grads_now = whole_grads ? 4 * (n.rest + double(layers - l) * n.block) : double(p.grads_transient);
    peak = std::max(peak, below + rebuilt + loss_saved + grads_now);
    below -= stored(every, l);
  }
  // the embedding's dense gradient before it is added into the parameter's
  peak = std::max(peak, trunk + loss_saved + (whole_grads ? 4 * N : double(p.grads_transient)) + V * C * 4);
  p.transient_peak = bytes(peak, "peak within a step", in);
  return p;
}

int64_t largest_micro_batch(PlanInput in, ShardMode shard, int64_t budget_bytes) {
  int64_t lo = 0, hi = 1;
  auto fits = [&](int64_t mb) {
    in.micro_batch = mb;
    try {
      return plan_memory(in, shard).total() <= budget_bytes;
    } catch (const Error&) {
      return false;  // beyond what a plan counts: it does not fit either
    }
  };
  if (!fits(0)) return 0;
  while (hi < (int64_t(1) << 20) && fits(hi)) hi *= 2;
  if (fits(hi)) return hi;
  lo = hi / 2;
  while (hi - lo > 1) {
    const int64_t mid = (lo + hi) / 2;
    (fits(mid) ? lo : hi) = mid;
  }
  return lo;
}

std::string plan_table(const PlanInput& in, double gpu_mem_gb) {
  auto gib = [](int64_t b) { return fmt::format("{:.2f}", double(b) / double(int64_t(1) << 30)); };
  std::string out = fmt::format(
      "memory plan per rank: {:.3g}B parameters, seq {} x micro-batch {}, world {}, activation checkpointing {}, {}\n\n",
      in.model.parameter_count() / 1e9, in.seq_len, in.micro_batch, in.world,
      in.activation_checkpointing == 0   ? std::string("none")
      : in.activation_checkpointing == 1 ? std::string("full")
                                         : std::to_string(in.activation_checkpointing),
      in.bf16 ? "bf16 autocast" : "float32");
  out +=
      "| shard | params GiB | grads GiB | optimizer GiB | activations GiB (none / full ckpt) | logits GiB | comm GiB "
      "| total GiB | largest micro-batch in " +
      fmt::format("{:g}", gpu_mem_gb) + " GB |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  const int64_t budget = int64_t(gpu_mem_gb * 1e9);
  for (ShardMode s : {ShardMode::kNone, ShardMode::kOptimizer, ShardMode::kGrads, ShardMode::kParams}) {
    const auto p = plan_memory(in, s);
    out += fmt::format("| {} | {} | {} | {} | {} ({} / {}) | {} | {} | {} | {} |\n", name_of(s), gib(p.params),
                       gib(p.grads), gib(p.optimizer), gib(p.activations), gib(p.activations_none),
                       gib(p.activations_full), gib(p.logits), gib(p.comm), gib(p.total()),
                       largest_micro_batch(in, s, budget));
  }
  return out;
}

}  // namespace drope::train
