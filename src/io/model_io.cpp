#include "drope/io/model_io.h"

#include <filesystem>
#include <memory>
#include <optional>
#include <set>

#include <nlohmann/json.hpp>

#include "drope/core/error.h"
#include "drope/core/files.h"
#include "drope/core/json.h"
#include "drope/core/log.h"
#include "drope/formats/checkpoint_digest.h"
#include "drope/io/gguf_import.h"
#include "drope/io/safetensors.h"
#include "drope/model/drope.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace drope::io {

std::vector<std::string> import_positional_names() {
  return {std::string(name_of(PositionalType::kRope)), std::string(name_of(PositionalType::kNope))};
}

void check_import_positional(PositionalType t, const std::string& where) {
  if (t != PositionalType::kRope && t != PositionalType::kNope)
    fail("{}: an imported model's positional type can be overridden with {}, not {}", where,
         join_names(import_positional_names()), t);
}

namespace {
void read_dir_source(const std::string& dir, ModelSource& src);
void apply_import_options(const ImportOptions& opt, ModelSource& src);

// The source of an open GGUF file (one parse serves the config and the tensors).
ModelSource gguf_source(const gguf::File& f, const std::string& path, const ImportOptions& opt) {
  ModelSource src;
  src.config_file = path;
  src.config = import_gguf_config(f).config;
  apply_import_options(opt, src);
  return src;
}
}  // namespace

ModelSource read_model_source(const std::string& dir, const ImportOptions& opt) {
  if (gguf::is_gguf_path(dir) && !fs::is_directory(dir)) return gguf_source(gguf::File(dir), dir, opt);
  ModelSource src;
  read_dir_source(dir, src);
  apply_import_options(opt, src);
  return src;
}

namespace {
// drope.yaml describes a model directory; the config.json beside it (written for transformers) must describe
// the same model. Compares every key the config.json expresses but initializer_range (which only matters to
// a fresh initialisation); the first disagreement is an error naming the key and both values.
void check_configs_agree(const ModelConfig& ours_in, const ModelConfig& hf, const std::string& yaml_path,
                         const std::string& json_path) {
  // Through the writer's own spelling where it applies (an unset token id written as null reads back as
  // Llama's default; an original_max_position of 0 is written resolved).
  const ModelConfig rt = ours_in.hf_expressible() ? parse_hf_config(hf_config_json(ours_in), yaml_path) : ours_in;
  const ModelConfig& ours = rt;
  auto same = [&](const char* json_key, const char* yaml_key, const auto& a, const auto& b) {
    if (fmt::format("{}", a) == fmt::format("{}", b)) return;
    fail("{}: '{}' is {}, but {} says {} ({}): the two configs of this model directory disagree (drope.yaml is the "
         "one read; fix or remove config.json)",
         json_path, json_key, b, yaml_path, a, yaml_key);
  };
  // What config.json cannot express first: the plan, QK-norm and logit scaling.
  const auto a = ours_in.layer_plan(), b = hf.layer_plan();
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    const auto kind = [](const LayerPositional& l) {
      return fmt::format("{}{}",
                         l.kind == PositionalKind::kRope   ? "rope"
                         : l.kind == PositionalKind::kNope ? "nope"
                                                           : "alibi",
                         l.window > 0 ? fmt::format(" with window {}", l.window) : "");
    };
    if (!(a[i] == b[i]))
      same("model_type", fmt::format("model.positional, layer {}", i).c_str(), kind(a[i]), kind(b[i]));
  }
  same("attention_type", "model.qk_norm", ours_in.qk_norm, hf.qk_norm);
  if (ours_in.qk_norm != QkNorm::kNone)
    same("attention_type", "model.qk_norm_per_head", ours_in.qk_norm_per_head, hf.qk_norm_per_head);
  same("softmax_scale", "model.softmax_scale", ours_in.softmax_scale, hf.softmax_scale);
  same("(none: config.json has no long-context temperature)", "model.softmax_temperature", ours_in.softmax_temperature,
       hf.softmax_temperature);
  same("model_type", "model.arch", ours.arch, hf.arch);
  same("vocab_size", "model.vocab_size", ours.vocab_size, hf.vocab_size);
  same("hidden_size", "model.hidden_size", ours.hidden_size, hf.hidden_size);
  same("intermediate_size", "model.intermediate_size", ours.intermediate_size, hf.intermediate_size);
  same("num_hidden_layers", "model.num_layers", ours.num_layers, hf.num_layers);
  same("num_attention_heads", "model.num_heads", ours.num_heads, hf.num_heads);
  same("num_key_value_heads", "model.num_kv_heads", ours.num_kv_heads, hf.num_kv_heads);
  same("head_dim", "model.head_dim", ours.resolved_head_dim(), hf.resolved_head_dim());
  same("rms_norm_eps", "model.rms_eps", ours.rms_eps, hf.rms_eps);
  same("tie_word_embeddings", "model.tie_embeddings", ours.tie_embeddings, hf.tie_embeddings);
  same("max_position_embeddings", "model.max_position", ours.max_position, hf.max_position);
  same("bos_token_id", "model.bos_token_id", ours.bos_token_id, hf.bos_token_id);
  same("eos_token_id", "model.eos_token_id", ours.eos_token_id, hf.eos_token_id);
  same("attention_bias", "model.attention_bias", ours.attention_bias, hf.attention_bias);
  same("attention_bias", "model.attention_out_bias", ours.attention_out_bias, hf.attention_out_bias);
  same("mlp_bias", "model.mlp_bias", ours.mlp_bias, hf.mlp_bias);
  if (!ours_in.hf_expressible()) return;
  const auto &p = ours.positional, &q = hf.positional;
  same("rope_theta", "model.positional.rope_theta", p.rope_theta, q.rope_theta);
  same("rope_parameters.rope_type", "model.positional.scaling.type", p.scaling.type, q.scaling.type);
  same("rope_parameters.factor", "model.positional.scaling.factor", p.scaling.factor, q.scaling.factor);
  same("rope_parameters.original_max_position_embeddings", "model.positional.scaling.original_max_position",
       p.scaling.original_max_position, q.scaling.original_max_position);
  same("rope_parameters.attention_factor", "model.positional.scaling.attention_factor", p.scaling.attention_factor,
       q.scaling.attention_factor);
  same("rope_parameters.beta_fast", "model.positional.scaling.beta_fast", p.scaling.beta_fast, q.scaling.beta_fast);
  same("rope_parameters.beta_slow", "model.positional.scaling.beta_slow", p.scaling.beta_slow, q.scaling.beta_slow);
  same("rope_parameters.truncate", "model.positional.scaling.truncate", p.scaling.truncate, q.scaling.truncate);
  same("rope_parameters.low_freq_factor", "model.positional.scaling.low_freq_factor", p.scaling.low_freq_factor,
       q.scaling.low_freq_factor);
  same("rope_parameters.high_freq_factor", "model.positional.scaling.high_freq_factor", p.scaling.high_freq_factor,
       q.scaling.high_freq_factor);
}

void read_dir_source(const std::string& dir, ModelSource& src) {
  if (!fs::is_directory(dir)) fail("{}: model directory not found", dir);
  const auto ours = (fs::path(dir) / "drope.yaml").string();
  const auto hf = (fs::path(dir) / "config.json").string();
  if (fs::exists(ours)) {
    src.config_file = ours;
    src.config = load_model_config_file(ours);
    if (fs::exists(hf))
      check_configs_agree(src.config, import_hf_config(read_file(hf, kMaxConfigBytes), hf).config, ours, hf);
  } else if (fs::exists(hf)) {
    src.config_file = hf;
    HfImport imp = import_hf_config(read_file(hf, kMaxConfigBytes), hf);
    src.config = std::move(imp.config);
    src.unused = std::move(imp.unused);
    src.unused_reason = std::move(imp.unused_reason);
  } else {
    fail("{}: neither drope.yaml nor config.json found; not a model directory", dir);
  }
}

void apply_import_options(const ImportOptions& opt, ModelSource& src) {
  if (opt.positional) {
    check_import_positional(*opt.positional, "positional override");
    ModelConfig& c = src.config;
    if (*opt.positional == PositionalType::kNope) {
      c = drop_positional(c);  // every layer NoPE, windows kept, RoPE scaling removed; QK-norm as it was
    } else {
      bool windowed = false;
      for (const auto& l : c.layer_plan()) windowed |= l.window > 0;
      if (windowed)
        fail("{}: positional override rope: the model has sliding-window layers; edit its plan instead",
             src.config_file);
      c.positional.type = PositionalType::kRope;
      c.positional.layers.clear();
    }
    c.validate(src.config_file + " (positional override " + std::string(name_of(*opt.positional)) + ")");
  }
}
}  // namespace

ModelConfig load_model_config_dir(const std::string& dir, const ImportOptions& opt) {
  return read_model_source(dir, opt).config;
}

namespace {

// The safetensors files of a directory and which file holds each tensor.
struct WeightSet {
  std::vector<std::unique_ptr<SafetensorsFile>> files;
  std::map<std::string, const SafetensorsFile*> where;
};

WeightSet open_weights(const std::string& dir) {
  WeightSet ws;
  const auto single = (fs::path(dir) / "model.safetensors").string();
  const auto index = (fs::path(dir) / "model.safetensors.index.json").string();
  if (fs::exists(single)) {
    ws.files.push_back(std::make_unique<SafetensorsFile>(single));
    for (const auto& kv : ws.files.back()->header().tensors) ws.where[kv.first] = ws.files.back().get();
    return ws;
  }
  if (!fs::exists(index)) fail("{}: no model.safetensors or model.safetensors.index.json", dir);
  // A shard that cannot be read, or that lacks a tensor the index puts there, is named with the index key
  // that points at it: the index is what the user can check against the directory.
  const auto weight_map = parse_safetensors_index(read_file(index, kMaxConfigBytes), index);
  std::map<std::string, std::vector<std::string>> keys_of;  // shard → the keys that name it
  for (const auto& [key, file] : weight_map) keys_of[file].push_back(key);
  std::map<std::string, const SafetensorsFile*> shard;
  for (const auto& [file, keys] : keys_of) {
    const std::string p = (fs::path(dir) / file).string();
    const std::string named_by = fmt::format("weight_map['{}']{}", keys.front(),
                                             keys.size() > 1 ? fmt::format(" (and {} more)", keys.size() - 1) : "");
    try {
      ws.files.push_back(std::make_unique<SafetensorsFile>(p));
    } catch (const Error& e) {
      fail("{}: {} names the shard {}: {}", index, named_by, file, e.what());
    }
    shard[file] = ws.files.back().get();
    for (const auto& kv : ws.files.back()->header().tensors) {
      // A tensor the index does not list would be used here but reported missing (and re-initialised) by
      // transformers: the index and its shards disagree, so neither reading is right.
      if (!weight_map.count(kv.first))
        fail("{}: tensor '{}' is in the shard {} but not in the weight_map; the index and its shards disagree", index,
             kv.first, file);
      if (ws.where.count(kv.first)) fail("{}: tensor '{}' also appears in {}", p, kv.first, ws.where[kv.first]->path());
      ws.where[kv.first] = ws.files.back().get();
    }
  }
  for (const auto& [key, file] : weight_map)
    if (!shard[file]->contains(key))
      fail("{}: weight_map['{}'] names the shard {}, which holds no tensor '{}'{}", index, key, file, key,
           ws.where.count(key) ? fmt::format(" (it is in {})", ws.where[key]->path()) : "");
  return ws;
}

bool is_float_dtype(const std::string& dtype) {
  return dtype == "F32" || dtype == "F16" || dtype == "BF16" || dtype == "F64";
}

bool ignorable(const std::string& name) {
  return name.size() > 21 && name.compare(name.size() - 21, 21, "rotary_emb.inv_freq") == 0;
}

}  // namespace

namespace {
// The layer index and in-layer name of "model.layers.<i>.<suffix>", or false.
bool split_layer_name(const std::string& name, int64_t* layer, std::string* suffix) {
  static const std::string prefix = "model.layers.";
  if (name.compare(0, prefix.size(), prefix) != 0) return false;
  const size_t dot = name.find('.', prefix.size());
  if (dot == std::string::npos || dot == prefix.size() || dot - prefix.size() > 6) return false;
  int64_t i = 0;
  for (size_t k = prefix.size(); k < dot; ++k) {
    if (name[k] < '0' || name[k] > '9') return false;
    i = i * 10 + (name[k] - '0');
  }
  *layer = i;
  *suffix = name.substr(dot + 1);
  return true;
}

// A tied model's head is its embedding: a stored lm_head.weight must be a copy of it (some exporters write one),
// never a different matrix that would be silently dropped.
void check_tied_head(DecoderLM& model, const SafetensorsFile& f, const std::string& config_file) {
  const auto& e = f.header().tensors.at("lm_head.weight");
  const at::Tensor embed = model->named_parameters()["model.embed_tokens.weight"];
  if (at::IntArrayRef(e.shape) != embed.sizes())
    fail("{}: tensor 'lm_head.weight' has shape {} but the tied embedding has {}", f.path(),
         c10::str(at::IntArrayRef(e.shape)), c10::str(embed.sizes()));
  if (!is_float_dtype(e.dtype) || !torch::equal(f.get("lm_head.weight").to(embed.scalar_type()), embed))
    fail("{}: tensor 'lm_head.weight' differs from 'model.embed_tokens.weight', but {} ties them "
         "(tie_word_embeddings / model.tie_embeddings), so the stored head would be ignored; untie them in the "
         "config or remove the tensor",
         f.path(), config_file);
}

// Copies every parameter of `model` from the opened weight files of `dir`; the source's unused tensors
// (checked for shape) are skipped with one warning.
void load_weights_from(DecoderLM& model, const WeightSet& ws, const std::string& dir, const ModelSource& src) {
  torch::NoGradGuard ng;
  auto params = model->named_parameters();
  std::set<std::string> used;
  for (auto& kv : params) {
    auto it = ws.where.find(kv.key());
    if (it == ws.where.end()) fail("{}: missing tensor '{}'", dir, kv.key());
    const auto& e = it->second->header().tensors.at(kv.key());
    if (!is_float_dtype(e.dtype))
      fail("{}: tensor '{}' has dtype {}; weights must be floating point (F32, F16, BF16 or F64), and integers or "
           "booleans are not converted",
           it->second->path(), kv.key(), e.dtype);
    if (at::IntArrayRef(e.shape) != kv.value().sizes())
      fail("{}: tensor '{}' has shape {} but the model expects {}", it->second->path(), kv.key(),
           c10::str(at::IntArrayRef(e.shape)), c10::str(kv.value().sizes()));
    kv.value().copy_(it->second->get(kv.key()).to(kv.value().scalar_type()));
    if (kv.value().is_floating_point()) {
      const int64_t bad = kv.value().numel() - torch::isfinite(kv.value()).sum().item<int64_t>();
      if (bad > 0)
        fail("{} in {} has {} non-finite value{} (NaN or infinity)", kv.key(), it->second->path(), bad,
             bad == 1 ? "" : "s");
    }
    used.insert(kv.key());
  }
  const bool tied = model->config().tie_embeddings;
  int64_t skipped = 0;
  std::string skipped_name;
  for (const auto& kv : ws.where) {
    if (used.count(kv.first) || ignorable(kv.first)) continue;
    if (tied && kv.first == "lm_head.weight") {  // tied: the head is the embedding, so a stored one must be a copy
      check_tied_head(model, *kv.second, src.config_file);
      continue;
    }
    int64_t layer = 0;
    std::string suffix;
    if (split_layer_name(kv.first, &layer, &suffix) && layer < model->config().num_layers) {
      bool unused = false;
      for (const auto& u : src.unused) {
        if (u.suffix != suffix) continue;
        const auto& shape = kv.second->header().tensors.at(kv.first).shape;
        if (shape != std::vector<int64_t>{u.size})
          fail("{}: tensor '{}' has shape {} but the config implies [{}]", kv.second->path(), kv.first,
               c10::str(at::IntArrayRef(shape)), u.size);
        unused = true;
      }
      if (unused) {
        ++skipped;
        skipped_name = suffix;
        continue;
      }
    }
    fail("{}: unexpected tensor '{}' (checkpoint from another model shape?)", kv.second->path(), kv.first);
  }
  if (skipped > 0)
    logging::warn("{}: ignoring the stored '{}' of {} layer(s): {}", src.config_file, skipped_name, skipped,
                  src.unused_reason);
}
}  // namespace

namespace {
bool is_gguf_file(const std::string& path) { return gguf::is_gguf_path(path) && !fs::is_directory(path); }

// Copies every parameter from the GGUF file `f` (mapped and shape-checked against the config first).
void load_gguf_weights(DecoderLM& model, const gguf::File& f, const std::vector<GgufTensorMap>& maps) {
  torch::NoGradGuard ng;
  std::map<std::string, const GgufTensorMap*> by_name;
  for (const auto& m : maps) by_name.emplace(m.hf_name, &m);
  for (auto& kv : model->named_parameters()) {
    auto it = by_name.find(kv.key());
    if (it == by_name.end()) fail("{}: the model needs '{}', which a GGUF file does not hold", f.path(), kv.key());
    kv.value().copy_(read_gguf_tensor(f, *it->second).to(kv.value().scalar_type()));
  }
}
}  // namespace

void load_weights(DecoderLM& model, const std::string& dir) {
  if (is_gguf_file(dir)) {
    const gguf::File f(dir);
    load_gguf_weights(model, f, map_gguf_tensors(f, model->config()));
    return;
  }
  load_weights_from(model, open_weights(dir), dir, read_model_source(dir));
}

namespace {
// Checks the config against the weight files' headers before the model is allocated: the embedding, an untied
// head and every layer's projections must be there with the config's shapes, and no layer beyond the config's
// count. A config.json that does not describe these weights (sizes missing and defaulted, a larger shape, more
// layers than the files hold) is refused, not allocated: what is allocated is then bounded by what the files
// hold (the norm and bias vectors, O(hidden) each, are checked as they are read).
void check_config_against_weights(const ModelConfig& cfg, const WeightSet& ws, const std::string& dir) {
  const int64_t H = cfg.hidden_size, D = cfg.resolved_head_dim(), I = cfg.intermediate_size;
  const int64_t Q = cfg.num_heads * D, KV = cfg.num_kv_heads * D;
  const auto expect = [&](const std::string& name, std::vector<int64_t> shape) {
    auto it = ws.where.find(name);
    if (it == ws.where.end())
      fail("{}: missing tensor '{}' that the config ({} layers, hidden {}) implies", dir, name, cfg.num_layers, H);
    const auto& got = it->second->header().tensors.at(name).shape;
    if (got != shape)
      fail("{}: tensor '{}' has shape {} but the config implies {} (config and weights disagree)", it->second->path(),
           name, c10::str(at::IntArrayRef(got)), c10::str(at::IntArrayRef(shape)));
  };
  expect("model.embed_tokens.weight", {cfg.vocab_size, H});
  if (!cfg.tie_embeddings || ws.where.count("lm_head.weight")) expect("lm_head.weight", {cfg.vocab_size, H});
  for (int64_t l = 0; l < cfg.num_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    expect(p + "self_attn.q_proj.weight", {Q, H});
    expect(p + "self_attn.k_proj.weight", {KV, H});
    expect(p + "self_attn.v_proj.weight", {KV, H});
    expect(p + "self_attn.o_proj.weight", {H, Q});
    expect(p + "mlp.gate_proj.weight", {I, H});
    expect(p + "mlp.up_proj.weight", {I, H});
    expect(p + "mlp.down_proj.weight", {H, I});
  }
  const std::string extra = "model.layers." + std::to_string(cfg.num_layers) + ".self_attn.q_proj.weight";
  if (ws.where.count(extra)) fail("{}: the weights have more than the config's {} layers", dir, cfg.num_layers);
}
}  // namespace

namespace {
// A training checkpoint's model files against its state.json (a directory without state.json is a plain model).
// After the weights are read, so that a weight that is wrong in its own terms (shape, dtype, NaN) is named so.
void verify_checkpoint_model(const std::string& dir, bool allow_foreign) {
  const auto state_path = (fs::path(dir) / "state.json").string();
  if (!fs::exists(state_path)) return;
  const auto st = train::parse_checkpoint_state(read_file(state_path, kMaxConfigBytes), state_path);
  train::enforce_checkpoint_integrity(dir, st, train::check_checkpoint_integrity(dir, st, train::is_model_file),
                                      allow_foreign);
}
}  // namespace

DecoderLM load_model(const std::string& dir, const ImportOptions& opt) {
  if (is_gguf_file(dir)) {
    const gguf::File f(dir);
    const ModelSource src = gguf_source(f, dir, opt);
    const auto maps = map_gguf_tensors(f, src.config);  // every tensor checked before the model is allocated
    DecoderLM m(src.config);
    load_gguf_weights(m, f, maps);
    m->eval();
    return m;
  }
  // A checkpoint's files, as they are before anything is read: verified by path below, they must still be the files
  // the weights came from.
  std::optional<StableFiles> stable;
  if (opt.verify_checkpoint && fs::exists(fs::path(dir) / "state.json"))
    stable.emplace(dir, [](const std::string& name) { return name == "state.json" || train::is_model_file(name); });
  const ModelSource src = read_model_source(dir, opt);
  const WeightSet ws = open_weights(dir);  // headers only: checked against the config before allocating
  check_config_against_weights(src.config, ws, dir);
  DecoderLM m(src.config);
  load_weights_from(m, ws, dir, src);
  if (opt.verify_checkpoint) verify_checkpoint_model(dir, opt.allow_foreign_checkpoint);
  if (stable) stable->check();
  m->eval();
  return m;
}

bool write_model_files(DecoderLM& model, const std::string& dir, const SaveOptions& opt) {
  const auto& cfg = model->config();
  const bool reference = opt.format == ModelFormat::kDropeReference;
  // Built (and refused) before anything is written.
  const std::string config_json = reference              ? drope_reference_config_json(cfg)
                                  : cfg.hf_expressible() ? hf_config_json(cfg)
                                                         : std::string();
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  for (const auto& kv : model->named_parameters()) {
    const at::Tensor src = kv.value().detach();
    at::Tensor t = src.to(opt.dtype);
    // float16 holds magnitudes up to 65504: a larger weight would be written as infinity, a model no reader can use.
    const int64_t bad = t.is_floating_point() ? (~t.isfinite() & src.isfinite()).sum().item<int64_t>() : 0;
    if (bad > 0)
      fail("{}: {} value{} beyond what {} holds (largest magnitude {:g}); save it as float32 or bfloat16", kv.key(),
           bad, bad == 1 ? "" : "s", opt.dtype == at::kHalf ? "float16" : c10::toString(opt.dtype),
           src.abs().max().item<double>());
    tensors.emplace_back(kv.key(), std::move(t));
  }
  if (reference)  // the authors' q-only / k-only attention creates (and saves) the other norm too, weight 1
    for (const auto& u : drope_reference_extra_tensors(cfg))
      for (int64_t l = 0; l < cfg.num_layers; ++l)
        tensors.emplace_back("model.layers." + std::to_string(l) + "." + u.suffix, at::ones({u.size}, opt.dtype));
  if (!reference) write_file_atomic((fs::path(dir) / "drope.yaml").string(), model_config_to_yaml(cfg));
  if (!config_json.empty()) write_file_atomic((fs::path(dir) / "config.json").string(), config_json);
  auto metadata = opt.metadata;
  metadata["format"] = "pt";
  save_safetensors((fs::path(dir) / "model.safetensors").string(), tensors, metadata);
  for (const auto& [name, content] : opt.extra_files) write_file_atomic((fs::path(dir) / name).string(), content);
  return !config_json.empty();
}

void check_model_output(const std::string& dir, const SaveOptions& opt) {
  check_output_dir(
      dir,
      {"--out", "model directory", {"drope.yaml"}, opt.inputs, opt.replace_any, "pass --force to replace it anyway"});
}

bool save_model(DecoderLM& model, const std::string& dir, const SaveOptions& opt) {
  bool hf = false;
  if (opt.format == ModelFormat::kDropeReference) drope_reference_config_json(model->config());  // refuse early
  check_model_output(dir, opt);
  const DirLock lock(dir, DirLock::Where::kBeside);
  check_model_output(dir, opt);  // again under the lock: another process may have written it meanwhile
  write_dir_atomic(dir, [&](const std::string& tmp) { hf = write_model_files(model, tmp, opt); });
  return hf;
}

}  // namespace drope::io
