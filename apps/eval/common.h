// Shared pieces of drope-eval's subcommands: the model/method options every command takes, loading a
// model with its evaluation method applied, and the registration function of each command family.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "drope/model/transformer.h"
#include "drope/text/tokenizer.h"

namespace drope::evalcli {

// --model, --tokenizer, --rope-scaling, --factor, --train-length, --temperature, --label, --threads.
struct MethodOptions {
  std::string model_dir;
  std::string tokenizer;             // default: the model directory
  std::string rope_scaling = "none"; // none | pi | ntk | dynamic-ntk | yarn | dynamic-yarn (eval-time scaling)
  double factor = 0.0;               // s; 0 = none given
  int64_t train_length = 0;          // training context C; 0 = the model's max_position
  std::string temperature;           // "" = the model's own; a number c; "auto" = fitted (temperature.json)
  std::string label;                 // method name in tables; default from the options
  int threads = 0;                   // intra-op threads; 0 = LibTorch's default
};

void add_method_options(CLI::App* cmd, MethodOptions& o);

struct EvalModel {
  DecoderLM model{nullptr};
  std::unique_ptr<text::Tokenizer> tokenizer;  // null when not requested
  std::string label;
  int64_t train_length = 0;
  double temperature = 0.0;  // c in β = 1 + c·ln s
  // The method as a JSON object (model, label, scaling, factor, train_length, temperature) for results.
  nlohmann::json describe() const;
};

// Loads the model (eval mode, no grad needed), applies the method and, if `need_tokenizer`, loads the
// tokenizer (a model without one is a clear error).
EvalModel load_eval_model(const MethodOptions& o, bool need_tokenizer);

// The fitted temperature file beside a model: <model>/temperature.json.
std::string temperature_file(const std::string& model_dir);

// Command families; each callback stores its exit status in `rc`.
void add_logits_command(CLI::App& cli, int& rc);
void add_ppl_commands(CLI::App& cli, int& rc);        // ppl, fit-temperature
void add_generate_command(CLI::App& cli, int& rc);    // generate
void add_niah_commands(CLI::App& cli, int& rc);       // niah (RULER tasks, Kamradt grid)
void add_longbench_commands(CLI::App& cli, int& rc);  // longbench, longbench-score
void add_compare_command(CLI::App& cli, int& rc);     // compare: side-by-side tables of result files

}  // namespace drope::evalcli
