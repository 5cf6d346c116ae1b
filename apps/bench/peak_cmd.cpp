// Flags of `drope-bench peak` (bench::run_peak).
#include <memory>

#include "app_common.h"
#include "bench/commands.h"
#include "cli_numbers.h"
#include "drope/bench/runners.h"

namespace drope::benchcli {

void add_peak_command(CLI::App& cli, int& rc) {
  auto po = std::make_shared<bench::PeakRun>();
  auto* sp = cli.add_subcommand("peak", "The machine's GEMM roof per dtype (LibTorch mm; square and "
                                        "training-shaped products), for MFU");
  sp->add_option("--threads", po->threads, "Intra-op threads (0 = LibTorch default, what drope-train uses)");
  sp->add_option("--rounds", po->rounds, "Interleaved rounds (median reported)")->capture_default_str();
  sp->add_option("--dtypes", po->dtypes, "float32 and/or bfloat16")->delimiter(',')->capture_default_str();
  sp->add_option("--json", po->json, "Also write the numbers as JSON here (atomic; - for one line on stdout)");
  sp->add_flag("--save", po->save,
               "Save the roof where drope-train reads it for MFU ($DROPE_PEAK_FILE, else ~/.cache/drope/peak.json)");
  sp->callback([po, &rc] {
    rc = app::run([&] {
      app::check_size_flag("--rounds", po->rounds, 1, 1 << 12);
      app::check_size_flag("--threads", po->threads, 0, 1 << 12);
      bench::run_peak(*po);
      return 0;
    });
  });
}

}  // namespace drope::benchcli
