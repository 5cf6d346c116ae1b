// Sharded data parallelism (train.shard) on c10d collectives, as ZeRO stages 1-3 / FSDP do it:
//  - optimizer: gradients all-reduced as with shard none; each rank updates only its chunk of the fp32
//    weights with its chunk of the AdamW moments, then the updated weights are all-gathered;
//  - grads: each unit's gradients are reduce-scattered into the owner's chunk as soon as backward has
//    produced them (every micro-batch, overlapped with the rest of backward), and freed;
//  - params: a decoder block's weights are stored as the rank's chunk only, all-gathered just before the
//    block's forward and again before its backward (which recomputes the block: no activations are kept
//    inside a sharded block), freed after each; its gradients are reduce-scattered as they are produced.
//    The rest (embedding, final norm, LM head) stays replicated, with gradients and moments sharded.
// Units: one per decoder block, and one for the rest. A unit's parameters are laid end to end in one flat
// space, padded to a multiple of the world size; rank r owns elements [r·chunk, (r+1)·chunk).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "drope/config/names.h"
#include "drope/model/transformer.h"
#include "drope/train/adamw.h"
#include "drope/train/distributed.h"

namespace drope::train {

struct ShardUnit {
  std::string name;              // "model.layers.3" or "rest"
  int64_t layer = -1;            // the decoder block's index; -1 for the rest
  std::vector<int64_t> params;   // indices into the model's parameter list
  std::vector<int64_t> offsets;  // each parameter's first element in the unit's flat space
  int64_t numel = 0;
  int64_t chunk = 0;             // elements per rank: ceil(numel / world)
};

// The units of a model with these parameter names and sizes, blocks in layer order, then the rest.
std::vector<ShardUnit> make_shard_units(const std::vector<std::string>& names, const std::vector<int64_t>& numels,
                                        int world);

// A piece of a parameter (its flattened elements [start, start + len)) owned by a rank, at `at` in the
// rank's chunk of unit `unit`.
struct OwnedPiece {
  int64_t unit = 0, param = 0, start = 0, len = 0, at = 0;
};
std::vector<OwnedPiece> owned_pieces(const std::vector<ShardUnit>& units, int rank);

// Whether params mode all-gathers the next block while one runs (DROPE_SHARD_PREFETCH, default 1). The only
// reader of that variable: the engine and the ranks' start-up agreement both ask here.
bool shard_prefetch_enabled();

class ShardedDataParallel {
 public:
  // Takes over the model's parameters (with shard params, blocks keep only empty placeholders between
  // uses). `recompute_every`: train.activation_checkpointing (0, 1 or K).
  ShardedDataParallel(Distributed& dist, DecoderLM model, ShardMode mode, const AdamWConfig& cfg,
                      int64_t recompute_every);
  ~ShardedDataParallel();
  ShardedDataParallel(const ShardedDataParallel&) = delete;
  ShardedDataParallel& operator=(const ShardedDataParallel&) = delete;

  // Runs decoder blocks in forward (gathers sharded blocks; activation checkpointing).
  BlockRunner block_runner();
  void zero_grad();
  // Around each micro-batch's backward (`last`: the step's last micro-batch).
  void before_backward(bool last);
  void after_backward(bool last);
  // The global gradient norm over every rank's chunks; scales the chunks by min(1, max_norm / (norm + 1e-6))
  // as torch.nn.utils.clip_grad_norm_ does (max_norm <= 0: no clipping).
  double clip_grad_norm(double max_norm);
  // The rank's AdamW update of its chunks, then the replicated weights are all-gathered.
  void step(double lr);
  int64_t steps_taken() const;

  // Every parameter whole on this rank while `fn` runs (sharded blocks gathered, then freed again).
  void with_full_parameters(const std::function<void()>& fn);
  // The rank's optimizer state: "exp_avg.<name>@<start>" / "exp_avg_sq.<name>@<start>" 1-D pieces.
  std::vector<std::pair<std::string, torch::Tensor>> optimizer_pieces() const;
  // What the checkpoint manifest needs to know of this layout.
  const std::vector<ShardUnit>& units() const;
  const std::vector<OwnedPiece>& pieces() const;
  const std::vector<std::string>& names() const;
  const std::vector<std::vector<int64_t>>& shapes() const;
  // Restores the moments of every owned piece: `read(kind, param index, start, len)` returns the 1-D
  // elements [start, start + len) of that parameter's flattened moment ("exp_avg" / "exp_avg_sq").
  void load_optimizer(const std::function<torch::Tensor(const std::string&, int64_t, int64_t, int64_t)>& read,
                      int64_t steps, const std::string& source);
  // Bytes this rank holds between steps for parameters, gradients (chunks + .grad) and optimizer moments,
  // and the most bytes of whole sharded blocks it held at once so far (params mode).
  struct Bytes {
    int64_t params = 0, grads = 0, optimizer = 0, gathered_peak = 0;
    // params mode: block gathers served by the prefetch, and prefetches dropped unused (since the start)
    int64_t prefetch_hits = 0, prefetch_wasted = 0;
  };
  Bytes bytes() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace drope::train
