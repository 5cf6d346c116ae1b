// Flags of `drope-eval ppl` and `drope-eval fit-temperature` (eval::run_ppl, eval::run_fit_temperature).
#include "app_common.h"
#include "drope/eval/runners.h"
#include "eval/common.h"

namespace drope::evalcli {

namespace {

void add_data_options(CLI::App* cmd, eval::EvalData& d) {
  cmd->add_option("--data", d.paths, "Token dataset dir (index.json), .jsonl or text files")->required();
  cmd->add_option("--split", d.split, "Split of a token dataset (default val)");
  cmd->add_option("--text-key", d.text_key, "Field holding the text in .jsonl files (default text)");
}

}  // namespace

void add_ppl_commands(CLI::App& cli, int& rc) {
  struct Opts {
    MethodOptions m;
    eval::PplRun run;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = cli.add_subcommand("ppl", "Perplexity vs context length (sliding-window or truncate protocol)");
  add_method_options(cmd, o->m);
  add_data_options(cmd, o->run.data);
  cmd->add_option("--lengths", o->run.lengths, "Window lengths (tokens)")->delimiter(',');
  cmd->add_option("--multipliers", o->run.multipliers, "Window lengths as multiples of the training length")
      ->delimiter(',');
  cmd->add_option("--stride", o->run.protocol.stride, "Sliding-window stride (default 256)");
  cmd->add_flag("--truncate", o->run.protocol.truncate, "Score the first L tokens of each long-enough document instead");
  cmd->add_option("--max-tokens", o->run.protocol.max_tokens, "Score at most this many tokens of the stream (0 = all)");
  cmd->add_option("--max-windows", o->run.protocol.max_windows, "At most this many windows per length (0 = all)");
  cmd->add_option("--with", o->run.with, "Earlier ppl result JSON files to draw beside this method");
  cmd->add_option("--out", o->run.out, "Output prefix: .json/.csv/.md tables, .png/.svg plot (default results/ppl)");
  cmd->callback([o, &rc] {
    rc = app::run([&] {
      o->run.method = method_spec(o->m);
      eval::run_ppl(o->run);
      return 0;
    });
  });

  struct FitOpts {
    MethodOptions m;
    eval::TemperatureFitRun run;
  };
  auto f = std::make_shared<FitOpts>();
  auto* fit = cli.add_subcommand("fit-temperature",
                                 "Fit c of the attention temperature β = 1 + c·ln(L/C) on held-out text; saved for "
                                 "--temperature auto");
  add_method_options(fit, f->m);
  add_data_options(fit, f->run.data);
  fit->add_option("--lengths", f->run.lengths, "Target lengths (> training length)")->delimiter(',');
  fit->add_option("--multipliers", f->run.multipliers,
                  "Target lengths as multiples of the training length (default 2,4)")->delimiter(',');
  fit->add_option("--stride", f->run.protocol.stride, "Sliding-window stride");
  fit->add_option("--max-tokens", f->run.protocol.max_tokens, "Held-out tokens to use (0 = all)");
  fit->add_option("--max-windows", f->run.protocol.max_windows, "At most this many windows per evaluation (0 = all)");
  fit->add_option("--beta-max", f->run.beta_max, "Largest β searched (default 2.5)");
  fit->add_option("--save", f->run.save, "Where to save the fit (default <model>/temperature.json)");
  fit->add_option("--out", f->run.out, "Also write tables and a β-vs-ppl plot with this prefix");
  fit->callback([f, &rc] {
    rc = app::run([&] {
      f->run.method = method_spec(f->m);
      eval::run_fit_temperature(f->run);
      return 0;
    });
  });
}

}  // namespace drope::evalcli
