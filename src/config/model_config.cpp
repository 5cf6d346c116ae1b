#include "drope/config/model_config.h"

#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "drope/core/error.h"
#include "drope/core/numbers.h"

namespace drope {

namespace {

ModelConfig make(int64_t vocab, int64_t hidden, int64_t mlp, int64_t layers, int64_t heads, int64_t kv,
                 int64_t head_dim, double theta, bool tied, int64_t ctx) {
  ModelConfig c;
  c.vocab_size = vocab;
  c.hidden_size = hidden;
  c.intermediate_size = mlp;
  c.num_layers = layers;
  c.num_heads = heads;
  c.num_kv_heads = kv;
  c.head_dim = head_dim;
  c.positional.rope_theta = theta;
  c.tie_embeddings = tied;
  c.max_position = ctx;
  return c;
}

const std::map<std::string, ModelConfig>& presets() {
  static const std::map<std::string, ModelConfig> table = [] {
    std::map<std::string, ModelConfig> t;
    // Paper Table 5 (appendix D). Qwen2-0.5B shape trained from scratch; vocab of Qwen2's tokenizer.
    t["qwen2-0.5b"] = make(151936, 896, 4864, 24, 14, 2, 64, 1e6, true, 1024);
    t["qwen2-0.5b"].arch = "qwen2";
    t["qwen2-0.5b"].attention_bias = true;
    t["smollm-360m"] = make(49152, 960, 2560, 32, 15, 5, 64, 1e4, true, 2048);
    t["smollm-360m"].rms_eps = 1e-5;
    // Tiny CPU presets: train in minutes on 2 cores.
    t["tiny"] = make(1024, 128, 384, 4, 4, 2, 32, 1e4, true, 256);
    t["tiny-256"] = make(2048, 256, 768, 4, 8, 2, 32, 1e4, true, 512);
    t["micro"] = make(256, 64, 128, 2, 4, 2, 16, 1e4, true, 64);
    // ~52M parameters (16.4M of them the tied 32K embedding): the mid-size CPU benchmark (drope-bench train).
    t["small-50m"] = make(32000, 512, 1536, 12, 8, 2, 64, 1e4, true, 1024);
    return t;
  }();
  return table;
}

}  // namespace

ModelConfig model_preset(const std::string& name) {
  auto it = presets().find(name);
  if (it == presets().end()) fail("unknown model preset '{}' (known: {})", name, fmt::join(model_preset_names(), ", "));
  return it->second;
}

std::vector<std::string> model_preset_names() {
  std::vector<std::string> v;
  for (const auto& kv : presets()) v.push_back(kv.first);
  return v;
}

LayerPositional parse_layer_positional(const std::string& name, int64_t window, const std::string& where) {
  if (name == "rope") return {PositionalKind::kRope, 0};
  if (name == "nope") return {PositionalKind::kNope, 0};
  if (name == "alibi") return {PositionalKind::kAlibi, 0};
  if (name == "rope-swa" || name == "nope-swa") {
    if (window <= 0) fail("{}: layer type '{}' needs positional.window > 0", where, name);
    return {name == "rope-swa" ? PositionalKind::kRope : PositionalKind::kNope, window};
  }
  fail("{}: unknown layer positional type '{}' (expected rope, nope, alibi, rope-swa or nope-swa)", where, name);
}

std::vector<LayerPositional> ModelConfig::layer_plan() const {
  std::vector<LayerPositional> plan;
  plan.reserve(num_layers);
  for (int64_t i = 0; i < num_layers; ++i) {
    if (!positional.layers.empty()) {
      plan.push_back(parse_layer_positional(positional.layers[i], positional.window, "positional.layers"));
    } else if (positional.type == PositionalType::kRope) {
      plan.push_back({PositionalKind::kRope, positional.window});
    } else if (positional.type == PositionalType::kNope) {
      plan.push_back({PositionalKind::kNope, positional.window});
    } else if (positional.type == PositionalType::kAlibi) {
      plan.push_back({PositionalKind::kAlibi, positional.window});
    } else {  // rnope-swa: 3 RoPE + sliding window layers, then one NoPE full-attention layer
      bool global = (i + 1) % 4 == 0;
      plan.push_back(global ? LayerPositional{PositionalKind::kNope, 0}
                            : LayerPositional{PositionalKind::kRope, positional.window});
    }
  }
  return plan;
}

bool ModelConfig::hf_shape_expressible() const {
  if (mlp_bias) return false;
  if (arch == "qwen2" && (attention_out_bias || !attention_bias)) return false;
  if (arch == "llama" && attention_bias != attention_out_bias) return false;
  return true;
}

bool ModelConfig::hf_expressible() const {
  if (qk_norm != QkNorm::kNone || softmax_temperature != 0.0 || softmax_scale != 0.0 || !hf_shape_expressible())
    return false;
  if (positional.scaling.type == RopeScalingType::kDynamicYarn) return false;
  for (const auto& l : layer_plan())
    if (l.kind != PositionalKind::kRope || l.window != 0) return false;
  return true;
}

double ModelConfig::parameter_count() const {
  const double H = double(hidden_size), V = double(vocab_size), I = double(intermediate_size), L = double(num_layers);
  const double D = double(resolved_head_dim()), nh = double(num_heads), nkv = double(num_kv_heads);
  const double q = nh * D, kv = nkv * D;
  double layer = H * q + 2 * H * kv + q * H + 3 * H * I + 2 * H;  // projections, SwiGLU, two norms
  if (attention_bias) layer += q + 2 * kv;
  if (attention_out_bias) layer += H;
  if (mlp_bias) layer += 2 * I + H;
  if (norms_queries(qk_norm)) layer += qk_norm_per_head ? D : q;
  if (norms_keys(qk_norm)) layer += qk_norm_per_head ? D : kv;
  return V * H * (tie_embeddings ? 1 : 2) + L * layer + H;
}

void ModelConfig::validate(const std::string& src) const {
  auto positive = [&](const char* key, int64_t v) {
    if (v <= 0) fail("{}: model.{} must be a positive integer, got {}", src, key, v);
  };
  if (arch != "llama" && arch != "qwen2") fail("{}: model.arch must be llama or qwen2, got '{}'", src, arch);
  positive("vocab_size", vocab_size);
  positive("hidden_size", hidden_size);
  positive("intermediate_size", intermediate_size);
  positive("num_layers", num_layers);
  positive("num_heads", num_heads);
  positive("num_kv_heads", num_kv_heads);
  positive("max_position", max_position);
  // Limits far above any real model, checked before anything is allocated: a file claiming 10^12
  // parameters (or a 2^40-row embedding) is an error, not an out-of-memory crash.
  auto at_most = [&](const char* key, int64_t v, int64_t hi) {
    if (v > hi) fail("{}: model.{} = {} is implausibly large (limit {})", src, key, v, hi);
  };
  at_most("vocab_size", vocab_size, int64_t{1} << 22);
  at_most("hidden_size", hidden_size, int64_t{1} << 16);
  at_most("intermediate_size", intermediate_size, int64_t{1} << 18);
  at_most("num_layers", num_layers, 4096);
  at_most("num_heads", num_heads, 4096);
  at_most("num_kv_heads", num_kv_heads, 4096);
  at_most("head_dim", head_dim, 4096);
  at_most("max_position", max_position, kMaxPosition);
  {
    const double hd = double(head_dim > 0 ? head_dim : hidden_size / num_heads), h = double(hidden_size);
    const double layer = h * hd * double(2 * num_heads + 2 * num_kv_heads) + 3.0 * h * double(intermediate_size);
    const double params = double(vocab_size) * h * (tie_embeddings ? 1 : 2) + double(num_layers) * layer;
    if (params > 0x1p40)
      fail("{}: the model would have {:.3g} parameters (limit 2^40 = {:.3g}); check the sizes", src, params, 0x1p40);
  }
  if (num_heads % num_kv_heads != 0)
    fail("{}: model.num_heads ({}) must be a multiple of model.num_kv_heads ({})", src, num_heads, num_kv_heads);
  if (head_dim < 0) fail("{}: model.head_dim must be >= 0 (0 = hidden_size / num_heads), got {}", src, head_dim);
  if (head_dim == 0 && hidden_size % num_heads != 0)
    fail("{}: model.hidden_size ({}) is not divisible by model.num_heads ({}); set model.head_dim", src, hidden_size,
         num_heads);
  if (resolved_head_dim() % 2 != 0) fail("{}: head dim {} must be even for RoPE", src, resolved_head_dim());
  // Every real-valued field: finite, and in the range the math needs (an infinite θ would silently
  // give NoPE; a zero YaRN β a NaN correction range).
  auto number = [&](const char* key, double v, const Interval& range) {
    check_number(v, fmt::format("{}: model.{}", src, key), range);
  };
  number("rms_eps", rms_eps, Interval::positive());
  number("init_std", init_std, Interval::positive());
  number("softmax_temperature", softmax_temperature, Interval::non_negative());
  number("softmax_scale", softmax_scale, Interval::non_negative());
  number("positional.rope_theta", positional.rope_theta, Interval::above(1));
  if (positional.window < 0) fail("{}: model.positional.window must be >= 0", src);
  if (positional.type == PositionalType::kRnopeSwa && positional.window <= 0)
    fail("{}: model.positional.type rnope-swa needs model.positional.window > 0", src);
  if (!positional.layers.empty()) {
    if ((int64_t)positional.layers.size() != num_layers)
      fail("{}: model.positional.layers has {} entries, expected one per layer ({})", src, positional.layers.size(),
           num_layers);
    for (const auto& l : positional.layers)
      parse_layer_positional(l, positional.window, src + ": model.positional.layers");
  }
  const auto& s = positional.scaling;
  number("positional.scaling.factor", s.factor,
         s.type != RopeScalingType::kNone ? scaling_factor_range() : Interval::any());
  if (s.original_max_position < 0) fail("{}: model.positional.scaling.original_max_position must be >= 0", src);
  number("positional.scaling.beta_fast", s.beta_fast, Interval::positive());
  number("positional.scaling.beta_slow", s.beta_slow, Interval::positive());
  number("positional.scaling.attention_factor", s.attention_factor, Interval::non_negative());
  number("positional.scaling.low_freq_factor", s.low_freq_factor, Interval::positive());
  number("positional.scaling.high_freq_factor", s.high_freq_factor, Interval::positive());
  if (s.type == RopeScalingType::kLlama3 && !(s.high_freq_factor > s.low_freq_factor))
    fail("{}: model.positional.scaling: high_freq_factor must exceed low_freq_factor", src);
  for (const auto& [key, id] :
       {std::pair<const char*, int64_t>{"bos_token_id", bos_token_id}, {"eos_token_id", eos_token_id}})
    if (id < -1 || id >= vocab_size)
      fail("{}: model.{} must be a token id in [0, vocab_size {}) or -1 (none), got {}", src, key, vocab_size, id);
}

ModelConfig parse_model_config(YamlMap m) {
  ModelConfig c;
  std::string preset;
  if (m.get("preset", preset)) {
    try {
      c = model_preset(preset);
    } catch (const Error& e) {
      fail("{}: {}", m.where("preset"), e.what());
    }
  }
  m.get_choice("arch", c.arch, {"llama", "qwen2"});
  m.get("vocab_size", c.vocab_size);
  m.get("hidden_size", c.hidden_size);
  m.get("intermediate_size", c.intermediate_size);
  m.get("num_layers", c.num_layers);
  m.get("num_heads", c.num_heads);
  m.get("num_kv_heads", c.num_kv_heads);
  m.get("head_dim", c.head_dim);
  m.get("rms_eps", c.rms_eps);
  m.get("tie_embeddings", c.tie_embeddings);
  m.get("attention_bias", c.attention_bias);
  m.get("attention_out_bias", c.attention_out_bias);
  m.get("mlp_bias", c.mlp_bias);
  m.get("max_position", c.max_position);
  m.get("init_std", c.init_std);
  get_name(m, "qk_norm", c.qk_norm);
  m.get("qk_norm_per_head", c.qk_norm_per_head);
  m.get("softmax_temperature", c.softmax_temperature);
  m.get("softmax_scale", c.softmax_scale);
  m.get("bos_token_id", c.bos_token_id);
  m.get("eos_token_id", c.eos_token_id);
  YamlMap p = m.map("positional");
  get_name(p, "type", c.positional.type);
  p.get("rope_theta", c.positional.rope_theta);
  p.get("window", c.positional.window);
  p.get("layers", c.positional.layers);
  YamlMap s = p.map("scaling");
  auto& sc = c.positional.scaling;
  get_name(s, "type", sc.type);
  s.get("factor", sc.factor);
  s.get("original_max_position", sc.original_max_position);
  s.get("beta_fast", sc.beta_fast);
  s.get("beta_slow", sc.beta_slow);
  s.get("attention_factor", sc.attention_factor);
  s.get("truncate", sc.truncate);
  s.get("low_freq_factor", sc.low_freq_factor);
  s.get("high_freq_factor", sc.high_freq_factor);
  s.finish();
  p.finish();
  m.finish();
  c.validate(m.source());
  return c;
}

ModelConfig load_model_config_file(const std::string& path) {
  YAML::Node root = load_yaml_file(path);
  if (root.IsMap() && root["model"]) {
    YamlMap top(root, path, "");
    YamlMap model = top.map("model");
    top.finish();
    return parse_model_config(model);
  }
  return parse_model_config(YamlMap(root, path, ""));
}

std::string model_config_to_yaml(const ModelConfig& c) {
  YAML::Emitter e;
  e << YAML::BeginMap;
  e << YAML::Key << "arch" << YAML::Value << c.arch;
  e << YAML::Key << "vocab_size" << YAML::Value << c.vocab_size;
  e << YAML::Key << "hidden_size" << YAML::Value << c.hidden_size;
  e << YAML::Key << "intermediate_size" << YAML::Value << c.intermediate_size;
  e << YAML::Key << "num_layers" << YAML::Value << c.num_layers;
  e << YAML::Key << "num_heads" << YAML::Value << c.num_heads;
  e << YAML::Key << "num_kv_heads" << YAML::Value << c.num_kv_heads;
  e << YAML::Key << "head_dim" << YAML::Value << c.head_dim;
  e << YAML::Key << "rms_eps" << YAML::Value << c.rms_eps;
  e << YAML::Key << "tie_embeddings" << YAML::Value << c.tie_embeddings;
  e << YAML::Key << "attention_bias" << YAML::Value << c.attention_bias;
  e << YAML::Key << "attention_out_bias" << YAML::Value << c.attention_out_bias;
  e << YAML::Key << "mlp_bias" << YAML::Value << c.mlp_bias;
  e << YAML::Key << "max_position" << YAML::Value << c.max_position;
  e << YAML::Key << "init_std" << YAML::Value << c.init_std;
  e << YAML::Key << "qk_norm" << YAML::Value << std::string(name_of(c.qk_norm));
  e << YAML::Key << "qk_norm_per_head" << YAML::Value << c.qk_norm_per_head;
  e << YAML::Key << "softmax_temperature" << YAML::Value << c.softmax_temperature;
  if (c.softmax_scale != 0.0) e << YAML::Key << "softmax_scale" << YAML::Value << c.softmax_scale;
  e << YAML::Key << "bos_token_id" << YAML::Value << c.bos_token_id;
  e << YAML::Key << "eos_token_id" << YAML::Value << c.eos_token_id;
  e << YAML::Key << "positional" << YAML::Value << YAML::BeginMap;
  e << YAML::Key << "type" << YAML::Value << std::string(name_of(c.positional.type));
  e << YAML::Key << "rope_theta" << YAML::Value << c.positional.rope_theta;
  e << YAML::Key << "window" << YAML::Value << c.positional.window;
  if (!c.positional.layers.empty()) e << YAML::Key << "layers" << YAML::Value << YAML::Flow << c.positional.layers;
  const auto& s = c.positional.scaling;
  e << YAML::Key << "scaling" << YAML::Value << YAML::BeginMap;
  e << YAML::Key << "type" << YAML::Value << std::string(name_of(s.type));
  e << YAML::Key << "factor" << YAML::Value << s.factor;
  e << YAML::Key << "original_max_position" << YAML::Value << s.original_max_position;
  e << YAML::Key << "beta_fast" << YAML::Value << s.beta_fast;
  e << YAML::Key << "beta_slow" << YAML::Value << s.beta_slow;
  e << YAML::Key << "attention_factor" << YAML::Value << s.attention_factor;
  e << YAML::Key << "truncate" << YAML::Value << s.truncate;
  e << YAML::Key << "low_freq_factor" << YAML::Value << s.low_freq_factor;
  e << YAML::Key << "high_freq_factor" << YAML::Value << s.high_freq_factor;
  e << YAML::EndMap << YAML::EndMap << YAML::EndMap;
  return std::string(e.c_str()) + "\n";
}

}  // namespace drope
