// Flags of `drope-eval niah` and `drope-eval niah-grid` (eval::run_niah, eval::run_niah_grid).
#include "eval/common.h"

namespace drope::evalcli {

namespace {

void add_common_options(CLI::App* cmd, MethodOptions& m, eval::NiahRunCommon& c) {
  add_method_options(cmd, m);
  // --model is not needed to only dump prompts (a tokenizer suffices); checked by the run.
  cmd->get_option("--model")->required(false);
  cmd->add_option("--lengths", c.lengths, "Target lengths in tokens, prompt + generation (e.g. 4096,8192)")->required();
  cmd->add_option("--seed", c.seed, "Seed of keys, values, depths and excerpts (same seed, same prompts)");
  cmd->add_option("--haystack", c.haystack,
                  "Essay haystack: a UTF-8 text file or a directory of them (default /usr/share/common-licenses)");
  cmd->add_option("--haystack-start", c.haystack_start,
                  "Where essay excerpts start: random (a random sentence, the paper's setting) or begin (RULER)")
      ->check(CLI::IsMember({"random", "begin"}));
  cmd->add_option("--batch-size", c.batch, "Prompts decoded together (default 1)");
  cmd->add_option("--max-new-tokens", c.max_new_tokens, "Generation limit, also reserved in the length (default 128)");
  cmd->add_flag("--bos", c.bos, "Prepend the tokenizer's BOS token (counted in the length)");
  cmd->add_option("--dump-prompts", c.dump,
                  "Write the prompts as jsonl to this file and stop (needs only --tokenizer or --model)");
}

}  // namespace

void add_niah_commands(CLI::App& cli, int& rc) {
  auto o = std::make_shared<MethodRun<eval::NiahRun>>();
  o->run.c.trials = 500;
  o->run.c.out = "results/niah";
  auto* cmd = cli.add_subcommand("niah", "RULER needle-in-a-haystack tasks (string_match_all), task × length table");
  add_common_options(cmd, o->m, o->run.c);
  cmd->add_option("--tasks", o->run.tasks,
                  "Comma-separated: single_1..3, multikey_1..3, multivalue, multiquery, 'paper' (multiquery, "
                  "multikey_1, multivalue) or 'all' (default)");
  cmd->add_option("--trials", o->run.c.trials, "Samples per task and length (default 500)");
  cmd->add_option("--out", o->run.c.out,
                  "Output prefix: .json/.csv/.md table and .samples.jsonl (default results/niah)");
  on_run(cmd, o, rc, &eval::run_niah);

  auto g = std::make_shared<MethodRun<eval::NiahGridRun>>();
  g->run.c.trials = 5;
  g->run.c.out = "results/niah-grid";
  auto* grid = cli.add_subcommand("niah-grid", "Kamradt-style needle grid: lengths × depths, heatmap of scores");
  add_common_options(grid, g->m, g->run.c);
  grid->add_option("--depths", g->run.depths, "Needle depths in % (default 0,10,...,100)");
  grid->add_option("--trials", g->run.c.trials, "Samples per cell (default 5)");
  grid->add_option(
      "--out", g->run.c.out,
      "Output prefix: .json/.csv/.md table, .png/.svg heatmap, .samples.jsonl (default results/niah-grid)");
  on_run(grid, g, rc, &eval::run_niah_grid);
}

}  // namespace drope::evalcli
