// One typed name per concept of the configuration: the positional type, the RoPE scaling type, the QK-norm
// mode, the training phase, the shard mode of data parallelism, the format a model directory is written in, and
// a training run's learning-rate schedule, WSD decay shape, compute type and device.
// Each enum has one name table; YAML validation, CLI choices, results files and
// error messages are all generated from it, so a name exists in exactly one place.
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "drope/core/numbers.h"
#include "drope/core/yaml.h"

namespace drope {

enum class PositionalType { kRope, kNope, kAlibi, kRnopeSwa };
enum class RopeScalingType { kNone, kPi, kNtk, kDynamicNtk, kYarn, kDynamicYarn, kLlama3 };
enum class QkNorm { kNone, kQk, kQ, kK };
enum class TrainPhase { kPretrain, kDrope, kFinetune };
// What data parallelism shards over the ranks (ZeRO stages): nothing, the optimizer state (1), also the
// gradients (2), also the parameters (3, FSDP-style).
enum class ShardMode { kNone, kOptimizer, kGrads, kParams };
// drope: drope.yaml + safetensors (+ HF config.json when HF can express the model); drope-reference: the DroPE
// authors' config.json (model_type llama_drope / qwen2_drope, attention_type) + safetensors.
enum class ModelFormat { kDrope, kDropeReference };
// schedule.type and schedule.decay_shape (the shape of a WSD schedule's decay): docs/design.md#training.
enum class ScheduleType { kCosine, kWsd, kConstant };
enum class DecayShape { kLinear, kCosine };
// train.dtype (the forward's compute type: bfloat16 is autocast) and train.device.
enum class TrainDType { kFloat32, kBFloat16 };
enum class TrainDevice { kAuto, kCpu, kCuda };

// NameTable<E>::kWhat names the concept in messages; kEntries lists (value, name) in documentation order.
template <typename E>
struct NameTable;

template <>
struct NameTable<PositionalType> {
  static constexpr std::string_view kWhat = "positional type";
  static constexpr std::array<std::pair<PositionalType, std::string_view>, 4> kEntries{
      {{PositionalType::kRope, "rope"},
       {PositionalType::kNope, "nope"},
       {PositionalType::kAlibi, "alibi"},
       {PositionalType::kRnopeSwa, "rnope-swa"}}};
};

template <>
struct NameTable<RopeScalingType> {
  static constexpr std::string_view kWhat = "RoPE scaling type";
  static constexpr std::array<std::pair<RopeScalingType, std::string_view>, 7> kEntries{
      {{RopeScalingType::kNone, "none"},
       {RopeScalingType::kPi, "pi"},
       {RopeScalingType::kNtk, "ntk"},
       {RopeScalingType::kDynamicNtk, "dynamic-ntk"},
       {RopeScalingType::kYarn, "yarn"},
       {RopeScalingType::kDynamicYarn, "dynamic-yarn"},
       {RopeScalingType::kLlama3, "llama3"}}};
};

template <>
struct NameTable<QkNorm> {
  static constexpr std::string_view kWhat = "QK-norm mode";
  static constexpr std::array<std::pair<QkNorm, std::string_view>, 4> kEntries{
      {{QkNorm::kNone, "none"}, {QkNorm::kQk, "qk"}, {QkNorm::kQ, "q"}, {QkNorm::kK, "k"}}};
};

template <>
struct NameTable<TrainPhase> {
  static constexpr std::string_view kWhat = "training phase";
  static constexpr std::array<std::pair<TrainPhase, std::string_view>, 3> kEntries{
      {{TrainPhase::kPretrain, "pretrain"}, {TrainPhase::kDrope, "drope"}, {TrainPhase::kFinetune, "finetune"}}};
};

template <>
struct NameTable<ShardMode> {
  static constexpr std::string_view kWhat = "shard mode";
  static constexpr std::array<std::pair<ShardMode, std::string_view>, 4> kEntries{{{ShardMode::kNone, "none"},
                                                                                   {ShardMode::kOptimizer, "optimizer"},
                                                                                   {ShardMode::kGrads, "grads"},
                                                                                   {ShardMode::kParams, "params"}}};
};

template <>
struct NameTable<ModelFormat> {
  static constexpr std::string_view kWhat = "model directory format";
  static constexpr std::array<std::pair<ModelFormat, std::string_view>, 2> kEntries{
      {{ModelFormat::kDrope, "drope"}, {ModelFormat::kDropeReference, "drope-reference"}}};
};

template <>
struct NameTable<ScheduleType> {
  static constexpr std::string_view kWhat = "schedule type";
  static constexpr std::array<std::pair<ScheduleType, std::string_view>, 3> kEntries{
      {{ScheduleType::kCosine, "cosine"}, {ScheduleType::kWsd, "wsd"}, {ScheduleType::kConstant, "constant"}}};
};

template <>
struct NameTable<DecayShape> {
  static constexpr std::string_view kWhat = "decay shape";
  static constexpr std::array<std::pair<DecayShape, std::string_view>, 2> kEntries{
      {{DecayShape::kLinear, "linear"}, {DecayShape::kCosine, "cosine"}}};
};

template <>
struct NameTable<TrainDType> {
  static constexpr std::string_view kWhat = "training dtype";
  static constexpr std::array<std::pair<TrainDType, std::string_view>, 2> kEntries{
      {{TrainDType::kFloat32, "float32"}, {TrainDType::kBFloat16, "bfloat16"}}};
};

template <>
struct NameTable<TrainDevice> {
  static constexpr std::string_view kWhat = "training device";
  static constexpr std::array<std::pair<TrainDevice, std::string_view>, 3> kEntries{
      {{TrainDevice::kAuto, "auto"}, {TrainDevice::kCpu, "cpu"}, {TrainDevice::kCuda, "cuda"}}};
};

// The name of a value ("rope", "yarn", "qk", ...).
template <typename E>
constexpr std::string_view name_of(E e) {
  for (const auto& [v, n] : NameTable<E>::kEntries)
    if (v == e) return n;
  return "?";
}

// Every name, in table order (CLI choices, YAML choices).
template <typename E>
std::vector<std::string> names_of() {
  std::vector<std::string> out;
  for (const auto& entry : NameTable<E>::kEntries) out.emplace_back(entry.second);
  return out;
}

// The value of a name, or false when there is none.
template <typename E>
bool find_name(std::string_view name, E* out) {
  for (const auto& [v, n] : NameTable<E>::kEntries)
    if (n == name) {
      *out = v;
      return true;
    }
  return false;
}

// "a, b or c": the names for messages.
std::string join_names(const std::vector<std::string>& names);

// Fails with "<where>: unknown <what> '<name>' (expected a, b or c)".
[[noreturn]] void fail_unknown_name(std::string_view where, std::string_view what, std::string_view name,
                                    const std::vector<std::string>& names);

// The value of a name; an unknown name fails naming `where` and every valid name.
template <typename E>
E parse_name(std::string_view name, std::string_view where) {
  E e{};
  if (!find_name(name, &e)) fail_unknown_name(where, NameTable<E>::kWhat, name, names_of<E>());
  return e;
}

// Names in fmt ("{}" prints "rope") and in JSON (written as the name string).
inline std::string_view format_as(PositionalType e) { return name_of(e); }
inline std::string_view format_as(RopeScalingType e) { return name_of(e); }
inline std::string_view format_as(QkNorm e) { return name_of(e); }
inline std::string_view format_as(TrainPhase e) { return name_of(e); }
inline std::string_view format_as(ShardMode e) { return name_of(e); }
inline std::string_view format_as(ModelFormat e) { return name_of(e); }
inline std::string_view format_as(ScheduleType e) { return name_of(e); }
inline std::string_view format_as(DecayShape e) { return name_of(e); }
inline std::string_view format_as(TrainDType e) { return name_of(e); }
inline std::string_view format_as(TrainDevice e) { return name_of(e); }
inline void to_json(nlohmann::json& j, PositionalType e) { j = std::string(name_of(e)); }
inline void to_json(nlohmann::json& j, RopeScalingType e) { j = std::string(name_of(e)); }
inline void to_json(nlohmann::json& j, QkNorm e) { j = std::string(name_of(e)); }
inline void to_json(nlohmann::json& j, TrainPhase e) { j = std::string(name_of(e)); }
inline void to_json(nlohmann::json& j, ShardMode e) { j = std::string(name_of(e)); }

// Reads `key` of a YAML mapping as a name of E (absent: `out` unchanged); the error lists every name.
template <typename E>
bool get_name(YamlMap& map, const std::string& key, E& out) {
  std::string s(name_of(out));
  if (!map.get_choice(key, s, names_of<E>())) return false;
  find_name(s, &out);
  return true;
}

// Whether a QK-norm mode normalises the query / key projections.
constexpr bool norms_queries(QkNorm m) { return m == QkNorm::kQk || m == QkNorm::kQ; }
constexpr bool norms_keys(QkNorm m) { return m == QkNorm::kQk || m == QkNorm::kK; }

// The one bound on a RoPE scaling factor s (YAML, config.json, CLI, method strings): s >= 1 (HF's bound; s = 1
// is the identity).
inline Interval scaling_factor_range() { return Interval::at_least(1); }

// The one bound on the attention temperature coefficient c of β = 1 + c·ln(L/C) (CLI, method strings, fitted
// files): c = 0 is no scaling; the fits find c near 0.1, and c = 100 already multiplies the logits by more than
// 100 at 2C, which leaves softmax an argmax. Beyond it the logits overflow.
inline Interval temperature_range() { return Interval::closed(0, 100); }

}  // namespace drope
