// drope-train: pretraining, DroPE recalibration and RoPE-scaling fine-tuning from a YAML run config,
// single process or data parallel under torchrun (`torchrun --no-python --nproc_per_node=N drope-train ...`);
// `drope-train plot RUN_DIR` draws a run's loss and learning-rate curves from its log.jsonl; `drope-train settings`
// describes every key of a run config. The flags of each command live in apps/train/.
#include <CLI/CLI.hpp>

#include "cli_numbers.h"
#include "log_flags.h"
#include "train/commands.h"

int main(int argc, char** argv) {
  CLI::App cli{"drope-train: train decoder LMs with RoPE / NoPE / ALiBi / RNoPE-SWA, DroPE recalibration"};
  drope::traincli::TrainFlags train;
  drope::traincli::PlotFlags plot;
  drope::traincli::SettingsFlags settings;
  drope::traincli::add_train_options(cli, train);
  drope::traincli::add_plot_command(cli, plot);
  drope::traincli::add_settings_command(cli, settings);
  cli.require_subcommand(0, 1);
  drope::app::add_log_flags(cli, "drope-train");
  drope::app::check_numeric_flags(cli);
  CLI11_PARSE(cli, argc, argv);
  if (plot.cmd->parsed()) return drope::traincli::run_plot(plot, train);
  if (settings.cmd->parsed()) return drope::traincli::run_settings_command(settings, train);
  return drope::traincli::run_train(train);
}
