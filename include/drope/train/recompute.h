// Activation checkpointing of decoder blocks: a block's forward keeps no activations; its backward runs the
// forward again (same autocast state, with gradients on) and differentiates that. Sharded parameters
// (train.shard: params) use the same node with hooks that gather the block's parameters before each of the
// two computations, free them after, and take the parameter gradients instead of accumulating them.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "drope/model/transformer.h"

namespace drope::train {

struct BlockHooks {
  std::function<void()> gather;  // before the forward and before the recomputation
  std::function<void()> release;  // after each of them
  // If set: receives dLoss/dparameter (in block.parameters() order) in backward; the parameters then get no
  // .grad and are not inputs of the node.
  std::function<void(std::vector<torch::Tensor>&&)> param_grads;
};

// y = block(x) whose backward recomputes the block. `hooks` may be null (plain activation checkpointing).
torch::Tensor checkpointed_block(DecoderLayerImpl& block, const torch::Tensor& x, const PositionContext& ctx,
                                 std::shared_ptr<const BlockHooks> hooks = nullptr);

// Whether block `layer` is recomputed under train.activation_checkpointing = `every` (0 none, 1 every block,
// K every K-th block: layers K-1, 2K-1, ...).
inline bool checkpoints_layer(int64_t every, size_t layer) { return every > 0 && (int64_t(layer) + 1) % every == 0; }

// Fails (naming `source`, the run config) when train.activation_checkpointing = K recomputes no block of a
// model of `num_layers` layers (K > num_layers): the setting would be silently ignored.
void check_activation_checkpointing(int64_t every, int64_t num_layers, const std::string& source);

}  // namespace drope::train
