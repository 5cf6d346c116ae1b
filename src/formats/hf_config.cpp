#include "drope/formats/hf_config.h"

#include <array>
#include <cmath>
#include <cstdint>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "drope/core/error.h"
#include "drope/core/json.h"
#include "drope/core/numbers.h"

using nlohmann::json;

namespace drope::io {

namespace {

// Reads `key` from `j` with a type check, or returns `def` when absent/null.
template <typename T>
T jget(const json& j, const char* key, T def, const std::string& path) {
  if (!j.contains(key) || j[key].is_null()) return def;
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    // Checked here: nlohmann converts floats to integers unchecked (1e300 → undefined behaviour).
    // Integral floats (4096.0) are accepted as Python's json writes them; beyond int64 is "out of range".
    const json& v = j[key];
    if (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>() && std::fabs(v.get<double>()) < 0x1p53)
      return static_cast<T>(v.get<double>());
    return static_cast<T>(json_int64(v, fmt::format("{}: key '{}'", path, key)));
  }
  if constexpr (std::is_floating_point_v<T>) {
    if (!j[key].is_number()) fail("{}: key '{}' must be a number, got {}", path, key, j[key].dump());
    return static_cast<T>(check_number(j[key].get<double>(), fmt::format("{}: key '{}'", path, key)));
  }
  try {
    return j[key].get<T>();
  } catch (const json::exception&) {
    fail("{}: key '{}' has the wrong type: {}", path, key, j[key].dump());
  }
}

int64_t first_id(const json& j, const char* key, int64_t def, const std::string& path) {
  if (!j.contains(key) || j[key].is_null()) return def;
  if (j[key].is_array() && j[key].empty()) return -1;
  const int64_t id =
      j[key].is_array() ? jget<int64_t>(json{{"v", j[key][0]}}, "v", -1, path) : jget<int64_t>(j, key, def, path);
  if (id < 0) fail("{}: {} must be a token id >= 0 or null, got {}", path, key, j[key].dump());
  return id;
}

// A special token id: one the file sets must be a row of the embedding (transformers would index past it), so it is
// refused; a default of transformers' beyond a small vocabulary means none.
int64_t special_token_id(const json& j, const char* key, int64_t def, int64_t vocab, const std::string& path) {
  const int64_t id = first_id(j, key, def, path);
  if (id < vocab) return id;
  if (!j.contains(key) || j[key].is_null() || vocab <= 0) return -1;  // vocab <= 0: validate() names vocab_size
  fail("{}: key '{}' = {} is outside the vocabulary [0, {}) (null for none)", path, key, id, vocab);
}

// YaRN / llama3 original context length L0: HF divides by it (0 → infinite factor, NaN frequencies).
int64_t original_max(const json& rp, int64_t max_position, const std::string& path) {
  const int64_t v = jget<int64_t>(rp, "original_max_position_embeddings", max_position, path);
  if (v <= 0) fail("{}: rope_parameters.original_max_position_embeddings must be > 0, got {}", path, v);
  return v;
}

// The DroPE authors' attention_type values (custom_models/drope.py) and our QK-norm mode for each.
constexpr std::array<std::pair<QkNorm, std::string_view>, 4> kAttentionTypes{
    {{QkNorm::kNone, "nope"}, {QkNorm::kQk, "qk_norm_nope"}, {QkNorm::kQ, "q_norm_nope"}, {QkNorm::kK, "k_norm_nope"}}};

std::string attention_type_names() {
  std::vector<std::string> v;
  for (const auto& e : kAttentionTypes) v.emplace_back(e.second);
  return join_names(v);
}

// One 0/1 entry of SmolLM3's no_rope_layers (1 = RoPE, 0 = NoPE; JSON booleans as Python writes them too).
bool rope_entry(const json& v, size_t i, const std::string& path) {
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_number_integer() && (v.get<int64_t>() == 0 || v.get<int64_t>() == 1)) return v.get<int64_t>() == 1;
  fail("{}: key 'no_rope_layers' entry {} must be 0 (NoPE) or 1 (RoPE), got {}", path, i, v.dump());
}

// SmolLM3's per-layer plan (transformers' SmolLM3Config): no_rope_layers[i] = 1 keeps RoPE, 0 drops it (absent:
// every no_rope_layer_interval-th layer is NoPE); layer_types[i] = "sliding_attention" restricts layer i to
// the last sliding_window keys (absent: NoPE layers slide when use_sliding_window and sliding_window are set).
void smollm3_layers(const json& j, ModelConfig& c, const std::string& path) {
  const size_t L = size_t(c.num_layers);
  std::vector<bool> rope(L);
  if (j.contains("no_rope_layers") && !j["no_rope_layers"].is_null()) {
    const json& v = j["no_rope_layers"];
    if (!v.is_array()) fail("{}: key 'no_rope_layers' must be a list of 0/1 per layer, got {}", path, v.dump());
    if (v.size() < L)
      fail("{}: key 'no_rope_layers' has {} entries but num_hidden_layers is {} (one 0/1 per layer)", path, v.size(),
           L);
    for (size_t i = 0; i < v.size(); ++i) {
      const bool r = rope_entry(v[i], i, path);
      if (i < L) rope[i] = r;
    }
  } else {
    const int64_t every = jget<int64_t>(j, "no_rope_layer_interval", 4, path);
    if (every <= 0) fail("{}: key 'no_rope_layer_interval' must be a positive integer, got {}", path, every);
    for (size_t i = 0; i < L; ++i) rope[i] = (int64_t(i) + 1) % every != 0;
  }
  const bool use_window = jget<bool>(j, "use_sliding_window", false, path);
  const int64_t window = jget<int64_t>(j, "sliding_window", 0, path);
  std::vector<bool> slide(L);
  if (j.contains("layer_types") && !j["layer_types"].is_null()) {
    const json& v = j["layer_types"];
    if (!v.is_array() || v.size() != L)
      fail("{}: key 'layer_types' must be a list of one entry per layer ({}), got {}", path, L,
           v.is_array() ? std::to_string(v.size()) + " entries" : v.dump());
    for (size_t i = 0; i < L; ++i) {
      const std::string t = v[i].is_string() ? v[i].get<std::string>() : v[i].dump();
      if (t != "full_attention" && t != "sliding_attention")
        fail("{}: key 'layer_types' entry {} is '{}' (expected full_attention or sliding_attention)", path, i, t);
      slide[i] = t == "sliding_attention";
    }
  } else if (use_window && j.contains("sliding_window") && !j["sliding_window"].is_null()) {
    for (size_t i = 0; i < L; ++i) slide[i] = !rope[i];
  }
  bool any_slide = false, any_nope = false;
  for (size_t i = 0; i < L; ++i) any_slide |= slide[i], any_nope |= !rope[i];
  if (any_slide && window <= 0)
    fail("{}: key 'sliding_window' must be a positive integer when a layer is sliding_attention, got {}", path,
         j.contains("sliding_window") ? j["sliding_window"].dump() : "nothing");
  c.positional.window = any_slide ? window : 0;
  if (!any_slide && !any_nope) return;  // RoPE everywhere: a plain Llama
  for (size_t i = 0; i < L; ++i)
    c.positional.layers.push_back(std::string(rope[i] ? "rope" : "nope") + (slide[i] ? "-swa" : ""));
}

// RoPE: HF v5 `rope_parameters`, or legacy `rope_scaling` + top-level `rope_theta`.
void import_rope(const json& j, bool smol, ModelConfig& c, const std::string& path) {
  json rp = json::object();
  for (const char* key : {"rope_parameters", "rope_scaling"})
    if (j.contains(key) && !j[key].is_null() && !j[key].is_object())
      fail("{}: {} must be an object or null, got {}", path, key, j[key].dump());
  if (j.contains("rope_parameters") && j["rope_parameters"].is_object()) rp = j["rope_parameters"];
  else if (j.contains("rope_scaling") && j["rope_scaling"].is_object()) rp = j["rope_scaling"];
  // Both present (drope writes both, for transformers 4.x and 5 readers): transformers reads rope_scaling first, so a
  // file whose two objects name different scalings would be another model there than here.
  // (An empty rope_scaling is no scaling to transformers either: `rope_scaling or rope_parameters`.)
  if (j.contains("rope_parameters") && j["rope_parameters"].is_object() && j.contains("rope_scaling") &&
      j["rope_scaling"].is_object() && !j["rope_scaling"].empty()) {
    const json& legacy = j["rope_scaling"];
    const auto type_of = [&](const json& o) {
      return jget<std::string>(o, "rope_type", jget<std::string>(o, "type", "default", path), path);
    };
    const auto factor_of = [&](const json& o) { return jget<double>(o, "factor", 1.0, path); };
    if (type_of(rp) != type_of(legacy) || factor_of(rp) != factor_of(legacy))
      fail("{}: rope_parameters ({} x{:g}) and rope_scaling ({} x{:g}) name different RoPE scalings; keep one", path,
           type_of(rp), factor_of(rp), type_of(legacy), factor_of(legacy));
    for (const auto& [key, value] : legacy.items())  // rope_theta, YaRN's betas, ...: read here from rope_parameters
      if (key != "type" && key != "rope_type" && rp.contains(key) && rp[key] != value)
        fail("{}: rope_parameters.{} ({}) and rope_scaling.{} ({}) differ; keep one", path, key, rp[key].dump(), key,
             value.dump());
  }
  c.positional.type = PositionalType::kRope;
  c.positional.rope_theta =
      jget<double>(rp, "rope_theta", jget<double>(j, "rope_theta", smol ? 2000000.0 : 10000.0, path), path);
  if (jget<double>(rp, "partial_rotary_factor", jget<double>(j, "partial_rotary_factor", 1.0, path), path) != 1.0)
    fail("{}: partial_rotary_factor != 1 is not supported", path);
  std::string rt = jget<std::string>(rp, "rope_type", jget<std::string>(rp, "type", "default", path), path);
  auto& s = c.positional.scaling;
  const std::string where = path + ": rope_parameters";
  auto factor = [&]() {
    if (!rp.contains("factor")) fail("{}: rope type '{}' needs 'factor'", where, rt);
    return jget<double>(rp, "factor", 1.0, path);
  };
  if (rt == "default") {
    s.type = RopeScalingType::kNone;
  } else if (rt == "linear") {
    s.type = RopeScalingType::kPi;
    s.factor = factor();
  } else if (rt == "dynamic") {
    s.type = RopeScalingType::kDynamicNtk;
    s.factor = factor();
    s.original_max_position = c.max_position;  // HF uses max_position_embeddings as L0
  } else if (rt == "yarn") {
    s.type = RopeScalingType::kYarn;
    s.original_max_position = original_max(rp, c.max_position, path);
    s.factor = rp.contains("factor") && !rp["factor"].is_null()
                   ? jget<double>(rp, "factor", 1.0, path)
                   : double(c.max_position) / double(s.original_max_position);
    s.beta_fast = jget<double>(rp, "beta_fast", 32.0, path);
    s.beta_slow = jget<double>(rp, "beta_slow", 1.0, path);
    s.truncate = jget<bool>(rp, "truncate", true, path);
    s.attention_factor = jget<double>(rp, "attention_factor", 0.0, path);
    const double mscale = jget<double>(rp, "mscale", 0.0, path), mall = jget<double>(rp, "mscale_all_dim", 0.0, path);
    if (s.attention_factor == 0.0 && mscale != 0.0 && mall != 0.0) {
      auto g = [&](double m) { return s.factor <= 1 ? 1.0 : 0.1 * m * std::log(s.factor) + 1.0; };
      s.attention_factor = g(mscale) / g(mall);
    }
  } else if (rt == "llama3") {
    // As transformers (_validate_llama3_rope_parameters, which then reads each key): no defaults.
    for (const char* key : {"original_max_position_embeddings", "low_freq_factor", "high_freq_factor"})
      if (!rp.contains(key) || rp[key].is_null()) fail("{}: rope type 'llama3' needs '{}'", where, key);
    s.type = RopeScalingType::kLlama3;
    s.factor = factor();
    s.original_max_position = original_max(rp, c.max_position, path);
    s.low_freq_factor = jget<double>(rp, "low_freq_factor", 1.0, path);
    s.high_freq_factor = jget<double>(rp, "high_freq_factor", 4.0, path);
  } else {
    fail("{}: rope type '{}' is not supported (expected default, linear, dynamic, yarn or llama3)", where, rt);
  }
}

// The DroPE authors' llama_drope / qwen2_drope: no RoPE, QK-norm per attention_type, softmax_scale.
void import_reference_attention(const json& j, HfImport& out, const std::string& path) {
  ModelConfig& c = out.config;
  // The authors' code replaces every layer's attention and rotates by the identity (cos = 1, sin = 0), so
  // RoPE and any RoPE scaling (YaRN's attention factor included) are gone; QK-norm per attention_type.
  c.positional.type = PositionalType::kNope;
  c.positional.scaling = RopeScalingConfig{};
  const std::string at = jget<std::string>(j, "attention_type", "nope", path);
  bool known = false;
  for (const auto& [mode, name] : kAttentionTypes)
    if (name == at) c.qk_norm = mode, known = true;
  if (!known) fail("{}: key 'attention_type' is '{}' (expected {})", path, at, attention_type_names());
  c.qk_norm_per_head = false;
  // softmax_scale replaces d_k^-1/2 (null: not set, as a config without the key).
  if (j.contains("softmax_scale") && !j["softmax_scale"].is_null()) {
    if (!j["softmax_scale"].is_number())
      fail("{}: key 'softmax_scale' must be a number, got {}", path, j["softmax_scale"].dump());
    c.softmax_scale =
        check_number(j["softmax_scale"].get<double>(), path + ": key 'softmax_scale'", Interval::positive());
  }
  // The q-only / k-only variants create both norms and save both; the other one is never applied.
  const int64_t D = c.num_heads > 0 && (c.head_dim > 0 || c.hidden_size % c.num_heads == 0) ? c.resolved_head_dim() : 0;
  if (c.qk_norm == QkNorm::kQ) out.unused.push_back({"self_attn.k_norm.weight", c.num_kv_heads * D});
  if (c.qk_norm == QkNorm::kK) out.unused.push_back({"self_attn.q_norm.weight", c.num_heads * D});
  if (!out.unused.empty()) out.unused_reason = "attention_type " + at + " does not apply it";
}

}  // namespace

HfImport import_hf_config(const std::string& text, const std::string& path) {
  const json j = parse_json(text, path);
  if (!j.is_object()) fail("{}: expected a JSON object", path);
  HfImport out;
  const std::string type = jget<std::string>(j, "model_type", "", path);
  out.model_type = type;
  const bool reference = type == "llama_drope" || type == "qwen2_drope";
  const bool smol = type == "smollm3";
  if (type != "llama" && type != "qwen2" && !reference && !smol)
    fail("{}: model_type '{}' is not supported (expected llama, qwen2, llama_drope, qwen2_drope or smollm3)", path,
         type);
  const bool qwen = type == "qwen2" || type == "qwen2_drope";
  ModelConfig& c = out.config;
  c.arch = qwen ? "qwen2" : "llama";
  // Defaults of transformers' LlamaConfig / Qwen2Config / SmolLM3Config for keys a file may omit.
  c.vocab_size = jget<int64_t>(j, "vocab_size", qwen ? 151936 : smol ? 128256 : 32000, path);
  c.hidden_size = jget<int64_t>(j, "hidden_size", smol ? 2048 : 4096, path);
  c.intermediate_size = jget<int64_t>(j, "intermediate_size", qwen ? 22016 : 11008, path);
  c.num_layers = jget<int64_t>(j, "num_hidden_layers", smol ? 36 : 32, path);
  c.num_heads = jget<int64_t>(j, "num_attention_heads", smol ? 16 : 32, path);
  c.num_kv_heads = jget<int64_t>(j, "num_key_value_heads", qwen ? 32 : smol ? 4 : c.num_heads, path);
  c.head_dim = jget<int64_t>(j, "head_dim", 0, path);
  c.rms_eps = jget<double>(j, "rms_norm_eps", 1e-6, path);
  c.tie_embeddings = jget<bool>(j, "tie_word_embeddings", smol, path);
  c.max_position = jget<int64_t>(j, "max_position_embeddings", qwen || smol ? 32768 : 2048, path);
  c.init_std = jget<double>(j, "initializer_range", 0.02, path);
  c.bos_token_id = special_token_id(j, "bos_token_id", qwen ? -1 : smol ? 128000 : 1, c.vocab_size, path);
  c.eos_token_id = special_token_id(j, "eos_token_id", qwen ? -1 : smol ? 128001 : 2, c.vocab_size, path);
  const std::string act = jget<std::string>(j, "hidden_act", "silu", path);
  if (act != "silu") fail("{}: hidden_act '{}' is not supported (expected silu)", path, act);
  if (qwen) {
    c.attention_bias = true;
    c.attention_out_bias = false;
    if (jget<bool>(j, "use_sliding_window", false, path))
      fail("{}: use_sliding_window=true is not supported for qwen2 imports", path);
  } else {
    c.attention_bias = c.attention_out_bias = jget<bool>(j, "attention_bias", false, path);
    c.mlp_bias = jget<bool>(j, "mlp_bias", false, path);
  }
  import_rope(j, smol, c, path);
  if (smol) {
    if (c.num_layers <= 0 || c.num_layers > 4096) c.validate(path);  // the size check before a per-layer list
    smollm3_layers(j, c, path);
  }
  if (reference) import_reference_attention(j, out, path);
  c.validate(path);
  return out;
}

ModelConfig parse_hf_config(const std::string& text, const std::string& path) {
  return import_hf_config(text, path).config;
}

namespace {

// The keys of an HF Llama/Qwen2 config.json that do not depend on the positional encoding.
json hf_shape_json(const ModelConfig& c, const std::string& architecture, const std::string& model_type) {
  const bool qwen = c.arch == "qwen2";
  json j;
  j["architectures"] = {architecture};
  j["model_type"] = model_type;
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["num_hidden_layers"] = c.num_layers;
  j["num_attention_heads"] = c.num_heads;
  j["num_key_value_heads"] = c.num_kv_heads;
  j["head_dim"] = c.resolved_head_dim();
  j["hidden_act"] = "silu";
  j["rms_norm_eps"] = c.rms_eps;
  j["tie_word_embeddings"] = c.tie_embeddings;
  j["max_position_embeddings"] = c.max_position;
  j["initializer_range"] = c.init_std;
  j["bos_token_id"] = c.bos_token_id >= 0 ? json(c.bos_token_id) : json(nullptr);
  j["eos_token_id"] = c.eos_token_id >= 0 ? json(c.eos_token_id) : json(nullptr);
  j["torch_dtype"] = "float32";
  if (qwen) {
    j["use_sliding_window"] = false;
  } else {
    j["attention_bias"] = c.attention_bias;
    j["mlp_bias"] = c.mlp_bias;
  }
  return j;
}

}  // namespace

std::string hf_config_json(const ModelConfig& c) {
  if (!c.hf_expressible()) fail("model cannot be expressed as an HF Llama/Qwen2 config (NoPE/ALiBi/window/QK-norm)");
  const bool qwen = c.arch == "qwen2";
  json j = hf_shape_json(c, qwen ? "Qwen2ForCausalLM" : "LlamaForCausalLM", c.arch);
  const auto& s = c.positional.scaling;
  json rp;
  rp["rope_theta"] = c.positional.rope_theta;
  const int64_t L0 = s.original_max_position > 0 ? s.original_max_position : c.max_position;
  if (s.type == RopeScalingType::kNone) {
    rp["rope_type"] = "default";
  } else if (s.type == RopeScalingType::kPi) {
    rp["rope_type"] = "linear";
    rp["factor"] = s.factor;
  } else if (s.type == RopeScalingType::kDynamicNtk) {
    if (L0 != c.max_position)
      fail("dynamic-ntk export needs original_max_position == max_position (HF uses the latter)");
    rp["rope_type"] = "dynamic";
    rp["factor"] = s.factor;
  } else if (s.type == RopeScalingType::kNtk) {
    // Static NTK is RoPE with a larger base.
    rp["rope_type"] = "default";
    const double d = double(c.resolved_head_dim());
    const double theta = c.positional.rope_theta * std::pow(s.factor, d / (d - 2.0));
    if (!std::isfinite(theta)) fail("ntk export: rope_theta · factor^(d/(d-2)) overflows a double");
    rp["rope_theta"] = theta;
  } else if (s.type == RopeScalingType::kYarn) {
    rp["rope_type"] = "yarn";
    rp["factor"] = s.factor;
    rp["original_max_position_embeddings"] = L0;
    rp["beta_fast"] = s.beta_fast;
    rp["beta_slow"] = s.beta_slow;
    rp["truncate"] = s.truncate;
    if (s.attention_factor > 0) rp["attention_factor"] = s.attention_factor;
  } else if (s.type == RopeScalingType::kLlama3) {
    rp["rope_type"] = "llama3";
    rp["factor"] = s.factor;
    rp["original_max_position_embeddings"] = L0;
    rp["low_freq_factor"] = s.low_freq_factor;
    rp["high_freq_factor"] = s.high_freq_factor;
  }
  j["rope_parameters"] = rp;
  // Legacy keys for transformers 4.x readers.
  j["rope_theta"] = rp["rope_theta"];
  if (s.type != RopeScalingType::kNone && s.type != RopeScalingType::kNtk) j["rope_scaling"] = rp;
  return j.dump(2) + "\n";
}

std::string drope_reference_config_json(const ModelConfig& c) {
  const std::string what = "the drope-reference format (the DroPE authors' llama_drope / qwen2_drope)";
  const auto plan = c.layer_plan();
  for (size_t i = 0; i < plan.size(); ++i)
    if (plan[i].kind != PositionalKind::kNope || plan[i].window != 0)
      fail("{} holds NoPE models with full attention in every layer, but layer {} is {}{} (drop the positional "
           "encoding first: drope-model drop)",
           what, i,
           plan[i].kind == PositionalKind::kRope    ? "RoPE"
           : plan[i].kind == PositionalKind::kAlibi ? "ALiBi"
                                                    : "NoPE",
           plan[i].window ? fmt::format(" with a sliding window of {}", plan[i].window) : "");
  if (c.qk_norm != QkNorm::kNone && c.qk_norm_per_head)
    fail("{} normalises the whole q/k projection; this model's QK-norm is per head", what);
  if (c.softmax_temperature != 0.0)
    fail("{} has no long-context temperature; this model has softmax_temperature c = {} (remove it or write the "
         "drope format)",
         what, c.softmax_temperature);
  if (!c.hf_shape_expressible()) fail("{} is an HF Llama/Qwen2 config; it cannot express this model's biases", what);
  const bool qwen = c.arch == "qwen2";
  json j = hf_shape_json(c, qwen ? "DroPEQwen2ForCausalLM" : "DroPELlamaForCausalLM", c.arch + "_drope");
  for (const auto& [mode, name] : kAttentionTypes)
    if (mode == c.qk_norm) j["attention_type"] = std::string(name);
  if (c.softmax_scale > 0) j["softmax_scale"] = c.softmax_scale;
  // The authors' model is built as a RoPE model whose rotation is then replaced by the identity: θ is unused.
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", c.positional.rope_theta}};
  j["rope_theta"] = c.positional.rope_theta;
  return j.dump(2) + "\n";
}

std::vector<UnusedTensor> drope_reference_extra_tensors(const ModelConfig& c) {
  const int64_t D = c.resolved_head_dim();
  if (c.qk_norm == QkNorm::kQ) return {{"self_attn.k_norm.weight", c.num_kv_heads * D}};
  if (c.qk_norm == QkNorm::kK) return {{"self_attn.q_norm.weight", c.num_heads * D}};
  return {};
}

}  // namespace drope::io
