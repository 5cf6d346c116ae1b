// drope-data: prepare token shards from text / JSON Lines (plain, .gz, .zst) / parquet, and encode/decode
// with a tokenizer. Torch-free, so it starts instantly and runs where LibTorch is not installed. The flags of
// each command live in apps/data/.
#include <CLI/CLI.hpp>

#include "cli_numbers.h"
#include "data/commands.h"
#include "log_flags.h"

int main(int argc, char** argv) {
  CLI::App cli{"drope-data: token shards for training, and tokenizer encode/decode"};
  cli.require_subcommand(1);
  int rc = 0;
  drope::datacli::add_prepare_command(cli, rc);
  drope::datacli::add_tokenize_commands(cli, rc);
  drope::app::add_log_flags(cli, "drope-data");
  drope::app::check_numeric_flags(cli);
  CLI11_PARSE(cli, argc, argv);
  return rc;
}
