// drope-analyze: positional analyses (paper §3–4). `bias-grad` measures the gradients of the attention
// positional bias A^c at initialisation (Figure 3), `constant-seq` checks Proposition 3.1, `rope-scaling`
// prints/plots the scaled RoPE frequencies γ_m (Figure 6), `attention` draws one head's attention map,
// `head-scores` measures every head's previous-token attention (and, on offset-key sequences, the answer's
// attention to its query and needles) and `needle-attention` shows where the last query attends around a needle
// (Figures 7–8). The analyses run in
// the library (analyze/runners.h); their flags live in apps/analyze/.
#include <CLI/CLI.hpp>

#include "analyze/commands.h"
#include "cli_numbers.h"
#include "log_flags.h"

int main(int argc, char** argv) {
  CLI::App cli{"drope-analyze: positional-bias and RoPE-scaling analyses"};
  cli.require_subcommand(1);
  int rc = 0;
  drope::analyzecli::add_rope_scaling_command(cli, rc);
  drope::analyzecli::add_bias_grad_command(cli, rc);
  drope::analyzecli::add_model_commands(cli, rc);
  drope::analyzecli::add_needle_attention_command(cli, rc);
  drope::app::add_log_flags(cli, "drope-analyze", stderr);  // stdout carries JSON and tables
  drope::app::check_numeric_flags(cli);
  CLI11_PARSE(cli, argc, argv);
  return rc;
}
