#include "eval/common.h"

#include <filesystem>
#include <system_error>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli_numbers.h"
#include "drope/config/model_config.h"
#include "drope/config/names.h"
#include "drope/core/error.h"
#include "drope/core/json.h"
#include "drope/core/numbers.h"
#include "drope/model/variant.h"

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

namespace {

// A file path a run writes whole: not a directory, not an input, not inside an input directory other than those
// named in `may_hold_it`.
void check_side_file(const std::string& flag, const std::string& path, const Inputs& inputs,
                     const std::string& may_hold_it = "") {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) fail("{} {}: is a directory; expected the path of a file", flag, path);
  // The input that may hold it, and any other flag naming that same directory (--tokenizer <model dir>).
  std::string holder;
  for (const auto& i : inputs)
    if (i.first == may_hold_it) holder = i.second;
  Inputs others, held;
  for (const auto& i : inputs) {
    const bool holds = i.first == may_hold_it ||
                       (!holder.empty() && !i.second.empty() && std::filesystem::equivalent(i.second, holder, ec));
    (holds ? held : others).push_back(i);
  }
  check_output_paths(flag, path, {path}, others);
  for (const auto& [name, in] : held)  // what may hold it is still never written over itself (a one-file model)
    if (!in.empty() && std::filesystem::equivalent(path, in, ec))
      fail("{} {} is the input {} {}; choose another output", flag, path, name, in);
}

}  // namespace

void check_side_outputs(const eval::TemperatureFitRun& r, const Inputs& inputs) {
  const bool given = !r.save.empty();
  const std::string path = given ? r.save : temperature_file(r.method.model_dir);
  const std::string flag = given ? "--save" : "the fit's default file (--save)";
  // The fit lives beside the model by default: inside --model, but never over one of the model's own files.
  check_side_file(flag, path, inputs, "--model");
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return;
  bool fit = false;
  try {
    const nlohmann::json j = read_json_file(path, kMaxConfigBytes);
    fit = j.is_object() && j.value("kind", "") == "temperature" && j.contains("c");
  } catch (const Error&) {
  }
  if (!fit)
    fail("{} {}: exists and is not a temperature fit (a results file of kind \"temperature\"); refusing to write "
         "over it",
         flag, path);
}

void check_side_outputs(const eval::NiahRun& r, const Inputs& inputs) {
  if (!r.c.dump.empty()) check_side_file("--dump-prompts", r.c.dump, inputs);
}
void check_side_outputs(const eval::NiahGridRun& r, const Inputs& inputs) {
  if (!r.c.dump.empty()) check_side_file("--dump-prompts", r.c.dump, inputs);
}

namespace {
void check_window_flags(const eval::PerplexityOptions& p) {
  app::check_size_flag("--stride", p.stride, 1, app::kMaxTokensFlag);
  if (p.max_tokens < 0) fail("--max-tokens: expected an integer >= 0 (0 = all), got {}", p.max_tokens);
  if (p.max_windows < 0) fail("--max-windows: expected an integer >= 0 (0 = all), got {}", p.max_windows);
}

// --split and --text-key apply to some kinds of --data only: given for data that has none, they would be ignored.
void check_data_flags(const eval::EvalData& d) {
  bool dataset = false, jsonl = false;
  for (const auto& p : d.paths) {
    std::error_code ec;
    dataset |= std::filesystem::is_directory(p, ec);
    jsonl |= std::filesystem::path(p).extension() == ".jsonl";
  }
  if (d.paths.empty()) return;
  if (d.split != eval::EvalData().split && !dataset)
    fail("--split {}: only a token dataset (a directory with index.json) has splits, and --data names none", d.split);
  if (d.text_key.empty()) fail("--text-key: expected the name of the field that holds the text, got ''");
  if (d.text_key != eval::EvalData().text_key && !jsonl)
    fail("--text-key {}: only .jsonl data has fields, and --data names no .jsonl file", d.text_key);
}
}  // namespace

void check_run_flags(const eval::PplRun& r) {
  check_window_flags(r.protocol);
  check_data_flags(r.data);
}
void check_run_flags(const eval::TemperatureFitRun& r) {
  check_window_flags(r.protocol);
  check_data_flags(r.data);
}
void check_run_flags(const eval::GenerateRun& r) {
  app::check_size_flag("--batch-size", r.options.batch_size, 1, 1 << 16);
  app::check_size_flag("--prefill-chunk", r.options.prefill_chunk, 1, app::kMaxTokensFlag);
  for (const auto& stop : r.options.stop)
    if (stop.empty()) fail("--stop: an empty stop sequence would end every generation before its first token");
}

eval::MethodSpec method_spec(const MethodOptions& o) {
  eval::MethodSpec m;
  m.model_dir = o.model_dir;
  m.tokenizer = o.tokenizer;
  m.label = o.label;
  m.threads = o.threads;
  // 0 = the machine's default; a typo such as 100000 would start that many threads before the first window.
  app::check_size_flag("--threads", o.threads, 0, app::kMaxThreadsFlag);
  if (o.label.find_first_of("\n\r\t") != std::string::npos)
    fail("--label: expected one line of text (it names a row of the result tables), got a line break or tab");
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
      const auto c = parse_decimal(o.temperature);
      if (!c || !temperature_range().contains(*c))
        fail("--temperature: expected {} or 'auto', got '{}'", temperature_range().describe(), o.temperature);
      v.temperature = *c;
    }
  }
  return m;
}

}  // namespace drope::evalcli
