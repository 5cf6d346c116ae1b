// Flags of `drope-eval ppl` and `drope-eval fit-temperature` (eval::run_ppl, eval::run_fit_temperature).
#include "eval/common.h"

namespace drope::evalcli {

namespace {

void add_data_options(CLI::App* cmd, eval::EvalData& d, bool required) {
  cmd->add_option("--data", d.paths, "Token dataset dir (index.json), .jsonl or text files")->required(required);
  cmd->add_option("--split", d.split, "Split of a token dataset (default val)");
  cmd->add_option("--text-key", d.text_key, "Field holding the text in .jsonl files (default text)");
}

// --stride, --max-tokens, --max-windows (both commands use the sliding-window protocol).
void add_window_options(CLI::App* cmd, eval::PerplexityOptions& p) {
  cmd->add_option("--stride", p.stride, "Sliding-window stride (default 256)");
  cmd->add_option("--max-tokens", p.max_tokens, "Score at most this many tokens of the stream (0 = all)");
  cmd->add_option("--max-windows", p.max_windows, "At most this many windows per length (0 = all)");
}

}  // namespace

void add_ppl_commands(CLI::App& cli, int& rc) {
  auto o = std::make_shared<MethodRun<eval::PplRun>>();
  auto* cmd = cli.add_subcommand("ppl", "Perplexity vs context length (sliding-window or truncate protocol)");
  add_method_options(cmd, o->m);
  add_data_options(cmd, o->run.data, true);
  cmd->add_option("--lengths", o->run.lengths, "Window lengths (tokens)")->delimiter(',');
  cmd->add_option("--multipliers", o->run.multipliers, "Window lengths as multiples of the training length")
      ->delimiter(',');
  add_window_options(cmd, o->run.protocol);
  cmd->add_flag("--truncate", o->run.protocol.truncate,
                "Score the first L tokens of each long-enough document instead");
  cmd->add_option("--with", o->run.with, "Earlier ppl result JSON files to draw beside this method");
  cmd->add_option("--out", o->run.out, "Output prefix: .json/.csv/.md tables, .png/.svg plot (default results/ppl)");
  on_run(cmd, o, rc, &eval::run_ppl);

  auto f = std::make_shared<MethodRun<eval::TemperatureFitRun>>();
  auto* fit = cli.add_subcommand(
      "fit-temperature",
      "Fit c of the attention temperature β = 1 + c·ln(L/C) on held-out text or task data; saved for "
      "--temperature auto");
  add_method_options(fit, f->m);
  add_data_options(fit, f->run.data, false);
  fit->add_option("--task", f->run.task, "Fit on a synthetic task's held-out sequences instead of --data: offset-key");
  fit->add_option("--queries", f->run.queries, "--task: held-out answers per length (default 512)");
  fit->add_option("--seed", f->run.seed, "--task: generator seed (default 42)");
  fit->add_option("--batch-size", f->run.batch, "--task: sequences per forward (default 16)");
  fit->add_option("--lengths", f->run.lengths, "Target lengths (> training length)")->delimiter(',');
  fit->add_option("--multipliers", f->run.multipliers,
                  "Target lengths as multiples of the training length (default 2,4)")
      ->delimiter(',');
  add_window_options(fit, f->run.protocol);
  fit->add_option("--beta-max", f->run.beta_max, "Largest β searched (default 2.5)");
  fit->add_option("--save", f->run.save, "Where to save the fit (default <model>/temperature.json)");
  fit->add_option("--out", f->run.out, "Also write tables and a β-vs-ppl plot with this prefix");
  on_run(fit, f, rc, &eval::run_fit_temperature);
}

}  // namespace drope::evalcli
