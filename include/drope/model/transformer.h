// Llama/Qwen2-shape decoder: RMSNorm, SwiGLU, GQA, optional q/k/v bias, tied or untied head, a
// positional module per layer and optional QK-norm. Submodule names follow HF so that
// named_parameters() are HF checkpoint names.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include <torch/torch.h>

#include "drope/config/model_config.h"
#include "drope/model/positional.h"

namespace drope {

// RMSNorm as HF Llama: normalise in float32, cast back, multiply by the weight.
class RMSNormImpl : public torch::nn::Module {
 public:
  RMSNormImpl(int64_t dim, double eps);
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor weight;  // (dim), initialised to 1

 private:
  double eps_;
};
TORCH_MODULE(RMSNorm);

// Keys and values of earlier tokens for incremental decoding. Each layer's buffers (B, H_kv, capacity, D)
// hold positional-encoded keys in slots [0, length); a forward with a cache appends its T tokens and
// attends over all slots. Rows of a batch may be left-padded: row b's real tokens start at slot pad[b],
// and its positions count from there (RoPE, ALiBi, windows and the temperature see unpadded positions).
struct KVCache {
  std::vector<torch::Tensor> k, v;  // per layer, filled lazily by the first forward
  int64_t length = 0;               // slots in use
  std::vector<int64_t> pad;         // per batch row; empty = no padding
  // Per row (or one for all rows): the length the temperature and dynamic RoPE scaling use while the row
  // is shorter, so that a prompt prefilled in chunks sees the same β and frequencies as in one forward.
  std::vector<int64_t> length_hint;
  // Row b's real length (tokens after its padding).
  int64_t row_length(size_t b) const { return length - (pad.empty() ? 0 : pad[b]); }
  bool padded() const;
  // Appends `kn`/`vn` (B, H_kv, T, D) to layer `layer`, growing the buffers geometrically; returns views
  // of slots [0, length + T). Call commit(T) once after the last layer.
  std::pair<torch::Tensor, torch::Tensor> append(size_t layer, const torch::Tensor& kn, const torch::Tensor& vn);
  void commit(int64_t T) { length += T; }
  // Bytes held by the buffers.
  int64_t bytes() const;
};

class DecoderLayerImpl;
// Runs decoder block `layer` on x during training (activation checkpointing, sharded parameters: see
// train/recompute.h); returns the block's output, as block.forward(x, ctx) would.
using BlockRunner = std::function<torch::Tensor(size_t layer, DecoderLayerImpl& block, const torch::Tensor& x,
                                                const PositionContext& ctx)>;

// Per-forward options.
struct ForwardOptions {
  int64_t position_offset = 0;                  // absolute position of the first token (ignored with a cache)
  std::vector<torch::Tensor>* attention_probs = nullptr;  // if set, receives (B, H, T, T) per layer
  KVCache* cache = nullptr;                     // if set: attend over the cache too, then append to it
  BlockRunner block_runner;                     // if set (and no cache, no probs): runs each decoder block
};

class AttentionImpl : public torch::nn::Module {
 public:
  AttentionImpl(const ModelConfig& cfg, const LayerPositional& layer);
  // x (B, T, C) → (B, T, C)
  torch::Tensor forward(const torch::Tensor& x, const PositionContext& ctx, torch::Tensor* probs_out = nullptr,
                        KVCache* cache = nullptr, size_t layer = 0);
  const Positional& positional() const { return *positional_; }

  torch::nn::Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};
  RMSNorm q_norm{nullptr}, k_norm{nullptr};

 private:
  int64_t num_heads_, num_kv_heads_, head_dim_;
  bool per_head_norm_;
  std::unique_ptr<Positional> positional_;
};
TORCH_MODULE(Attention);

class MlpImpl : public torch::nn::Module {
 public:
  MlpImpl(const ModelConfig& cfg);
  torch::Tensor forward(const torch::Tensor& x);  // down(silu(gate(x)) · up(x))
  torch::nn::Linear gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};
};
TORCH_MODULE(Mlp);

class DecoderLayerImpl : public torch::nn::Module {
 public:
  DecoderLayerImpl(const ModelConfig& cfg, const LayerPositional& layer);
  torch::Tensor forward(const torch::Tensor& x, const PositionContext& ctx, torch::Tensor* probs_out = nullptr,
                        KVCache* cache = nullptr, size_t layer = 0);
  Attention self_attn{nullptr};
  Mlp mlp{nullptr};
  RMSNorm input_layernorm{nullptr}, post_attention_layernorm{nullptr};
};
TORCH_MODULE(DecoderLayer);

// The trunk ("model." in HF names).
class DecoderImpl : public torch::nn::Module {
 public:
  explicit DecoderImpl(const ModelConfig& cfg);
  torch::nn::Embedding embed_tokens{nullptr};
  torch::nn::ModuleList layers{nullptr};
  RMSNorm norm{nullptr};
};
TORCH_MODULE(Decoder);

class DecoderLMImpl : public torch::nn::Module {
 public:
  explicit DecoderLMImpl(const ModelConfig& cfg);
  // input_ids (B, T) int64 → logits (B, T, V)
  torch::Tensor forward(const torch::Tensor& input_ids, const ForwardOptions& opt = {});
  // Final hidden states (B, T, C) before the LM head.
  torch::Tensor hidden(const torch::Tensor& input_ids, const ForwardOptions& opt = {});
  const ModelConfig& config() const { return cfg_; }
  // c of the long-context attention temperature β = 1 + c·ln(len / max_position) (0 = off).
  void set_softmax_temperature(double c) { cfg_.softmax_temperature = c; }
  // Re-initialises every weight: N(0, init_std) for matrices and embeddings, 0 for biases, 1 for norms.
  void reset_parameters(uint64_t seed);
  // The RoPE/temperature context for tokens [offset, offset + T).
  // `scaling_len` (≥ offset + T) overrides the length that sets β and dynamic RoPE scaling.
  PositionContext position_context(int64_t offset, int64_t T, torch::TensorOptions opt, int64_t scaling_len = -1) const;
  // The context for T new tokens appended to `cache` (per-row positions when its rows are padded).
  PositionContext cached_context(const KVCache& cache, int64_t T, torch::TensorOptions opt) const;
  int64_t num_parameters() const;
  torch::Tensor lm_head_weight();

  Decoder model{nullptr};
  torch::nn::Linear lm_head{nullptr};  // null when tied

 private:
  ModelConfig cfg_;
  bool any_rope_ = false;
};
TORCH_MODULE(DecoderLM);

// β = 1 + c·ln(len / train_len) when len > train_len, else 1.
double softmax_temperature(double c, int64_t len, int64_t train_len);

}  // namespace drope
