#include "drope/io/hf_config.h"

#include <cmath>
#include <cstdint>
#include <type_traits>

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
  if (j[key].is_array()) return j[key].empty() ? -1 : jget<int64_t>(json{{"v", j[key][0]}}, "v", -1, path);
  return jget<int64_t>(j, key, def, path);
}

// YaRN / llama3 original context length L0: HF divides by it (0 → infinite factor, NaN frequencies).
int64_t original_max(const json& rp, int64_t max_position, const std::string& path) {
  const int64_t v = jget<int64_t>(rp, "original_max_position_embeddings", max_position, path);
  if (v <= 0) fail("{}: rope_parameters.original_max_position_embeddings must be > 0, got {}", path, v);
  return v;
}

}  // namespace

ModelConfig parse_hf_config(const std::string& text, const std::string& path) {
  const json j = parse_json(text, path);
  if (!j.is_object()) fail("{}: expected a JSON object", path);
  const std::string type = jget<std::string>(j, "model_type", "", path);
  if (type != "llama" && type != "qwen2")
    fail("{}: model_type '{}' is not supported (expected llama or qwen2)", path, type);
  const bool qwen = type == "qwen2";
  ModelConfig c;
  c.arch = type;
  c.vocab_size = jget<int64_t>(j, "vocab_size", qwen ? 151936 : 32000, path);
  c.hidden_size = jget<int64_t>(j, "hidden_size", 4096, path);
  c.intermediate_size = jget<int64_t>(j, "intermediate_size", qwen ? 22016 : 11008, path);
  c.num_layers = jget<int64_t>(j, "num_hidden_layers", 32, path);
  c.num_heads = jget<int64_t>(j, "num_attention_heads", 32, path);
  c.num_kv_heads = jget<int64_t>(j, "num_key_value_heads", qwen ? 32 : c.num_heads, path);
  c.head_dim = jget<int64_t>(j, "head_dim", 0, path);
  c.rms_eps = jget<double>(j, "rms_norm_eps", 1e-6, path);
  c.tie_embeddings = jget<bool>(j, "tie_word_embeddings", false, path);
  c.max_position = jget<int64_t>(j, "max_position_embeddings", qwen ? 32768 : 2048, path);
  c.init_std = jget<double>(j, "initializer_range", 0.02, path);
  c.bos_token_id = first_id(j, "bos_token_id", qwen ? -1 : 1, path);
  c.eos_token_id = first_id(j, "eos_token_id", qwen ? -1 : 2, path);
  if (c.bos_token_id >= c.vocab_size) c.bos_token_id = -1;
  if (c.eos_token_id >= c.vocab_size) c.eos_token_id = -1;
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
  // RoPE: HF v5 `rope_parameters`, or legacy `rope_scaling` + top-level `rope_theta`.
  json rp = json::object();
  if (j.contains("rope_parameters") && j["rope_parameters"].is_object()) rp = j["rope_parameters"];
  else if (j.contains("rope_scaling") && j["rope_scaling"].is_object()) rp = j["rope_scaling"];
  c.positional.type = PositionalType::kRope;
  c.positional.rope_theta = jget<double>(rp, "rope_theta", jget<double>(j, "rope_theta", 10000.0, path), path);
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
    s.type = RopeScalingType::kLlama3;
    s.factor = factor();
    s.original_max_position = original_max(rp, c.max_position, path);
    s.low_freq_factor = jget<double>(rp, "low_freq_factor", 1.0, path);
    s.high_freq_factor = jget<double>(rp, "high_freq_factor", 4.0, path);
  } else {
    fail("{}: rope type '{}' is not supported (expected default, linear, dynamic, yarn or llama3)", where, rt);
  }
  c.validate(path);
  return c;
}

std::string hf_config_json(const ModelConfig& c) {
  if (!c.hf_expressible()) fail("model cannot be expressed as an HF Llama/Qwen2 config (NoPE/ALiBi/window/QK-norm)");
  const bool qwen = c.arch == "qwen2";
  json j;
  j["architectures"] = {qwen ? "Qwen2ForCausalLM" : "LlamaForCausalLM"};
  j["model_type"] = c.arch;
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
    if (L0 != c.max_position) fail("dynamic-ntk export needs original_max_position == max_position (HF uses the latter)");
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

}  // namespace drope::io
