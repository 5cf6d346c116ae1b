// Flags of `drope-train plot` (train::plot_training_curves).
#include "app_common.h"
#include "drope/core/error.h"
#include "drope/core/log.h"
#include "drope/train/curves.h"
#include "train/commands.h"

namespace drope::traincli {

void add_plot_command(CLI::App& cli, PlotFlags& p) {
  p.cmd = cli.add_subcommand("plot", "Loss and learning-rate curves of a run (from RUN_DIR/log.jsonl) as PNG "
                                     "and SVG; a config file named plot: ./plot");
  p.cmd->add_option("run_dir", p.run_dir, "Run directory (run.out_dir of a drope-train config)")->required();
  p.cmd->add_option("--out", p.out, "Output prefix: writes PREFIX.png and PREFIX.svg (default RUN_DIR/curves)");
  p.cmd->fallthrough();  // refused training flags after RUN_DIR
}

int run_plot(const PlotFlags& p, const TrainFlags& f) {
  if (!f.config.empty() || !f.sets.empty() || f.resume || f.print_config)
    return app::run([]() -> int {
      fail("drope-train plot takes RUN_DIR and --out only (not a config, --set, --resume or --print-config)");
    });
  return app::run([&] {
    for (const auto& path : train::plot_training_curves(p.run_dir, p.out)) logging::info("wrote {}", path);
    return 0;
  });
}

}  // namespace drope::traincli
