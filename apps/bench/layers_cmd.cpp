// Flags of `drope-bench layers` (bench::run_layers).
#include <memory>

#include "app_common.h"
#include "bench/commands.h"
#include "cli_numbers.h"
#include "drope/bench/runners.h"
#include "drope/core/error.h"

namespace drope::benchcli {

void add_layers_command(CLI::App& cli, int& rc) {
  auto lo = std::make_shared<bench::LayersRun>();
  auto* lay = cli.add_subcommand("layers", "Fused RMSNorm / rotary / SwiGLU kernels and stacked q/k/v GEMMs vs the "
                                           "same math in separate ATen ops");
  lay->add_option("--batch", lo->batch, "Batch size")->capture_default_str();
  lay->add_option("--seq", lo->seq, "Sequence length")->capture_default_str();
  lay->add_option("--hidden", lo->hidden, "RMSNorm width")->capture_default_str();
  lay->add_option("--heads", lo->heads, "Heads (rotary)")->capture_default_str();
  lay->add_option("--kv-heads", lo->kv_heads, "Key/value heads (q/k/v projections)")->capture_default_str();
  lay->add_option("--head-dim", lo->head_dim, "Head dim (rotary, q/k/v projections)")->capture_default_str();
  lay->add_option("--ffn", lo->ffn, "MLP intermediate size (SwiGLU)")->capture_default_str();
  lay->add_option("--dtype", lo->dtype, "dtype")->check(CLI::IsMember({"float32", "float64"}))->capture_default_str();
  lay->add_option("--repeats", lo->repeats, "Timed runs (median reported)")->capture_default_str();
  lay->add_option("--threads", lo->threads, "Intra-op threads (0 = LibTorch default)");
  lay->add_option("--json", lo->json, "Also write the numbers as JSON here (atomic)");
  lay->callback([lo, &rc] {
    rc = app::run([&] {
      using app::check_size_flag;
      check_size_flag("--batch", lo->batch, 1, 1 << 20);
      check_size_flag("--seq", lo->seq, 1, app::kMaxTokensFlag);
      check_size_flag("--hidden", lo->hidden, 1, 1 << 20);
      check_size_flag("--heads", lo->heads, 1, 1 << 12);
      check_size_flag("--kv-heads", lo->kv_heads, 1, lo->heads);
      check_size_flag("--head-dim", lo->head_dim, 2, 1 << 14);
      if (lo->head_dim % 2) fail("--head-dim: expected an even number, got {}", lo->head_dim);
      check_size_flag("--ffn", lo->ffn, 1, 1 << 22);
      check_size_flag("--repeats", lo->repeats, 1, 1 << 20);
      check_size_flag("--threads", lo->threads, 0, 1 << 12);
      bench::run_layers(*lo);
      return 0;
    });
  });
}

}  // namespace drope::benchcli
