#include "drope/model/variant.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "drope/core/error.h"
#include "drope/core/files.h"
#include "drope/core/json.h"
#include "drope/core/numbers.h"

namespace drope {

namespace {

// The whole of `text` as a finite double, or fail.
double parse_number(std::string_view text, std::string_view where) {
  const auto v = parse_decimal(text);
  if (!v) fail("{}: '{}' is not a number", where, text);
  return *v;
}

const char* kForms = "none, pi:S, ntk:S, dynamic-ntk:S, yarn:S, dynamic-yarn:S, llama3:S, temperature:C, "
                     "temperature:auto, drope, drope+qk, drope+q or drope+k";

}  // namespace

std::string Variant::str() const {
  std::string out;
  auto add = [&](const std::string& part) { out += (out.empty() ? "" : ",") + part; };
  if (scaling != RopeScalingType::kNone) add(fmt::format("{}:{:g}", name_of(scaling), factor));
  if (set_temperature)
    add(temperature_auto ? std::string("temperature:auto") : fmt::format("temperature:{:g}", temperature));
  if (drop)
    add(drop_options.qk_norm == QkNorm::kNone ? std::string("drope")
                                              : fmt::format("drope+{}", name_of(drop_options.qk_norm)));
  return out.empty() ? "none" : out;
}

void validate_variant(const Variant& v, std::string_view where) {
  if (v.scaling != RopeScalingType::kNone)
    check_number(v.factor, fmt::format("{}: the {} factor", where, name_of(v.scaling)), scaling_factor_range());
  else if (v.factor != 0.0) fail("{}: a factor ({:g}) without a RoPE scaling type", where, v.factor);
  if (v.set_temperature && !v.temperature_auto)
    check_number(v.temperature, fmt::format("{}: the temperature coefficient", where), temperature_range());
  if (v.train_length < 0 || v.train_length > kMaxPosition)
    fail("{}: the training length must be in [1, 2^30], got {}", where, v.train_length);
  if (v.drop && v.scaling != RopeScalingType::kNone)
    fail("{}: DroPE removes RoPE; it cannot be combined with RoPE scaling ({})", where, name_of(v.scaling));
}

namespace {

// One part of a variant (no commas) into v.
void parse_part(std::string_view text, std::string_view where, Variant& v) {
  const auto colon = text.find(':');
  const std::string_view kind = text.substr(0, colon);
  const bool has_value = colon != std::string_view::npos;
  const std::string_view value = has_value ? text.substr(colon + 1) : std::string_view();
  const std::string at = fmt::format("{} {}", where, text);
  if (kind == "none" && !has_value) return;
  if (kind == "temperature") {
    if (!has_value) fail("{}: expected temperature:C or temperature:auto", at);
    if (v.set_temperature) fail("{}: a second temperature", at);
    v.set_temperature = true;
    if (value == "auto") v.temperature_auto = true;
    else v.temperature = parse_number(value, at);
  } else if (kind == "drope" || kind.substr(0, 6) == "drope+") {
    if (has_value) fail("{}: drope takes no value (forms: drope, drope+qk, drope+q, drope+k)", at);
    if (v.drop) fail("{}: a second drope", at);
    v.drop = true;
    if (kind.size() > 5) v.drop_options.qk_norm = parse_name<QkNorm>(kind.substr(6), at);
  } else {
    RopeScalingType t{};
    if (!find_name(kind, &t) || t == RopeScalingType::kNone) fail("{}: unknown method (expected {})", at, kForms);
    if (!has_value) fail("{}: expected {}:S with a factor S, e.g. {}:2", at, kind, kind);
    if (v.scaling != RopeScalingType::kNone) fail("{}: a second RoPE scaling", at);
    v.scaling = t;
    v.factor = parse_number(value, at);
  }
}

}  // namespace

Variant parse_variant(std::string_view text, std::string_view where) {
  Variant v;
  if (text.empty()) fail("{}: empty method (expected {})", where, kForms);
  for (size_t start = 0; start <= text.size();) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const auto part = text.substr(start, comma - start);
    if (part.empty()) fail("{} {}: empty part between commas", where, text);
    parse_part(part, where, v);
    start = comma + 1;
  }
  validate_variant(v, fmt::format("{} {}", where, text));
  return v;
}

std::string temperature_file(const std::string& model_dir) {
  return (std::filesystem::path(model_dir) / "temperature.json").string();
}

double read_fitted_temperature(const std::string& model_dir, const ModelConfig& applied) {
  const auto path = temperature_file(model_dir);
  if (!std::filesystem::exists(path))
    fail("temperature auto: {} does not exist; run `drope-eval fit-temperature --model {}` first", path, model_dir);
  const nlohmann::json j = read_json_file(path, kMaxConfigBytes);
  if (!j.is_object() || !j.contains("c") || !j["c"].is_number())
    fail("{}: expected an object with a number 'c' (written by drope-eval fit-temperature)", path);
  const double c = check_number(j["c"].get<double>(), path + ": 'c'", temperature_range());
  const auto differs = [&](const nlohmann::json& recorded, const nlohmann::json& now, const char* what) {
    if (!recorded.is_null() && recorded != now)
      fail("temperature auto: {} was fitted for {} {}, and this model has {} (refit it with drope-eval fit-temperature "
           "and this method, or give the temperature as temperature:C)",
           path, what, recorded.dump(), now.dump());
  };
  const auto field = [](const nlohmann::json& o, const char* key) {
    return o.is_object() && o.contains(key) ? o[key] : nlohmann::json();
  };
  const nlohmann::json& method = field(j, "method");
  differs(field(j, "train_length"), applied.max_position, "training length");
  differs(field(method, "positional"), applied.positional.type, "positional encoding");
  differs(field(method, "rope_scaling"), applied.positional.scaling.type, "RoPE scaling");
  if (applied.positional.scaling.type != RopeScalingType::kNone)
    differs(field(method, "factor"), applied.positional.scaling.factor, "scaling factor");
  return c;
}

ModelConfig apply_variant(const ModelConfig& cfg_in, const Variant& v, const std::string& model_dir) {
  validate_variant(v, "method " + v.str());
  ModelConfig cfg = cfg_in;
  if (v.train_length > 0) cfg.max_position = v.train_length;
  if (v.scaling != RopeScalingType::kNone) {
    bool any_rope = false;
    for (const auto& lp : cfg.layer_plan()) any_rope |= lp.kind == PositionalKind::kRope;
    if (!any_rope) fail("method {}: the model at {} has no RoPE layers", v.str(), model_dir);
    cfg.positional.scaling = RopeScalingConfig{};
    cfg.positional.scaling.type = v.scaling;
    cfg.positional.scaling.factor = v.factor;
    cfg.positional.scaling.original_max_position = cfg.max_position;
  }
  if (v.drop) cfg = drop_positional(cfg, v.drop_options);
  if (v.set_temperature)
    cfg.softmax_temperature = v.temperature_auto ? read_fitted_temperature(model_dir, cfg) : v.temperature;
  cfg.validate("method " + v.str());
  return cfg;
}

DecoderLM apply_variant(DecoderLM& model, const Variant& v, const std::string& model_dir) {
  if (v.is_identity()) return model;
  DecoderLM out(apply_variant(model->config(), v, model_dir));
  // Norm weights that only the new model has stay at 1 (set by construction).
  copy_parameters(out, model, "method " + v.str());
  auto p = model->parameters();
  if (!p.empty()) out->to(p.front().device(), p.front().scalar_type());
  out->train(model->is_training());
  return out;
}

}  // namespace drope
