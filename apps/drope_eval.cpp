// drope-eval: evaluation tools. Each command family lives in apps/eval/.
#include <CLI/CLI.hpp>

#include "cli_numbers.h"
#include "eval/common.h"
#include "log_flags.h"

int main(int argc, char** argv) {
  CLI::App cli{
      "drope-eval: perplexity, needle-in-a-haystack, offset-key retrieval, LongBench and generation for drope and HF models"};
  cli.require_subcommand(1);
  int rc = 0;
  drope::evalcli::add_logits_command(cli, rc);
  drope::evalcli::add_ppl_commands(cli, rc);
  drope::evalcli::add_generate_command(cli, rc);
  drope::evalcli::add_niah_commands(cli, rc);
  drope::evalcli::add_offset_key_command(cli, rc);
  drope::evalcli::add_longbench_commands(cli, rc);
  drope::evalcli::add_compare_command(cli, rc);
  drope::app::add_log_flags(cli, "drope-eval");
  drope::app::check_numeric_flags(cli);
  CLI11_PARSE(cli, argc, argv);
  return rc;
}
