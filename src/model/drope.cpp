#include "drope/model/drope.h"

#include "drope/core/error.h"

namespace drope {

ModelConfig drop_positional(const ModelConfig& cfg, const DropOptions& opt) {
  ModelConfig out = cfg;
  const auto plan = cfg.layer_plan();
  bool windowed = false;
  for (const auto& l : plan) windowed |= l.window > 0;
  out.positional.layers.clear();
  if (windowed) {
    for (const auto& l : plan) out.positional.layers.push_back(l.window > 0 ? "nope-swa" : "nope");
    // All windowed layers share one window in the config.
    for (const auto& l : plan)
      if (l.window > 0) out.positional.window = l.window;
  } else {
    out.positional.window = 0;
  }
  out.positional.type = PositionalType::kNope;
  out.positional.scaling = RopeScalingConfig{};
  const auto norm_name = [](QkNorm n, bool per_head) {
    return fmt::format("{}{}", name_of(n), per_head ? " per head" : "");
  };
  if (cfg.qk_norm != QkNorm::kNone && opt.qk_norm != QkNorm::kNone &&
      (opt.qk_norm != cfg.qk_norm || opt.per_head != cfg.qk_norm_per_head))
    fail("the model already has QK-norm {}; dropping with QK-norm {} would replace its trained norm weights. Drop "
         "with QK-norm none to keep the model's (or the same mode), or start from a model without QK-norm",
         norm_name(cfg.qk_norm, cfg.qk_norm_per_head), norm_name(opt.qk_norm, opt.per_head));
  if (opt.qk_norm != QkNorm::kNone) {
    out.qk_norm = opt.qk_norm;
    out.qk_norm_per_head = opt.per_head;
  }
  out.validate("DroPE config");
  return out;
}

void copy_parameters(DecoderLM& dst, DecoderLM& src, const std::string& what) {
  torch::NoGradGuard ng;
  auto dparams = dst->named_parameters();
  for (const auto& kv : src->named_parameters()) {
    auto* d = dparams.find(kv.key());
    if (!d)
      fail("{}: the model's weight '{}' has no place in the result (the transform would drop it)", what, kv.key());
    if (d->sizes() != kv.value().sizes())
      fail("{}: the model's weight '{}' has shape {}, but the result needs {}", what, kv.key(),
           c10::str(kv.value().sizes()), c10::str(d->sizes()));
    d->copy_(kv.value());
  }
}

DecoderLM with_rope_scaling(DecoderLM& model, const RopeScalingConfig& s) {
  auto cfg = model->config();
  cfg.positional.scaling = s;
  DecoderLM out(cfg);
  copy_parameters(out, model, "RoPE scaling " + std::string(name_of(s.type)));
  return out;
}

DecoderLM drop_positional(DecoderLM& model, const DropOptions& opt) {
  DecoderLM out(drop_positional(model->config(), opt));
  // Norm weights that only the new model has stay at 1 (set by construction/reset_parameters).
  copy_parameters(out, model, "dropping the positional embeddings");
  auto p = model->parameters();
  if (!p.empty()) out->to(p.front().device(), p.front().scalar_type());
  return out;
}

}  // namespace drope
