// Flags of `drope-analyze needle-attention` (analyze::run_needle_attention).
#include <memory>

#include "analyze/commands.h"
#include "app_common.h"

namespace drope::analyzecli {

void add_needle_attention_command(CLI::App& cli, int& rc) {
  auto nd = std::make_shared<analyze::NeedleAttentionRun>();
  auto* na = cli.add_subcommand("needle-attention",
                                "Where the last query attends around a needle, per method (paper Figures 7–8)");
  na->add_option("--model", nd->models, "Model directory (repeatable)")->required();
  na->add_option(
      "--method", nd->methods,
      "none | pi:S | ntk:S | yarn:S | ... | temperature:C | temperature:auto | drope+qk (repeatable; default "
      "none; docs/evaluation.md)");
  na->add_option("--tokenizer", nd->tokenizer, "Tokenizer (default: the model directory's; byte tokens if none)");
  na->add_option("--length", nd->length, "Prompt tokens (default 2 × the model's training length)");
  na->add_option("--depth", nd->depth, "Needle depth in % of the haystack (default 50)");
  na->add_option("--window", nd->window, "Keys shown on each side of the needle (default 32)");
  na->add_option("--haystack", nd->haystack, "Haystack text file (default GPL-3 from /usr/share/common-licenses)");
  na->add_option("--seed", nd->seed, "Seed of the needle's key and value");
  na->add_option("--out", nd->out, "Output directory for needle_attention.{png,svg,json,csv}")->required();
  na->callback([nd, &rc] {
    rc = app::run([&] {
      Inputs in = {{"--tokenizer", nd->tokenizer}, {"--haystack", nd->haystack}};
      for (const auto& m : nd->models) in.emplace_back("--model", m);
      const auto lock = claim_out(nd->out, in);
      analyze::run_needle_attention(*nd);
      return 0;
    });
  });
}

}  // namespace drope::analyzecli
