#include "eval/common.h"

#include <cmath>
#include <filesystem>

#include <fmt/format.h>

#include "drope/core/error.h"
#include "drope/core/files.h"
#include "drope/core/json.h"
#include "drope/io/model_io.h"
#include "drope/model/drope.h"

namespace drope::evalcli {

namespace fs = std::filesystem;

void add_method_options(CLI::App* cmd, MethodOptions& o) {
  cmd->add_option("--model", o.model_dir, "Model directory (drope checkpoint/model dir or HF Llama/Qwen2 dir)")
      ->required();
  cmd->add_option("--tokenizer", o.tokenizer, "Tokenizer (.model, tokenizer.json or a directory); default: --model");
  cmd->add_option("--rope-scaling", o.rope_scaling, "Eval-time RoPE scaling")
      ->check(CLI::IsMember({"none", "pi", "ntk", "dynamic-ntk", "yarn", "dynamic-yarn"}));
  cmd->add_option("--factor", o.factor, "Scaling factor s for --rope-scaling (> 1)");
  cmd->add_option("--train-length", o.train_length, "Training context length C (default: the model's max_position)");
  cmd->add_option("--temperature", o.temperature,
                  "Attention temperature c in β = 1 + c·ln(L/C) (a number), or 'auto' for the fitted value "
                  "(<model>/temperature.json from fit-temperature)");
  cmd->add_option("--label", o.label, "Method name in result tables (default: derived from the options)");
  cmd->add_option("--threads", o.threads, "Intra-op CPU threads (default: LibTorch's)");
}

std::string temperature_file(const std::string& model_dir) { return (fs::path(model_dir) / "temperature.json").string(); }

namespace {

double parse_temperature(const MethodOptions& o) {
  if (o.temperature == "auto") {
    const auto path = temperature_file(o.model_dir);
    if (!fs::exists(path))
      fail("--temperature auto: {} does not exist; run `drope-eval fit-temperature --model {}` first", path, o.model_dir);
    const nlohmann::json j = read_json_file(path, kMaxConfigBytes);
    if (!j.is_object() || !j.contains("c") || !j["c"].is_number())
      fail("{}: expected an object with a number 'c' (written by drope-eval fit-temperature)", path);
    const double c = j["c"].get<double>();
    if (!std::isfinite(c) || c < 0) fail("{}: 'c' must be a finite number >= 0, got {}", path, c);
    return c;
  }
  size_t used = 0;
  double c = 0;
  try {
    c = std::stod(o.temperature, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != o.temperature.size() || !std::isfinite(c) || c < 0)
    fail("--temperature: expected a number >= 0 or 'auto', got '{}'", o.temperature);
  return c;
}

}  // namespace

EvalModel load_eval_model(const MethodOptions& o, bool need_tokenizer) {
  if (o.threads < 0) fail("--threads must be >= 0, got {}", o.threads);
  if (o.threads > 0) torch::set_num_threads(o.threads);
  if (o.train_length < 0) fail("--train-length must be > 0, got {}", o.train_length);
  if (o.rope_scaling != "none" && !(o.factor > 1.0))
    fail("--rope-scaling {} needs --factor > 1 (got {})", o.rope_scaling, o.factor);
  if (o.rope_scaling == "none" && o.factor != 0.0) fail("--factor {} given without --rope-scaling", o.factor);
  EvalModel em;
  em.model = io::load_model(o.model_dir);
  auto cfg = em.model->config();
  if (o.train_length > 0) cfg.max_position = o.train_length;
  if (o.rope_scaling != "none") {
    bool any_rope = false;
    for (const auto& lp : cfg.layer_plan()) any_rope |= lp.kind == PositionalKind::kRope;
    if (!any_rope) fail("--rope-scaling {}: the model at {} has no RoPE layers", o.rope_scaling, o.model_dir);
    cfg.positional.scaling = RopeScalingConfig{};
    cfg.positional.scaling.type = o.rope_scaling;
    cfg.positional.scaling.factor = o.factor;
    cfg.positional.scaling.original_max_position = cfg.max_position;
  }
  if (!o.temperature.empty()) cfg.softmax_temperature = parse_temperature(o);
  if (o.train_length > 0 || o.rope_scaling != "none" || !o.temperature.empty()) {
    DecoderLM m(cfg);
    copy_parameters(m, em.model);
    em.model = m;
  }
  em.model->eval();
  em.train_length = cfg.max_position;
  em.temperature = cfg.softmax_temperature;
  if (!o.label.empty()) {
    em.label = o.label;
  } else {
    em.label = fs::path(o.model_dir).filename().string();
    if (em.label.empty()) em.label = fs::path(o.model_dir).parent_path().filename().string();
    if (o.rope_scaling != "none") em.label += fmt::format("+{}x{:g}", o.rope_scaling, o.factor);
    if (!o.temperature.empty()) em.label += fmt::format("+T{:g}", em.temperature);
  }
  if (need_tokenizer) {
    const std::string tpath = o.tokenizer.empty() ? o.model_dir : o.tokenizer;
    const bool has = !o.tokenizer.empty() || fs::exists(fs::path(tpath) / "tokenizer.json") ||
                     fs::exists(fs::path(tpath) / "tokenizer.model");
    if (!has)
      fail("the model at {} has no tokenizer (tokenizer.json or tokenizer.model); pass --tokenizer", o.model_dir);
    em.tokenizer = text::load_tokenizer(tpath);
    if (em.tokenizer->vocab_size() > cfg.vocab_size)
      fail("tokenizer {} has {} ids but the model's vocabulary is {}", em.tokenizer->path(),
           em.tokenizer->vocab_size(), cfg.vocab_size);
  }
  return em;
}

nlohmann::json EvalModel::describe() const {
  const auto& c = model->config();
  return {{"label", label},
          {"positional", c.positional.type},
          {"rope_scaling", c.positional.scaling.type},
          {"factor", c.positional.scaling.factor},
          {"train_length", train_length},
          {"temperature", temperature},
          {"qk_norm", c.qk_norm}};
}

}  // namespace drope::evalcli
