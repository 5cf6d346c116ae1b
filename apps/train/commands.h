// drope-train's flag parsing: the training flags (a run config, its overrides, --plan), `drope-train plot` and
// `drope-train settings`.
// The runs themselves are library calls (drope/train/trainer.h, plan_run.h, curves.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace drope::traincli {

struct TrainFlags {
  std::string config;
  std::vector<std::string> sets;
  bool resume = false, print_config = false, force = false;
  bool allow_foreign_checkpoint = false;
  bool plan = false, plan_json = false;
  int64_t plan_world = 0;
  double gpu_mem_gb = 80;
  CLI::Option *world_opt = nullptr, *gpu_mem_opt = nullptr, *json_opt = nullptr;
};

struct PlotFlags {
  std::string run_dir, out;
  CLI::App* cmd = nullptr;
};

struct SettingsFlags {
  bool markdown = false;
  std::string doc;
  CLI::App* cmd = nullptr;
};

// The training flags, on the tool itself (drope-train CONFIG ...).
void add_train_options(CLI::App& cli, TrainFlags& f);
// `drope-train plot RUN_DIR`.
void add_plot_command(CLI::App& cli, PlotFlags& p);
// `drope-train settings [--markdown | --doc FILE]`.
void add_settings_command(CLI::App& cli, SettingsFlags& s);

// The exit status of a training run (or --print-config, --plan), of `plot` and of `settings`.
int run_train(const TrainFlags& f);
int run_plot(const PlotFlags& p, const TrainFlags& f);
int run_settings_command(const SettingsFlags& s, const TrainFlags& f);

}  // namespace drope::traincli
