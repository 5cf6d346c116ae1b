// Flags of `drope-bench step-parts` (bench::run_step_parts).
#include <memory>

#include "app_common.h"
#include "bench/commands.h"
#include "cli_numbers.h"
#include "drope/bench/runners.h"
#include "drope/config/model_config.h"

namespace drope::benchcli {

void add_step_parts_command(CLI::App& cli, int& rc) {
  auto so = std::make_shared<bench::StepPartsRun>();
  auto* sp = cli.add_subcommand("step-parts", "The fused LM-head loss and the fused AdamW update against their "
                                              "separate-ops paths (and the loss against materialised logits)");
  sp->add_option("--preset", so->preset, "Model preset (its vocabulary, hidden size and parameters)")
      ->check(CLI::IsMember(model_preset_names()))
      ->capture_default_str();
  sp->add_option("--rows", so->rows, "Tokens in the loss (batch x sequence)")->capture_default_str();
  sp->add_option("--repeats", so->repeats, "Timed runs of each path (median reported)")->capture_default_str();
  sp->add_option("--threads", so->threads, "Intra-op threads (0 = LibTorch default)");
  sp->add_option("--json", so->json, "Also write the numbers as JSON here (atomic)");
  sp->callback([so, &rc] {
    rc = app::run([&] {
      app::check_size_flag("--rows", so->rows, 1, app::kMaxTokensFlag);
      app::check_size_flag("--repeats", so->repeats, 1, 1 << 20);
      app::check_size_flag("--threads", so->threads, 0, 1 << 12);
      bench::run_step_parts(*so);
      return 0;
    });
  });
}

}  // namespace drope::benchcli
