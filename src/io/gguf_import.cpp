// GGUF → our config and HF-named weights (docs/gguf.md: key and tensor names, the rotary permutation).
#include "drope/io/gguf_import.h"

#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "drope/core/error.h"

namespace drope::io {

using nlohmann::json;

namespace {

std::string arch_of(const gguf::File& f) {
  const std::string a = f.get_string("general.architecture");
  if (a != "llama" && a != "qwen2")
    fail("{}: general.architecture \"{}\" is not supported (expected llama or qwen2)", f.path(), a);
  return a;
}

// A positive integer metadata value.
int64_t positive(const gguf::File& f, const std::string& key, int64_t limit) {
  const int64_t v = f.get_int(key);
  if (v < 1 || v > limit) fail("{}: metadata '{}' = {} must be in [1, {}]", f.path(), key, v, limit);
  return v;
}

}  // namespace

std::string gguf_hf_config_json(const gguf::File& f) {
  const std::string a = arch_of(f);
  const std::string p = a + ".";
  json j;
  j["model_type"] = a;
  j["architectures"] = json::array({a == "llama" ? "LlamaForCausalLM" : "Qwen2ForCausalLM"});
  j["hidden_size"] = positive(f, p + "embedding_length", int64_t{1} << 20);
  j["intermediate_size"] = positive(f, p + "feed_forward_length", int64_t{1} << 22);
  j["num_hidden_layers"] = positive(f, p + "block_count", 4096);
  const int64_t heads = positive(f, p + "attention.head_count", 4096);
  j["num_attention_heads"] = heads;
  j["num_key_value_heads"] =
      f.has(p + "attention.head_count_kv") ? positive(f, p + "attention.head_count_kv", 4096) : heads;
  j["max_position_embeddings"] = positive(f, p + "context_length", int64_t{1} << 30);
  j["rms_norm_eps"] = f.get_float(p + "attention.layer_norm_rms_epsilon", a == "llama" ? 1e-5 : 1e-6);
  j["rope_theta"] = f.get_float(p + "rope.freq_base", 10000.0);
  j["hidden_act"] = "silu";
  const int64_t hidden = j["hidden_size"].get<int64_t>();
  const int64_t head_dim =
      f.has(p + "attention.key_length") ? positive(f, p + "attention.key_length", 4096) : hidden / heads;
  if (f.has(p + "attention.value_length") && f.get_int(p + "attention.value_length") != head_dim)
    fail("{}: {}attention.value_length differs from the key length {} (not supported)", f.path(), p, head_dim);
  if (f.has(p + "rope.dimension_count") && f.get_int(p + "rope.dimension_count") != head_dim)
    fail("{}: {}rope.dimension_count = {} rotates part of each head of {} (partial rotary is not supported)", f.path(),
         p, f.get_int(p + "rope.dimension_count"), head_dim);
  j["head_dim"] = head_dim;
  const gguf::TensorInfo* embd = f.tensor("token_embd.weight");
  if (!embd || embd->dims.size() != 2) fail("{}: tensor 'token_embd.weight' (2-D) is missing", f.path());
  j["vocab_size"] = embd->dims[1];
  j["tie_word_embeddings"] = f.tensor("output.weight") == nullptr;
  if (a == "llama") {
    j["attention_bias"] = f.tensor("blk.0.attn_q.bias") != nullptr;
    j["mlp_bias"] = f.tensor("blk.0.ffn_gate.bias") != nullptr;
  }
  for (const char* k : {"bos_token_id", "eos_token_id"}) {
    const std::string key = std::string("tokenizer.ggml.") + k;
    if (!f.has(key)) continue;
    const int64_t id = f.get_int(key);
    if (id < 0 || id >= embd->dims[1])
      fail("{}: {} = {} is outside the vocabulary [0, {}) of token_embd.weight", f.path(), key, id, embd->dims[1]);
    j[k] = id;
  }
  // As llama.cpp reads them: the type defaults to linear, the factor is rope.scaling.factor or the older
  // rope.scale_linear, and a factor of 0 (or none) means no scaling, whatever the type.
  const std::string factor_key =
      f.has(p + "rope.scaling.factor") || !f.has(p + "rope.scale_linear") ? "rope.scaling.factor" : "rope.scale_linear";
  const double factor = f.get_float(p + factor_key, 0.0);
  std::string scaling = f.get_string(p + "rope.scaling.type", "linear");
  if ((scaling == "linear" || scaling == "yarn") && (factor == 0.0 || factor == 1.0)) scaling = "none";
  if (scaling == "linear" || scaling == "yarn") {
    json rs = {{"rope_type", scaling}, {"factor", factor}};
    if (f.has(p + "rope.scaling.original_context_length"))
      rs["original_max_position_embeddings"] = f.get_int(p + "rope.scaling.original_context_length");
    j["rope_scaling"] = rs;
  } else if (scaling != "none") {
    fail("{}: {}rope.scaling.type \"{}\" is not supported (expected none, linear or yarn)", f.path(), p, scaling);
  }
  if (f.tensor("rope_freqs.weight"))
    fail("{}: tensor 'rope_freqs.weight' (per-frequency RoPE factors) is not supported", f.path());
  return j.dump(2);
}

HfImport import_gguf_config(const gguf::File& f) {
  return import_hf_config(gguf_hf_config_json(f), f.path() + " (GGUF metadata)");
}

std::vector<GgufTensorMap> map_gguf_tensors(const gguf::File& f, const ModelConfig& cfg) {
  const bool llama = arch_of(f) == "llama";
  const int64_t H = cfg.hidden_size, D = cfg.resolved_head_dim(), I = cfg.intermediate_size;
  std::vector<GgufTensorMap> out;
  std::set<std::string> used;
  const auto add = [&](const std::string& hf, const std::string& gg, std::vector<int64_t> shape, int64_t heads = 0) {
    const gguf::TensorInfo* t = f.tensor(gg);
    if (!t) fail("{}: tensor '{}' (for {}) is missing", f.path(), gg, hf);
    if (t->shape() != shape)
      fail("{}: tensor '{}' has shape {} but the metadata implies {}", f.path(), gg, json(t->shape()).dump(),
           json(shape).dump());
    out.push_back({hf, t, std::move(shape), llama ? heads : 0});
    used.insert(gg);
  };
  add("model.embed_tokens.weight", "token_embd.weight", {cfg.vocab_size, H});
  add("model.norm.weight", "output_norm.weight", {H});
  if (!cfg.tie_embeddings) add("lm_head.weight", "output.weight", {cfg.vocab_size, H});
  for (int64_t l = 0; l < cfg.num_layers; ++l) {
    const std::string hf = "model.layers." + std::to_string(l) + ".", gg = "blk." + std::to_string(l) + ".";
    add(hf + "input_layernorm.weight", gg + "attn_norm.weight", {H});
    add(hf + "post_attention_layernorm.weight", gg + "ffn_norm.weight", {H});
    add(hf + "self_attn.q_proj.weight", gg + "attn_q.weight", {cfg.num_heads * D, H}, cfg.num_heads);
    add(hf + "self_attn.k_proj.weight", gg + "attn_k.weight", {cfg.num_kv_heads * D, H}, cfg.num_kv_heads);
    add(hf + "self_attn.v_proj.weight", gg + "attn_v.weight", {cfg.num_kv_heads * D, H});
    add(hf + "self_attn.o_proj.weight", gg + "attn_output.weight", {H, cfg.num_heads * D});
    if (cfg.attention_bias) {
      add(hf + "self_attn.q_proj.bias", gg + "attn_q.bias", {cfg.num_heads * D}, cfg.num_heads);
      add(hf + "self_attn.k_proj.bias", gg + "attn_k.bias", {cfg.num_kv_heads * D}, cfg.num_kv_heads);
      add(hf + "self_attn.v_proj.bias", gg + "attn_v.bias", {cfg.num_kv_heads * D});
    }
    if (cfg.attention_out_bias) add(hf + "self_attn.o_proj.bias", gg + "attn_output.bias", {H});
    add(hf + "mlp.gate_proj.weight", gg + "ffn_gate.weight", {I, H});
    add(hf + "mlp.up_proj.weight", gg + "ffn_up.weight", {I, H});
    add(hf + "mlp.down_proj.weight", gg + "ffn_down.weight", {H, I});
    if (cfg.mlp_bias) {
      add(hf + "mlp.gate_proj.bias", gg + "ffn_gate.bias", {I});
      add(hf + "mlp.up_proj.bias", gg + "ffn_up.bias", {I});
      add(hf + "mlp.down_proj.bias", gg + "ffn_down.bias", {H});
    }
  }
  for (const auto& t : f.header().tensors)
    if (!used.count(t.name))
      fail("{}: unexpected tensor '{}' (not part of a {}-layer {} model)", f.path(), t.name, cfg.num_layers,
           llama ? "llama" : "qwen2");
  return out;
}

at::Tensor read_gguf_tensor(const gguf::File& f, const GgufTensorMap& m) {
  at::Tensor t = at::empty(m.shape, at::kFloat);
  f.read_float(*m.info, t.data_ptr<float>());
  const int64_t bad = t.numel() - at::isfinite(t).sum().item<int64_t>();
  if (bad > 0)
    fail("{}: tensor '{}' ({}) has {} non-finite value(s)", f.path(), m.info->name, gguf::type_label(m.info->type),
         bad);
  if (m.permute_heads > 0) {
    // llama.cpp stores each head's rows interleaved (pairs (j, j + D/2) side by side) for its rotary
    // kernel; HF's rotate-half layout has the two halves apart. Rows r = 2j + s go back to s·D/2 + j.
    const int64_t rows = m.shape[0], heads = m.permute_heads;
    if (rows % (2 * heads) != 0)
      fail("{}: tensor '{}' has {} rows, not whole heads of even size ({} heads)", f.path(), m.info->name, rows, heads);
    std::vector<int64_t> split = {heads, rows / heads / 2, 2};
    for (size_t k = 1; k < m.shape.size(); ++k) split.push_back(m.shape[k]);
    t = t.reshape(split).transpose(1, 2).reshape(m.shape).contiguous();
  }
  return t;
}

}  // namespace drope::io
