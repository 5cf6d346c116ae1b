// drope-model: create, inspect, convert and DroPE-transform model directories. Each command family lives in
// apps/model/.
#include <CLI/CLI.hpp>

#include "cli_numbers.h"
#include "log_flags.h"
#include "model/commands.h"

int main(int argc, char** argv) {
  CLI::App cli{"drope-model: create, inspect, convert and DroPE-transform models"};
  cli.require_subcommand(1);
  int rc = 0;
  drope::modelcli::add_info_command(cli, rc);
  drope::modelcli::add_write_commands(cli, rc);
  drope::modelcli::add_gguf_command(cli, rc);
  drope::app::add_log_flags(cli, "drope-model");
  drope::app::check_numeric_flags(cli);
  CLI11_PARSE(cli, argc, argv);
  return rc;
}
