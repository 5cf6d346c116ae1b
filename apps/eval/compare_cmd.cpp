// Flags of `drope-eval compare` (eval::run_compare).
#include "app_common.h"
#include "drope/eval/runners.h"
#include "eval/common.h"

namespace drope::evalcli {

void add_compare_command(CLI::App& cli, int& rc) {
  auto o = std::make_shared<eval::CompareRun>();
  auto* cmd = cli.add_subcommand("compare", "Side-by-side table of result JSON files (ppl, niah, longbench)");
  cmd->add_option("files", o->files, "Result .json files written by drope-eval")->required();
  cmd->add_option("--out", o->out, "Output prefix (.json/.csv/.md)");
  cmd->add_option("--title", o->title, "Table title");
  cmd->add_option("--plot", o->plot,
                  "Also plot summary entries <name>@L vs L per method (e.g. far, acc, ppl); files sharing a label "
                  "are seeds: mean and min-max band");
  cmd->callback([o, &rc] {
    rc = app::run([&] {
      Inputs in;
      for (const auto& f : o->files) in.emplace_back("FILES", f);
      const DirLock lock = claim_output(o->out, prefix_outputs(o->out), in);
      return eval::run_compare(*o), 0;
    });
  });
}

}  // namespace drope::evalcli
