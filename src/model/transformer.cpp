#include "drope/model/transformer.h"

#include <cmath>

#include "drope/model/rope_scaling.h"

namespace drope {

RMSNormImpl::RMSNormImpl(int64_t dim, double eps) : eps_(eps) {
  weight = register_parameter("weight", torch::ones({dim}));
}

torch::Tensor RMSNormImpl::forward(const torch::Tensor& x) {
  auto h = x.to(x.scalar_type() == torch::kDouble ? torch::kDouble : torch::kFloat);
  auto var = h.pow(2).mean(-1, /*keepdim=*/true);
  h = h * torch::rsqrt(var + eps_);
  return weight * h.to(x.scalar_type());
}

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
  const bool qn = cfg.qk_norm == "qk" || cfg.qk_norm == "q";
  const bool kn = cfg.qk_norm == "qk" || cfg.qk_norm == "k";
  if (qn) q_norm = register_module("q_norm", RMSNorm(per_head_norm_ ? head_dim_ : qd, cfg.rms_eps));
  if (kn) k_norm = register_module("k_norm", RMSNorm(per_head_norm_ ? head_dim_ : kvd, cfg.rms_eps));
}

torch::Tensor AttentionImpl::forward(const torch::Tensor& x, const PositionContext& ctx, torch::Tensor* probs_out) {
  const int64_t B = x.size(0), T = x.size(1);
  auto q = q_proj(x);  // (B, T, H·D)
  auto k = k_proj(x);  // (B, T, Hkv·D)
  auto v = v_proj(x);
  // QK-norm over the whole projection (DroPE reference) happens before splitting into heads.
  if (q_norm && !per_head_norm_) q = q_norm(q);
  if (k_norm && !per_head_norm_) k = k_norm(k);
  q = q.view({B, T, num_heads_, head_dim_}).transpose(1, 2);     // (B, H, T, D)
  k = k.view({B, T, num_kv_heads_, head_dim_}).transpose(1, 2);  // (B, Hkv, T, D)
  v = v.view({B, T, num_kv_heads_, head_dim_}).transpose(1, 2);  // (B, Hkv, T, D)
  if (q_norm && per_head_norm_) q = q_norm(q);
  if (k_norm && per_head_norm_) k = k_norm(k);
  positional_->encode(q, k, ctx);
  ops::AttentionParams p;
  p.causal = true;
  p.scale = ctx.logit_scale;
  p.q_offset = 0;
  positional_->configure(p);
  if (probs_out) *probs_out = ops::reference_attention_probs(q, k, p);
  auto o = ops::attention(q, k, v, p);                           // (B, H, T, D)
  o = o.transpose(1, 2).reshape({B, T, num_heads_ * head_dim_});
  return o_proj(o);
}

MlpImpl::MlpImpl(const ModelConfig& cfg) {
  using torch::nn::LinearOptions;
  const int64_t C = cfg.hidden_size, F = cfg.intermediate_size;
  gate_proj = register_module("gate_proj", torch::nn::Linear(LinearOptions(C, F).bias(cfg.mlp_bias)));
  up_proj = register_module("up_proj", torch::nn::Linear(LinearOptions(C, F).bias(cfg.mlp_bias)));
  down_proj = register_module("down_proj", torch::nn::Linear(LinearOptions(F, C).bias(cfg.mlp_bias)));
}

torch::Tensor MlpImpl::forward(const torch::Tensor& x) {
  return down_proj(torch::silu(gate_proj(x)) * up_proj(x));
}

DecoderLayerImpl::DecoderLayerImpl(const ModelConfig& cfg, const LayerPositional& layer) {
  self_attn = register_module("self_attn", Attention(cfg, layer));
  mlp = register_module("mlp", Mlp(cfg));
  input_layernorm = register_module("input_layernorm", RMSNorm(cfg.hidden_size, cfg.rms_eps));
  post_attention_layernorm = register_module("post_attention_layernorm", RMSNorm(cfg.hidden_size, cfg.rms_eps));
}

torch::Tensor DecoderLayerImpl::forward(const torch::Tensor& x, const PositionContext& ctx, torch::Tensor* probs) {
  auto h = x + self_attn(input_layernorm(x), ctx, probs);
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
  model = register_module("model", Decoder(cfg_));
  if (!cfg_.tie_embeddings)
    lm_head = register_module("lm_head",
                              torch::nn::Linear(torch::nn::LinearOptions(cfg_.hidden_size, cfg_.vocab_size).bias(false)));
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

PositionContext DecoderLMImpl::position_context(int64_t offset, int64_t T, torch::TensorOptions opt) const {
  PositionContext ctx;
  ctx.q_offset = offset;
  ctx.total_len = offset + T;
  const int64_t D = cfg_.resolved_head_dim();
  const double beta = softmax_temperature(cfg_.softmax_temperature, ctx.total_len, cfg_.max_position);
  ctx.logit_scale = beta / std::sqrt(double(D));
  if (any_rope_) {
    auto f = rope_frequencies(cfg_.positional.rope_theta, D, cfg_.positional.scaling, cfg_.max_position,
                              ctx.total_len);
    std::tie(ctx.cos, ctx.sin) = rotary_table(f.inv_freq, f.attention_factor, offset, T, opt);
  }
  return ctx;
}

torch::Tensor DecoderLMImpl::hidden(const torch::Tensor& ids, const ForwardOptions& opt) {
  TORCH_CHECK(ids.dim() == 2, "input_ids must be (B, T), got ", ids.sizes());
  auto x = model->embed_tokens(ids);  // (B, T, C)
  auto ctx = position_context(opt.position_offset, ids.size(1), x.options());
  if (opt.attention_probs) opt.attention_probs->clear();
  for (const auto& m : *model->layers) {
    torch::Tensor probs;
    x = m->as<DecoderLayer>()->forward(x, ctx, opt.attention_probs ? &probs : nullptr);
    if (opt.attention_probs) opt.attention_probs->push_back(probs);
  }
  return model->norm(x);
}

torch::Tensor DecoderLMImpl::lm_head_weight() { return lm_head ? lm_head->weight : model->embed_tokens->weight; }

torch::Tensor DecoderLMImpl::forward(const torch::Tensor& ids, const ForwardOptions& opt) {
  auto h = hidden(ids, opt);
  return torch::matmul(h, lm_head_weight().t());  // (B, T, V)
}

int64_t DecoderLMImpl::num_parameters() const {
  int64_t n = 0;
  for (const auto& p : parameters()) n += p.numel();
  return n;
}

}  // namespace drope
