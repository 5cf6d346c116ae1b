// drope-bench: benchmarks (not tests). `drope-bench attention`: our fused attention op against LibTorch's
// scaled_dot_product_attention (plain and with a dense additive mask) and the plain-ATen reference.
// `drope-bench layers`: the fused RMSNorm / rotary / SwiGLU kernels and the stacked q/k/v GEMM against the
// same math in separate ATen ops (what an eager PyTorch model runs). `drope-bench step-parts`: the fused LM-head
// loss and the fused AdamW update against their separate-ops paths. `drope-bench generate`: KV-cache generation
// throughput. `drope-bench peak`: the machine's GEMM roof per dtype, for MFU. The benchmarks run in the library
// (bench/runners.h); their flags live in apps/bench/.
#include <CLI/CLI.hpp>

#include "bench/commands.h"
#include "cli_numbers.h"
#include "log_flags.h"

int main(int argc, char** argv) {
  CLI::App cli{"drope-bench: benchmarks of the drope ops"};
  cli.require_subcommand(1);
  int rc = 0;
  drope::benchcli::add_attention_command(cli, rc);
  drope::benchcli::add_generate_command(cli, rc);
  drope::benchcli::add_layers_command(cli, rc);
  drope::benchcli::add_step_parts_command(cli, rc);
  drope::benchcli::add_peak_command(cli, rc);
  drope::app::add_log_flags(cli, "drope-bench", stderr);  // stdout carries the tables and JSON
  drope::app::check_numeric_flags(cli);
  CLI11_PARSE(cli, argc, argv);
  return rc;
}
