#include "eval/common.h"

#include <fmt/format.h>

#include "drope/config/model_config.h"
#include "drope/config/names.h"
#include "drope/core/error.h"
#include "drope/core/numbers.h"

namespace drope::evalcli {

void add_method_options(CLI::App* cmd, MethodOptions& o) {
  cmd->add_option("--model", o.model_dir, "Model directory (drope checkpoint/model dir or HF Llama/Qwen2 dir)")
      ->required();
  cmd->add_option("--tokenizer", o.tokenizer, "Tokenizer (.model, tokenizer.json or a directory); default: --model");
  cmd->add_option("--rope-scaling", o.rope_scaling, "Eval-time RoPE scaling")
      ->check(CLI::IsMember(names_of<RopeScalingType>()));
  cmd->add_option("--factor", o.factor, "Scaling factor s for --rope-scaling (>= 1)");
  cmd->add_option("--train-length", o.train_length, "Training context length C (default: the model's max_position)");
  cmd->add_option("--temperature", o.temperature,
                  "Attention temperature c in β = 1 + c·ln(L/C) (a number), or 'auto' for the fitted value "
                  "(<model>/temperature.json from fit-temperature)");
  cmd->add_option("--label", o.label, "Method name in result tables (default: derived from the options)");
  cmd->add_option("--threads", o.threads, "Intra-op CPU threads (default: LibTorch's)");
}

std::vector<std::string> prefix_outputs(const std::string& prefix) {
  std::vector<std::string> paths;
  for (const char* ext : {".json", ".csv", ".md", ".png", ".svg", ".samples.jsonl", "-pred"})
    paths.push_back(prefix + ext);
  return paths;
}

DirLock claim_output(const std::string& out, const std::vector<std::string>& paths, const Inputs& inputs) {
  if (out.empty()) return DirLock();
  check_output_paths("--out", out, paths, inputs);
  return DirLock(out, DirLock::Where::kBeside);
}

eval::MethodSpec method_spec(const MethodOptions& o) {
  eval::MethodSpec m;
  m.model_dir = o.model_dir;
  m.tokenizer = o.tokenizer;
  m.label = o.label;
  m.threads = o.threads;
  if (o.threads < 0) fail("--threads must be >= 0, got {}", o.threads);
  if (o.train_length < 0 || o.train_length > kMaxPosition)
    fail("--train-length must be in [1, 2^30] (the largest model.max_position), got {}", o.train_length);
  auto& v = m.variant;
  v.train_length = o.train_length;
  v.scaling = parse_name<RopeScalingType>(o.rope_scaling, "--rope-scaling");
  if (v.scaling != RopeScalingType::kNone) {
    if (o.factor == 0.0) fail("--rope-scaling {} needs --factor (>= 1)", o.rope_scaling);
    v.factor = check_number(o.factor, "--factor", scaling_factor_range());
  } else if (o.factor != 0.0) {
    fail("--factor {} given without --rope-scaling", o.factor);
  }
  if (!o.temperature.empty()) {
    v.set_temperature = true;
    if (o.temperature == "auto") {
      v.temperature_auto = true;
    } else {
      size_t used = 0;
      double c = 0;
      try {
        c = std::stod(o.temperature, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != o.temperature.size() || !Interval::non_negative().contains(c))
        fail("--temperature: expected a number >= 0 or 'auto', got '{}'", o.temperature);
      v.temperature = c;
    }
  }
  return m;
}

}  // namespace drope::evalcli
