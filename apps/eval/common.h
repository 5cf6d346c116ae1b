// drope-eval's flag parsing: the model/method flags every command takes, turned into an eval::MethodSpec,
// and the registration function of each command family. The runs themselves are library calls
// (drope/eval/runners.h).
#pragma once

#include <cstdint>
#include <string>

#include <CLI/CLI.hpp>

#include "drope/eval/method.h"

namespace drope::evalcli {

// --model, --tokenizer, --rope-scaling, --factor, --train-length, --temperature, --label, --threads.
struct MethodOptions {
  std::string model_dir;
  std::string tokenizer;
  std::string rope_scaling = "none";
  double factor = 0.0;        // 0 = none given
  int64_t train_length = 0;   // 0 = the model's max_position
  std::string temperature;    // "" = the model's own; a number c; "auto" = fitted
  std::string label;
  int threads = 0;
};

void add_method_options(CLI::App* cmd, MethodOptions& o);

// The method the flags describe; inconsistent or out-of-range flags fail naming the flag.
eval::MethodSpec method_spec(const MethodOptions& o);

// Command families; each callback stores its exit status in `rc`.
void add_logits_command(CLI::App& cli, int& rc);
void add_ppl_commands(CLI::App& cli, int& rc);        // ppl, fit-temperature
void add_generate_command(CLI::App& cli, int& rc);    // generate
void add_niah_commands(CLI::App& cli, int& rc);       // niah (RULER tasks), niah-grid (Kamradt grid)
void add_longbench_commands(CLI::App& cli, int& rc);  // longbench, longbench-score
void add_compare_command(CLI::App& cli, int& rc);     // compare: side-by-side tables of result files

}  // namespace drope::evalcli
