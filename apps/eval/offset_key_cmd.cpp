// Flags of `drope-eval offset-key` (eval::run_offset_key).
#include "eval/common.h"

#include "drope/core/error.h"
#include "drope/eval/offset_key.h"

namespace drope::evalcli {

void add_offset_key_command(CLI::App& cli, int& rc) {
  auto o = std::make_shared<MethodRun<eval::OffsetKeyRun>>();
  auto* cmd = cli.add_subcommand("offset-key",
                                 "Offset-key retrieval accuracy vs length, overall and on needles farther than C");
  add_method_options(cmd, o->m);
  cmd->add_option("--lengths", o->run.lengths, "Sequence lengths (tokens, >= 17)")->delimiter(',');
  cmd->add_option("--multipliers", o->run.multipliers, "Sequence lengths as multiples of the training length")
      ->delimiter(',');
  cmd->add_option("--queries", o->run.queries, "Queries per length, 4 per sequence (default 1000)");
  cmd->add_option("--seed", o->run.seed, "Generator seed (default 42)");
  cmd->add_option("--split", o->run.split,
                  "Index split of the sequences: test (default; reported results) or heldout (model selection, "
                  "never the test sequences)");
  cmd->add_option("--batch-size", o->run.batch, "Sequences per forward (default 16)");
  cmd->add_option("--far-threshold", o->run.far_threshold,
                  "A needle is far when its distance to the query exceeds this (default: the training length)");
  cmd->add_option("--out", o->run.out,
                  "Output prefix: .json/.csv/.md tables, .png/.svg plot (default results/offset-key)");
  cmd->add_flag("--crop", o->run.crop,
                "The cropped-context baseline: plain RoPE reading, beyond the training length C, only BOS and the "
                "last C - 1 tokens (the query block and the body before it)");
  // The crop is the model as it is: refused with the method flags before anything loads (one error line).
  cmd->parse_complete_callback([o] {
    if (o->run.crop && (o->m.rope_scaling != "none" || o->m.factor != 0.0 || !o->m.temperature.empty()))
      throw CLI::RuntimeError(app::run(
          []() -> int { fail("--crop is plain RoPE: it takes no --rope-scaling, --factor or --temperature"); }));
  });
  on_run(cmd, o, rc, &eval::run_offset_key);
}

}  // namespace drope::evalcli
