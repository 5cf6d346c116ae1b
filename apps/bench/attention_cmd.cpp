// Flags of `drope-bench attention` (bench::run_attention).
#include <memory>

#include "app_common.h"
#include "bench/commands.h"
#include "drope/bench/attention_bench.h"
#include "drope/bench/runners.h"

namespace drope::benchcli {

void add_attention_command(CLI::App& cli, int& rc) {
  auto ar = std::make_shared<bench::AttentionRun>();
  bench::AttentionBenchOptions& opt = ar->options;
  auto* att = cli.add_subcommand("attention",
                                 "Fused attention vs SDPA (plain, dense mask) vs plain-ATen reference: causal, ALiBi, "
                                 "sliding window, GQA; forward and forward+backward");
  att->add_option("--lengths", opt.lengths, "Sequence lengths T (= S), comma separated")
      ->delimiter(',')
      ->capture_default_str();
  att->add_option("--batch", opt.batch, "Batch size B")->capture_default_str();
  att->add_option("--heads", opt.heads, "Query heads H")->capture_default_str();
  att->add_option("--gqa-kv-heads", opt.gqa_kv_heads, "KV heads of the GQA case")->capture_default_str();
  att->add_option("--head-dim", opt.head_dim, "Head dim D")->capture_default_str();
  att->add_option("--window", opt.window, "Sliding window W of the window case")->capture_default_str();
  att->add_option("--dtype", ar->dtype, "Input dtype")
      ->check(CLI::IsMember({"float32", "bfloat16", "float64"}))
      ->capture_default_str();
  att->add_option("--device", opt.device, "cpu or cuda (memory: CUDA allocator peak instead of RSS)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  att->add_option("--repeats", opt.repeats, "Timed runs per measurement (median reported)")->capture_default_str();
  att->add_option("--rounds", opt.rounds,
                  "Interleaved rounds: each implementation once per round; medians over rounds, per-round ratios")
      ->capture_default_str();
  att->add_option("--warmup", opt.warmup, "Untimed runs first")->capture_default_str();
  att->add_option("--max-seconds", opt.max_seconds,
                  "Budget per measurement; longer lengths predicted to exceed it are skipped")
      ->capture_default_str();
  att->add_option("--max-mem-gb", opt.max_mem_gb, "Skip measurements whose estimated extra memory exceeds this")
      ->capture_default_str();
  att->add_option("--cases", opt.cases, "Cases among causal, alibi, window, gqa")
      ->delimiter(',')
      ->capture_default_str();
  std::string backends;  // the registry's CUDA backends, in its listing order
  for (const auto& b : bench::attention_backend_impls()) backends += (backends.empty() ? "" : ", ") + b;
  auto* impls_opt = att->add_option("--impls", opt.impls,
                                    "Implementations among ours, sdpa, sdpa_mask, reference; with --device cuda also "
                                    "the attention plan's backends forced one at a time: " +
                                        backends + " (default on CUDA: all of them)")
                        ->delimiter(',')
                        ->capture_default_str();
  att->add_flag("--forward-only", ar->forward_only, "Skip forward+backward");
  att->add_option("--json", ar->json, "Also write all numbers as JSON to this file (atomic)");
  att->callback([ar, impls_opt, &rc] {
    rc = app::run([&] {
      ar->default_impls = impls_opt->count() == 0;
      bench::run_attention(*ar);
      return 0;
    });
  });
}

}  // namespace drope::benchcli
