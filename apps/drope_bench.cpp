// drope-bench: benchmarks (not tests). `drope-bench attention`: our fused attention op against LibTorch's
// scaled_dot_product_attention (plain and with a dense additive mask) and the plain-ATen reference.
#include <cstdio>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "app_common.h"
#include "drope/bench/attention_bench.h"
#include "drope/core/error.h"

int main(int argc, char** argv) {
  CLI::App cli{"drope-bench: benchmarks of the drope ops"};
  cli.require_subcommand(1);

  drope::bench::AttentionBenchOptions opt;
  std::string dtype = "float32", json_path;
  bool fwd_only = false, quiet = false;
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
  att->add_option("--dtype", dtype, "Input dtype")->check(CLI::IsMember({"float32", "bfloat16", "float64"}))
      ->capture_default_str();
  att->add_option("--repeats", opt.repeats, "Timed runs per measurement (median reported)")->capture_default_str();
  att->add_option("--warmup", opt.warmup, "Untimed runs first")->capture_default_str();
  att->add_option("--max-seconds", opt.max_seconds,
                  "Budget per measurement; longer lengths predicted to exceed it are skipped")
      ->capture_default_str();
  att->add_option("--max-mem-gb", opt.max_mem_gb, "Skip measurements whose estimated extra memory exceeds this")
      ->capture_default_str();
  att->add_option("--cases", opt.cases, "Cases among causal, alibi, window, gqa")->delimiter(',')->capture_default_str();
  att->add_option("--impls", opt.impls, "Implementations among ours, sdpa, sdpa_mask, reference")
      ->delimiter(',')
      ->capture_default_str();
  att->add_flag("--forward-only", fwd_only, "Skip forward+backward");
  att->add_option("--json", json_path, "Also write all numbers as JSON to this file (atomic)");
  att->add_flag("--quiet", quiet, "No progress lines on stderr");
  CLI11_PARSE(cli, argc, argv);

  return drope::app::run([&] {
    opt.dtype = dtype == "bfloat16" ? at::kBFloat16 : dtype == "float64" ? at::kDouble : at::kFloat;
    opt.backward = !fwd_only;
    if (!quiet)
      opt.log = [](const std::string& line) {
        std::fprintf(stderr, "%s\n", line.c_str());
        std::fflush(stderr);
      };
    const auto res = drope::bench::run_attention_bench(opt);
    fmt::print("{}", drope::bench::format_attention_table(res));
    if (!json_path.empty()) {
      drope::bench::write_attention_bench_json(res, json_path);
      fmt::print("wrote {}\n", json_path);
    }
    return 0;
  });
}
