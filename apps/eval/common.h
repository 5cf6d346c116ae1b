// drope-eval's flag parsing: the model/method flags every command takes, turned into an eval::MethodSpec,
// and the registration function of each command family. The runs themselves are library calls
// (drope/eval/runners.h).
#pragma once

#include <cstdint>
#include <string>

#include <memory>
#include <utility>
#include <vector>

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
inline std::string output_of(const eval::LongBenchRun& r) {
  if (!r.out.empty()) return r.out;
  return r.e ? "longbench_e" : "longbench";  // run_longbench's default
}
template <typename Run>
const std::string& output_of(const Run& r) {
  return r.out;
}

// What a run reads, as (flag, path) pairs for the output rule (check_output_paths).
using Inputs = std::vector<std::pair<std::string, std::string>>;

// The files an output prefix names: <prefix>.json/.csv/.md tables, .png/.svg plots, .samples.jsonl and the
// <prefix>-pred directory of predictions.
std::vector<std::string> prefix_outputs(const std::string& prefix);

// The inputs of each run beyond --model and --tokenizer.
inline Inputs run_inputs(const eval::PplRun& r) {
  Inputs in;
  for (const auto& p : r.data.paths) in.emplace_back("--data", p);
  for (const auto& p : r.with) in.emplace_back("--with", p);
  return in;
}
inline Inputs run_inputs(const eval::TemperatureFitRun& r) {
  Inputs in;
  for (const auto& p : r.data.paths) in.emplace_back("--data", p);
  return in;
}
inline Inputs run_inputs(const eval::NiahRun& r) { return {{"--haystack", r.c.haystack}}; }
inline Inputs run_inputs(const eval::NiahGridRun& r) { return {{"--haystack", r.c.haystack}}; }
inline Inputs run_inputs(const eval::LongBenchRun& r) { return {{"--data", r.data}}; }
inline Inputs run_inputs(const eval::GenerateRun& r) { return {{"--prompts", r.prompts_file}}; }
template <typename Run>
Inputs run_inputs(const Run&) {
  return {};
}

// The files the output of a run names: those of a prefix, or the one file of `generate`.
inline std::vector<std::string> output_paths(const eval::GenerateRun& r) { return {r.out}; }
template <typename Run>
std::vector<std::string> output_paths(const Run& r) {
  return prefix_outputs(output_of(r));
}

// Refuses --out when it is an input, inside one or would write over one (check_output_paths), then locks it
// (a second drope-eval writing the same output is refused). An empty `out` is neither checked nor locked.
DirLock claim_output(const std::string& out, const std::vector<std::string>& paths, const Inputs& inputs);

// The files a run writes beside --out, checked by the same rule before any work: fit-temperature's fit
// (--save, by default <model>/temperature.json, which may only replace an earlier fit) and the prompts of
// --dump-prompts.
void check_side_outputs(const eval::TemperatureFitRun& r, const Inputs& inputs);
void check_side_outputs(const eval::NiahRun& r, const Inputs& inputs);
void check_side_outputs(const eval::NiahGridRun& r, const Inputs& inputs);
template <typename Run>
void check_side_outputs(const Run&, const Inputs&) {}

// Size flags the runs read, refused naming the flag: --stride / --max-tokens / --max-windows of the windowed
// perplexity, --batch-size / --prefill-chunk of generate.
void check_run_flags(const eval::PplRun& r);
void check_run_flags(const eval::TemperatureFitRun& r);
void check_run_flags(const eval::GenerateRun& r);
template <typename Run>
void check_run_flags(const Run&) {}

// Registers cmd's callback: the method from the flags, then fn(run) holding the claim on --out; the exit
// status goes to rc.
template <typename Run>
void on_run(CLI::App* cmd, const std::shared_ptr<MethodRun<Run>>& o, int& rc, void (*fn)(const Run&)) {
  cmd->callback([o, &rc, fn] {
    rc = app::run([&] {
      method_of(o->run) = method_spec(o->m);
      Inputs in = {{"--model", o->m.model_dir}, {"--tokenizer", o->m.tokenizer}};
      for (auto& i : run_inputs(o->run)) in.push_back(std::move(i));
      check_run_flags(o->run);
      check_side_outputs(o->run, in);
      const DirLock lock = claim_output(output_of(o->run), output_paths(o->run), in);
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
