// drope-eval's flag parsing: the model/method flags every command takes, turned into an eval::MethodSpec,
// and the registration function of each command family. The runs themselves are library calls
// (drope/eval/runners.h).
#pragma once

#include <cstdint>
#include <string>

#include <memory>

#include <CLI/CLI.hpp>

#include "app_common.h"
#include "drope/core/files.h"
#include "drope/eval/method.h"
#include "drope/eval/runners.h"

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

// A run that takes the method flags: the flags, and the run they fill.
template <typename Run>
struct MethodRun {
  MethodOptions m;
  Run run;
};

inline eval::MethodSpec& method_of(eval::NiahRun& r) { return r.c.method; }
inline eval::MethodSpec& method_of(eval::NiahGridRun& r) { return r.c.method; }
template <typename Run>
eval::MethodSpec& method_of(Run& r) {
  return r.method;
}

// The --out of a run (a prefix, a file or, with --dump, none).
inline const std::string& output_of(const eval::NiahRun& r) { return r.c.out; }
inline const std::string& output_of(const eval::NiahGridRun& r) { return r.c.out; }
template <typename Run>
const std::string& output_of(const Run& r) {
  return r.out;
}

// Registers cmd's callback: the method from the flags, then fn(run) holding a lock on --out (a second
// drope-eval writing the same output is refused); the exit status goes to rc.
template <typename Run>
void on_run(CLI::App* cmd, const std::shared_ptr<MethodRun<Run>>& o, int& rc, void (*fn)(const Run&)) {
  cmd->callback([o, &rc, fn] {
    rc = app::run([&] {
      method_of(o->run) = method_spec(o->m);
      const std::string& out = output_of(o->run);
      const DirLock lock = out.empty() ? DirLock() : DirLock(out, DirLock::Where::kBeside);
      fn(o->run);
      return 0;
    });
  });
}

// Command families; each callback stores its exit status in `rc`.
void add_logits_command(CLI::App& cli, int& rc);
void add_ppl_commands(CLI::App& cli, int& rc);        // ppl, fit-temperature
void add_generate_command(CLI::App& cli, int& rc);    // generate
void add_niah_commands(CLI::App& cli, int& rc);       // niah (RULER tasks), niah-grid (Kamradt grid)
void add_longbench_commands(CLI::App& cli, int& rc);  // longbench, longbench-score
void add_compare_command(CLI::App& cli, int& rc);     // compare: side-by-side tables of result files
void add_offset_key_command(CLI::App& cli, int& rc);  // offset-key: synthetic retrieval accuracy vs length

}  // namespace drope::evalcli
