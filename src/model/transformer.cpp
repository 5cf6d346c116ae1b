#include "drope/model/transformer.h"

#include <cmath>

#include "drope/core/cpu_budget.h"
#include "drope/core/error.h"
#include "drope/model/rope_scaling.h"
#include "drope/ops/layers.h"

namespace drope {

namespace {
// A Linear module's function through ops::linear (oneDNN GEMMs for float32 on the CPU).
torch::Tensor linear_of(const torch::nn::Linear& l, const torch::Tensor& x) {
  return ops::linear(x, l->weight, l->bias);
}
}  // namespace

RMSNormImpl::RMSNormImpl(int64_t dim, double eps) : eps_(eps) {
  weight = register_parameter("weight", torch::ones({dim}));
}

torch::Tensor RMSNormImpl::forward(const torch::Tensor& x) { return ops::rms_norm(x, weight, eps_); }

AttentionImpl::AttentionImpl(const ModelConfig& cfg, const LayerPositional& layer)
    : num_heads_(cfg.num_heads),
      num_kv_heads_(cfg.num_kv_heads),
      head_dim_(cfg.resolved_head_dim()),
      per_head_norm_(cfg.qk_norm_per_head),
      positional_(make_positional(layer, cfg.num_heads)) {
  const int64_t C = cfg.hidden_size, qd = num_heads_ * head_dim_, kvd = num_kv_heads_ * head_dim_;
  using torch::nn::LinearOptions;
  q_proj = register_module("q_proj", torch::nn::Linear(LinearOptions(C, qd).bias(cfg.attention_bias)));
  k_proj = register_module("k_proj", torch::nn::Linear(LinearOptions(C, kvd).bias(cfg.attention_bias)));
  v_proj = register_module("v_proj", torch::nn::Linear(LinearOptions(C, kvd).bias(cfg.attention_bias)));
  o_proj = register_module("o_proj", torch::nn::Linear(LinearOptions(qd, C).bias(cfg.attention_out_bias)));
  const bool qn = norms_queries(cfg.qk_norm);
  const bool kn = norms_keys(cfg.qk_norm);
  if (qn) q_norm = register_module("q_norm", RMSNorm(per_head_norm_ ? head_dim_ : qd, cfg.rms_eps));
  if (kn) k_norm = register_module("k_norm", RMSNorm(per_head_norm_ ? head_dim_ : kvd, cfg.rms_eps));
}

torch::Tensor AttentionImpl::forward(const torch::Tensor& x, const PositionContext& ctx, torch::Tensor* probs_out,
                                     KVCache* cache, size_t layer) {
  const int64_t B = x.size(0), T = x.size(1);
  // (B, T, H·D), (B, T, Hkv·D) twice: one GEMM on the CPU (ops::linear_split).
  const auto qkv = ops::linear_split(x, {q_proj->weight, k_proj->weight, v_proj->weight},
                                     {q_proj->bias, k_proj->bias, v_proj->bias});
  auto q = qkv[0], k = qkv[1], v = qkv[2];
  // QK-norm over the whole projection (DroPE reference) happens before splitting into heads.
  if (q_norm && !per_head_norm_) q = q_norm(q);
  if (k_norm && !per_head_norm_) k = k_norm(k);
  q = q.view({B, T, num_heads_, head_dim_}).transpose(1, 2);     // (B, H, T, D)
  k = k.view({B, T, num_kv_heads_, head_dim_}).transpose(1, 2);  // (B, Hkv, T, D)
  v = v.view({B, T, num_kv_heads_, head_dim_}).transpose(1, 2);  // (B, Hkv, T, D)
  if (q_norm && per_head_norm_) q = q_norm(q);
  if (k_norm && per_head_norm_) k = k_norm(k);
  positional_->encode(q, k, ctx);
  if (ctx.q_scale.defined()) q = q * ctx.q_scale.to(q.dtype());
  ops::AttentionParams p;
  p.causal = true;
  p.scale = ctx.logit_scale;
  p.q_offset = cache ? cache->length : 0;
  p.key_start = ctx.key_start;
  if (cache) std::tie(k, v) = cache->append(layer, k, v);  // keys/values of all slots so far
  positional_->configure(p);
  if (probs_out) *probs_out = ops::reference_attention_probs(q, k, p);
  auto o = ops::attention(q, k, v, p);                           // (B, H, T, D)
  o = o.transpose(1, 2).reshape({B, T, num_heads_ * head_dim_});
  return linear_of(o_proj, o);
}

MlpImpl::MlpImpl(const ModelConfig& cfg) {
  using torch::nn::LinearOptions;
  const int64_t C = cfg.hidden_size, F = cfg.intermediate_size;
  gate_proj = register_module("gate_proj", torch::nn::Linear(LinearOptions(C, F).bias(cfg.mlp_bias)));
  up_proj = register_module("up_proj", torch::nn::Linear(LinearOptions(C, F).bias(cfg.mlp_bias)));
  down_proj = register_module("down_proj", torch::nn::Linear(LinearOptions(F, C).bias(cfg.mlp_bias)));
}

torch::Tensor MlpImpl::forward(const torch::Tensor& x) {
  return linear_of(down_proj, ops::swiglu(x, gate_proj->weight, gate_proj->bias, up_proj->weight, up_proj->bias));
}

DecoderLayerImpl::DecoderLayerImpl(const ModelConfig& cfg, const LayerPositional& layer) {
  self_attn = register_module("self_attn", Attention(cfg, layer));
  mlp = register_module("mlp", Mlp(cfg));
  input_layernorm = register_module("input_layernorm", RMSNorm(cfg.hidden_size, cfg.rms_eps));
  post_attention_layernorm = register_module("post_attention_layernorm", RMSNorm(cfg.hidden_size, cfg.rms_eps));
}

torch::Tensor DecoderLayerImpl::forward(const torch::Tensor& x, const PositionContext& ctx, torch::Tensor* probs,
                                        KVCache* cache, size_t layer) {
  auto h = x + self_attn->forward(input_layernorm(x), ctx, probs, cache, layer);
  return h + mlp(post_attention_layernorm(h));
}

DecoderImpl::DecoderImpl(const ModelConfig& cfg) {
  embed_tokens = register_module("embed_tokens", torch::nn::Embedding(cfg.vocab_size, cfg.hidden_size));
  layers = register_module("layers", torch::nn::ModuleList());
  for (const auto& lp : cfg.layer_plan()) layers->push_back(DecoderLayer(cfg, lp));
  norm = register_module("norm", RMSNorm(cfg.hidden_size, cfg.rms_eps));
}

DecoderLMImpl::DecoderLMImpl(const ModelConfig& cfg) : cfg_(cfg) {
  cfg_.validate("model config");
  // Refuse before allocating: a small config file can ask for terabytes (float32 weights, 4 bytes each).
  const double bytes = 4 * cfg_.parameter_count();
  const uint64_t avail = available_memory_bytes();
  if (avail > 0 && bytes > double(avail))
    fail("model config: {} layers × hidden {} × vocab {} ({:.3g}B parameters) needs {:.1f} GiB for its float32 "
         "weights alone, but only {:.1f} GiB of memory is available",
         cfg_.num_layers, cfg_.hidden_size, cfg_.vocab_size, cfg_.parameter_count() / 1e9, bytes / (1u << 30),
         double(avail) / (1u << 30));
  model = register_module("model", Decoder(cfg_));
  if (!cfg_.tie_embeddings)
    lm_head = register_module(
        "lm_head", torch::nn::Linear(torch::nn::LinearOptions(cfg_.hidden_size, cfg_.vocab_size).bias(false)));
  for (const auto& lp : cfg_.layer_plan()) any_rope_ |= lp.kind == PositionalKind::kRope;
  reset_parameters(0);
}

void DecoderLMImpl::reset_parameters(uint64_t seed) {
  torch::NoGradGuard ng;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  for (auto& kv : named_parameters()) {
    const std::string& name = kv.key();
    auto& p = kv.value();
    const bool is_norm = name.find("norm") != std::string::npos;
    const bool is_bias = name.size() >= 5 && name.compare(name.size() - 5, 5, ".bias") == 0;
    if (is_norm) {
      p.fill_(1.0);
    } else if (is_bias) {
      p.zero_();
    } else {
      auto w = at::normal(0.0, cfg_.init_std, p.sizes(), gen, torch::TensorOptions().dtype(torch::kFloat));
      p.copy_(w);
    }
  }
}

double softmax_temperature(double c, int64_t len, int64_t train_len) {
  if (c <= 0.0 || len <= train_len) return 1.0;
  return 1.0 + c * std::log(double(len) / double(train_len));
}

PositionContext DecoderLMImpl::position_context(int64_t offset, int64_t T, torch::TensorOptions opt,
                                                int64_t scaling_len) const {
  PositionContext ctx;
  ctx.q_offset = offset;
  ctx.total_len = std::max(offset + T, scaling_len);
  const int64_t D = cfg_.resolved_head_dim();
  const double beta = softmax_temperature(cfg_.softmax_temperature, ctx.total_len, cfg_.max_position);
  ctx.logit_scale = beta * (cfg_.softmax_scale > 0 ? cfg_.softmax_scale : 1.0 / std::sqrt(double(D)));
  if (any_rope_) {
    auto f = rope_frequencies(cfg_.positional.rope_theta, D, cfg_.positional.scaling, cfg_.max_position, ctx.total_len);
    std::tie(ctx.cos, ctx.sin) = rotary_table(f.inv_freq, f.attention_factor, offset, T, opt);
  }
  return ctx;
}

PositionContext DecoderLMImpl::cached_context(const KVCache& cache, int64_t T, torch::TensorOptions opt) const {
  auto hint = [&](size_t b) -> int64_t {
    if (cache.length_hint.empty()) return -1;
    return cache.length_hint[cache.length_hint.size() == 1 ? 0 : b];
  };
  if (!cache.padded()) return position_context(cache.length, T, opt, hint(0));
  // Padded rows: each row's tokens are at positions slot − pad[b]; build per-row tables and scales.
  const int64_t B = int64_t(cache.pad.size());
  std::vector<PositionContext> rows;
  double max_scale = 0;
  for (int64_t b = 0; b < B; ++b) {
    rows.push_back(position_context(cache.row_length(size_t(b)), T, opt, hint(size_t(b))));
    max_scale = std::max(max_scale, rows.back().logit_scale);
  }
  PositionContext ctx;
  ctx.q_offset = cache.length;
  ctx.total_len = cache.length + T;
  ctx.logit_scale = max_scale;
  std::vector<double> ratio;
  bool uniform = true;
  for (const auto& r : rows) {
    ratio.push_back(r.logit_scale / max_scale);
    uniform &= ratio.back() == 1.0;
  }
  if (!uniform) ctx.q_scale = torch::tensor(ratio, torch::kDouble).to(opt.dtype()).view({B, 1, 1, 1});
  if (any_rope_) {
    std::vector<torch::Tensor> cs, sn;
    for (const auto& r : rows) {
      cs.push_back(r.cos.unsqueeze(0));
      sn.push_back(r.sin.unsqueeze(0));
    }
    ctx.cos = torch::stack(cs);  // (B, 1, T, D)
    ctx.sin = torch::stack(sn);
  }
  ctx.key_start = torch::tensor(cache.pad, torch::kLong);
  return ctx;
}

bool KVCache::padded() const {
  for (auto p : pad)
    if (p != 0) return true;
  return false;
}

std::pair<torch::Tensor, torch::Tensor> KVCache::append(size_t layer, const torch::Tensor& kn,
                                                        const torch::Tensor& vn) {
  if (k.size() <= layer) {
    k.resize(layer + 1);
    v.resize(layer + 1);
  }
  const int64_t T = kn.size(2), need = length + T;
  auto& kb = k[layer];
  auto& vb = v[layer];
  if (!kb.defined() || kb.size(2) < need) {
    // Grow geometrically so that decoding one token at a time copies the cache O(log n) times.
    const int64_t cap = std::max<int64_t>(need, kb.defined() ? kb.size(2) * 2 : need);
    auto grow = [&](torch::Tensor& buf, const torch::Tensor& like) {
      auto nb = torch::empty({like.size(0), like.size(1), cap, like.size(3)}, like.options());
      if (buf.defined() && length > 0) nb.narrow(2, 0, length).copy_(buf.narrow(2, 0, length));
      buf = nb;
    };
    grow(kb, kn);
    grow(vb, vn);
  }
  kb.narrow(2, length, T).copy_(kn);
  vb.narrow(2, length, T).copy_(vn);
  return {kb.narrow(2, 0, need), vb.narrow(2, 0, need)};
}

int64_t KVCache::bytes() const {
  int64_t n = 0;
  for (size_t i = 0; i < k.size(); ++i)
    if (k[i].defined()) n += (k[i].numel() + v[i].numel()) * int64_t(k[i].element_size());
  return n;
}

torch::Tensor DecoderLMImpl::hidden(const torch::Tensor& ids, const ForwardOptions& opt) {
  TORCH_CHECK(ids.dim() == 2, "input_ids must be (B, T), got ", ids.sizes());
  auto x = model->embed_tokens(ids);  // (B, T, C)
  const int64_t T = ids.size(1);
  KVCache* cache = opt.cache;
  if (cache && !cache->pad.empty() && int64_t(cache->pad.size()) != ids.size(0))
    TORCH_CHECK(false, "KV cache has ", cache->pad.size(), " padded rows, input has ", ids.size(0));
  auto ctx = cache ? cached_context(*cache, T, x.options()) : position_context(opt.position_offset, T, x.options());
  if (opt.attention_probs) opt.attention_probs->clear();
  size_t layer = 0;
  for (const auto& m : *model->layers) {
    torch::Tensor probs;
    if (opt.block_runner && !cache && !opt.attention_probs)
      x = opt.block_runner(layer++, *m->as<DecoderLayer>(), x, ctx);
    else x = m->as<DecoderLayer>()->forward(x, ctx, opt.attention_probs ? &probs : nullptr, cache, layer++);
    if (opt.attention_probs) opt.attention_probs->push_back(probs);
  }
  if (cache) cache->commit(T);
  return model->norm(x);
}

torch::Tensor DecoderLMImpl::lm_head_weight() { return lm_head ? lm_head->weight : model->embed_tokens->weight; }

torch::Tensor DecoderLMImpl::forward(const torch::Tensor& ids, const ForwardOptions& opt) {
  auto h = hidden(ids, opt);
  return ops::linear(h, lm_head_weight());  // (B, T, V)
}

int64_t DecoderLMImpl::num_parameters() const {
  int64_t n = 0;
  for (const auto& p : parameters()) n += p.numel();
  return n;
}

}  // namespace drope
