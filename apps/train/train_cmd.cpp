// Flags of `drope-train CONFIG` (train::Trainer, train::run_plan).
#include <fmt/format.h>

#include "app_common.h"
#include "cli_numbers.h"
#include "drope/core/error.h"
#include "drope/train/distributed.h"
#include "drope/train/plan_run.h"
#include "drope/train/run_config.h"
#include "drope/train/settings.h"
#include "drope/train/tensor_memory.h"
#include "drope/train/trainer.h"
#include "train/commands.h"

namespace drope::traincli {

void add_train_options(CLI::App& cli, TrainFlags& f) {
  cli.add_option("config", f.config, "Run config YAML (see configs/)");
  cli.add_option("--set", f.sets, "Override a config key: --set train.steps=100 (repeatable)");
  cli.add_flag("--resume", f.resume,
               "Continue from the newest checkpoint in run.out_dir, or start the run when it holds none (so one "
               "command line serves every launch; automatic after a torchrun restart)");
  cli.add_flag("--allow-foreign-checkpoint", f.allow_foreign_checkpoint,
               "Load a checkpoint (--resume, or run.init) whose files do not match the digests or the run and step "
               "its state.json records, with a warning naming each file and tensor: weights grafted on purpose");
  cli.add_flag("--print-config", f.print_config, "Print the resolved config and exit");
  cli.add_flag("--force", f.force,
               "Write into run.out_dir even if it is a non-empty directory that is not a drope-train run");
  cli.add_flag("--plan", f.plan,
               "Print the memory plan per rank for every train.shard mode (and the largest micro-batch "
               "that fits --gpu-mem-gb) and exit; nothing is allocated");
  f.world_opt =
      cli.add_option("--world", f.plan_world, "With --plan: data-parallel world size (default: WORLD_SIZE, else 1)");
  f.gpu_mem_opt =
      cli.add_option("--gpu-mem-gb", f.gpu_mem_gb, "With --plan: device memory per rank in GB (default 80)");
  f.json_opt =
      cli.add_flag("--json", f.plan_json, "With --plan: one JSON object per shard mode (bytes) instead of the table");
  cli.footer(train::settings_help());
}

namespace {

int train_or_plan(const TrainFlags& f) {
  if (f.config.empty()) fail("a run config YAML is required: drope-train CONFIG (or drope-train plot RUN_DIR)");
  train::install_stop_handlers();  // first: before LibTorch or oneDNN start threads
  auto cfg = train::load_run_config(f.config, f.sets);
  train::TrainOptions opt;
  opt.run_yaml = train::run_config_to_yaml(cfg);
  if (f.print_config) {
    fmt::print("{}", opt.run_yaml);
    return 0;
  }
  if (!f.plan && (f.world_opt->count() > 0 || f.gpu_mem_opt->count() > 0 || f.json_opt->count() > 0))
    fail("--world, --gpu-mem-gb and --json go with --plan");
  if (f.plan) {
    if (f.world_opt->count() > 0) app::check_size_flag("--world", f.plan_world, 1, 1 << 20);
    train::PlanRun r;
    r.world = f.world_opt->count() > 0 ? int(f.plan_world) : train::read_dist_env().world;
    if (!(f.gpu_mem_gb > 0 && f.gpu_mem_gb <= 1e6))
      fail("--gpu-mem-gb: expected a number in (0, 1e6], got {}", f.gpu_mem_gb);
    r.gpu_mem_gb = f.gpu_mem_gb;
    r.json = f.plan_json;
    train::run_plan(cfg, r);
    return 0;
  }
  opt.resume = f.resume || train::read_dist_env().restart_count > 0;
  opt.force = f.force;
  cfg.init_import.allow_foreign_checkpoint = f.allow_foreign_checkpoint;
  train::install_tensor_memory_tracker_from_env();  // before the model's tensors exist
  train::Trainer(cfg, opt).run();
  return 0;
}

}  // namespace

int run_train(const TrainFlags& f) {
  return app::run([&] {
    try {
      return train_or_plan(f);
    } catch (const std::exception& e) {
      // A rank that fails before it joined the others (a config missing on its node, a bad flag) tells them, so
      // that they stop at once instead of waiting train.dist_timeout_s for it; a no-op once it joined.
      const std::string what = e.what();
      train::tell_peers_start_failed(what.substr(0, what.find('\n')));
      throw;
    }
  });
}

}  // namespace drope::traincli
