// drope-train: pretraining, DroPE recalibration and RoPE-scaling fine-tuning from a YAML run config,
// single process or data parallel under torchrun (`torchrun --no-python --nproc_per_node=N drope-train ...`);
// `drope-train plot RUN_DIR` draws a run's loss and learning-rate curves from its log.jsonl.
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "app_common.h"
#include "cli_numbers.h"
#include "drope/core/error.h"
#include "drope/core/log.h"
#include "drope/io/model_io.h"
#include "drope/train/curves.h"
#include "drope/train/distributed.h"
#include "drope/train/memory_plan.h"
#include "drope/train/recompute.h"
#include "drope/train/run_config.h"
#include "drope/train/tensor_memory.h"
#include "drope/train/trainer.h"
#include "log_flags.h"

int main(int argc, char** argv) {
  CLI::App cli{"drope-train: train decoder LMs with RoPE / NoPE / ALiBi / RNoPE-SWA, DroPE recalibration"};
  std::string config;
  std::vector<std::string> sets;
  bool resume = false, print_config = false;
  cli.add_option("config", config, "Run config YAML (see configs/)");
  cli.add_option("--set", sets, "Override a config key: --set train.steps=100 (repeatable)");
  cli.add_flag("--resume", resume,
               "Continue from the newest checkpoint in run.out_dir (automatic after a torchrun restart)");
  cli.add_flag("--print-config", print_config, "Print the resolved config and exit");
  bool force = false;
  cli.add_flag("--force", force,
               "Write into run.out_dir even if it is a non-empty directory that is not a drope-train run");
  bool plan = false;
  int64_t plan_world = 0;
  double gpu_mem_gb = 80;
  cli.add_flag("--plan", plan,
               "Print the memory plan per rank for every train.shard mode (and the largest micro-batch "
               "that fits --gpu-mem-gb) and exit; nothing is allocated");
  auto* world_opt =
      cli.add_option("--world", plan_world, "With --plan: data-parallel world size (default: WORLD_SIZE, else 1)");
  auto* gpu_mem_opt =
      cli.add_option("--gpu-mem-gb", gpu_mem_gb, "With --plan: device memory per rank in GB (default 80)");
  bool plan_json = false;
  auto* json_opt =
      cli.add_flag("--json", plan_json, "With --plan: one JSON object per shard mode (bytes) instead of the table");
  std::string plot_dir, plot_out;
  auto* plot = cli.add_subcommand("plot", "Loss and learning-rate curves of a run (from RUN_DIR/log.jsonl) as PNG "
                                          "and SVG; a config file named plot: ./plot");
  plot->add_option("run_dir", plot_dir, "Run directory (run.out_dir of a drope-train config)")->required();
  plot->add_option("--out", plot_out, "Output prefix: writes PREFIX.png and PREFIX.svg (default RUN_DIR/curves)");
  plot->fallthrough();  // refused training flags after RUN_DIR
  cli.require_subcommand(0, 1);
  drope::app::add_log_flags(cli, "drope-train");
  drope::app::check_numeric_flags(cli);
  CLI11_PARSE(cli, argc, argv);
  if (plot->parsed()) {
    if (!config.empty() || !sets.empty() || resume || print_config)
      return drope::app::run([]() -> int {
        drope::fail("drope-train plot takes RUN_DIR and --out only (not a config, --set, --resume or --print-config)");
      });
    return drope::app::run([&] {
      for (const auto& p : drope::train::plot_training_curves(plot_dir, plot_out)) drope::logging::info("wrote {}", p);
      return 0;
    });
  }
  return drope::app::run([&] {
    if (config.empty()) drope::fail("a run config YAML is required: drope-train CONFIG (or drope-train plot RUN_DIR)");
    drope::train::install_stop_handlers();  // first: before LibTorch or oneDNN start threads
    auto cfg = drope::train::load_run_config(config, sets);
    drope::train::TrainOptions opt;
    opt.run_yaml = drope::train::run_config_to_yaml(cfg);
    if (print_config) {
      fmt::print("{}", opt.run_yaml);
      return 0;
    }
    if (!plan && (world_opt->count() > 0 || gpu_mem_opt->count() > 0 || json_opt->count() > 0))
      drope::fail("--world, --gpu-mem-gb and --json go with --plan");
    if (plan) {
      if (world_opt->count() > 0) drope::app::check_size_flag("--world", plan_world, 1, 1 << 20);
      const int world = world_opt->count() > 0 ? int(plan_world) : drope::train::read_dist_env().world;
      if (!(gpu_mem_gb > 0 && gpu_mem_gb <= 1e6))
        drope::fail("--gpu-mem-gb: expected a number in (0, 1e6], got {}", gpu_mem_gb);
      drope::train::PlanInput in;
      in.model = cfg.init.empty() ? cfg.model : drope::io::load_model_config_dir(cfg.init);
      in.seq_len = cfg.data.seq_len;
      in.world = world;
      if (cfg.data.batch_size % world != 0)
        drope::fail("{}: data.batch_size {} is not a multiple of the world size {}", cfg.source, cfg.data.batch_size,
                    world);
      in.micro_batch = cfg.data.micro_batch > 0 ? cfg.data.micro_batch : cfg.data.batch_size / world;
      if (cfg.data.batch_size % (in.micro_batch * world) != 0)
        drope::fail("{}: data.batch_size {} is not a multiple of micro_batch ({}) x world size ({})", cfg.source,
                    cfg.data.batch_size, in.micro_batch, world);
      in.activation_checkpointing = cfg.train.activation_checkpointing;
      drope::train::check_activation_checkpointing(in.activation_checkpointing, in.model.num_layers, cfg.source);
      in.bf16 = cfg.train.dtype == "bfloat16";
      in.chunked_loss = cfg.train.chunked_loss;
      in.allreduce_bucket_mb = cfg.train.allreduce_bucket_mb;
      if (plan_json) {
        for (auto mode : {drope::ShardMode::kNone, drope::ShardMode::kOptimizer, drope::ShardMode::kGrads,
                          drope::ShardMode::kParams}) {
          const auto p = drope::train::plan_memory(in, mode);
          fmt::print("{{\"shard\": \"{}\", \"params\": {}, \"grads\": {}, \"optimizer\": {}, \"activations\": {}, "
                     "\"logits\": {}, \"comm\": {}, \"total\": {}, \"largest_micro_batch\": {}}}\n",
                     drope::name_of(mode), p.params, p.grads, p.optimizer, p.activations, p.logits, p.comm, p.total(),
                     drope::train::largest_micro_batch(in, mode, int64_t(gpu_mem_gb * 1e9)));
        }
        return 0;
      }
      fmt::print("{}: configured train.shard {}\n{}", cfg.source, drope::name_of(cfg.train.shard),
                 drope::train::plan_table(in, gpu_mem_gb));
      return 0;
    }
    opt.resume = resume || drope::train::read_dist_env().restart_count > 0;
    opt.force = force;
    drope::train::install_tensor_memory_tracker_from_env();  // before the model's tensors exist
    drope::train::Trainer(cfg, opt).run();
    return 0;
  });
}
