// drope-bench: benchmarks (not tests). `drope-bench attention`: our fused attention op against LibTorch's
// scaled_dot_product_attention (plain and with a dense additive mask) and the plain-ATen reference.
// `drope-bench layers`: the fused RMSNorm / rotary / SwiGLU kernels and the stacked q/k/v GEMM against the
// same math in separate ATen ops (what an eager PyTorch model runs). `drope-bench generate`: KV-cache generation
// throughput. The benchmarks run in the library (bench/runners.h); this file parses flags.
#include <CLI/CLI.hpp>

#include "app_common.h"
#include "cli_numbers.h"
#include "drope/bench/runners.h"
#include "drope/core/files.h"
#include "log_flags.h"

int main(int argc, char** argv) {
  CLI::App cli{"drope-bench: benchmarks of the drope ops"};
  cli.require_subcommand(1);

  drope::bench::AttentionRun ar;
  drope::bench::AttentionBenchOptions& opt = ar.options;
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
  att->add_option("--dtype", ar.dtype, "Input dtype")
      ->check(CLI::IsMember({"float32", "bfloat16", "float64"}))
      ->capture_default_str();
  att->add_option("--device", opt.device, "cpu or cuda (memory: CUDA allocator peak instead of RSS)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  att->add_option("--repeats", opt.repeats, "Timed runs per measurement (median reported)")->capture_default_str();
  att->add_option("--warmup", opt.warmup, "Untimed runs first")->capture_default_str();
  att->add_option("--max-seconds", opt.max_seconds,
                  "Budget per measurement; longer lengths predicted to exceed it are skipped")
      ->capture_default_str();
  att->add_option("--max-mem-gb", opt.max_mem_gb, "Skip measurements whose estimated extra memory exceeds this")
      ->capture_default_str();
  att->add_option("--cases", opt.cases, "Cases among causal, alibi, window, gqa")
      ->delimiter(',')
      ->capture_default_str();
  auto* impls_opt = att->add_option("--impls", opt.impls,
                                    "Implementations among ours, sdpa, sdpa_mask, reference; with --device cuda also "
                                    "the attention plan's backends forced one at a time: flash, mem_efficient, cudnn, "
                                    "own_cuda (default on CUDA: all eight)")
                        ->delimiter(',')
                        ->capture_default_str();
  att->add_flag("--forward-only", ar.forward_only, "Skip forward+backward");
  att->add_option("--json", ar.json, "Also write all numbers as JSON to this file (atomic)");

  // `generate`: one context length per process (peak RSS is per process). bench/generate.py runs it
  // beside HF generate.
  drope::bench::GenerateRun g;
  auto* gen = cli.add_subcommand("generate", "Prefill and decode tokens/s of greedy generation (KV cache)");
  gen->add_option("--model", g.model, "Model directory")->required();
  gen->add_option("--context", g.context, "Prompt tokens")->capture_default_str();
  gen->add_option("--new-tokens", g.new_tokens, "Tokens generated per run (the first ends the prefill)")
      ->capture_default_str();
  gen->add_option("--prefill-chunk", g.chunk, "Prompt tokens per prefill forward")->capture_default_str();
  gen->add_option("--threads", g.threads, "Intra-op threads (0 = LibTorch default)");
  gen->add_option("--seed", g.seed, "Seed of the random prompt");
  gen->add_option("--repeats", g.repeats, "Timed runs; the fastest is reported")->capture_default_str();
  gen->add_option("--json", g.json, "Write the numbers as JSON here (atomic)");
  gen->add_option("--device", g.device, "cpu or cuda (scripts/gpu-check.sh compares the tokens of both)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();

  drope::bench::LayersRun lo;
  auto* lay = cli.add_subcommand("layers", "Fused RMSNorm / rotary / SwiGLU kernels and stacked q/k/v GEMMs vs the "
                                           "same math in separate ATen ops");
  lay->add_option("--batch", lo.batch, "Batch size")->capture_default_str();
  lay->add_option("--seq", lo.seq, "Sequence length")->capture_default_str();
  lay->add_option("--hidden", lo.hidden, "RMSNorm width")->capture_default_str();
  lay->add_option("--heads", lo.heads, "Heads (rotary)")->capture_default_str();
  lay->add_option("--kv-heads", lo.kv_heads, "Key/value heads (q/k/v projections)")->capture_default_str();
  lay->add_option("--head-dim", lo.head_dim, "Head dim (rotary, q/k/v projections)")->capture_default_str();
  lay->add_option("--ffn", lo.ffn, "MLP intermediate size (SwiGLU)")->capture_default_str();
  lay->add_option("--dtype", lo.dtype, "dtype")->check(CLI::IsMember({"float32", "float64"}))->capture_default_str();
  lay->add_option("--repeats", lo.repeats, "Timed runs (median reported)")->capture_default_str();
  lay->add_option("--threads", lo.threads, "Intra-op threads (0 = LibTorch default)");
  lay->add_option("--json", lo.json, "Also write the numbers as JSON here (atomic)");
  drope::app::add_log_flags(cli, "drope-bench", stderr);  // stdout carries the tables and JSON
  drope::app::check_numeric_flags(cli);
  CLI11_PARSE(cli, argc, argv);

  return drope::app::run([&] {
    using drope::app::check_size_flag;
    if (lay->parsed()) {
      check_size_flag("--batch", lo.batch, 1, 1 << 20);
      check_size_flag("--seq", lo.seq, 1, drope::app::kMaxTokensFlag);
      check_size_flag("--hidden", lo.hidden, 1, 1 << 20);
      check_size_flag("--heads", lo.heads, 1, 1 << 12);
      check_size_flag("--kv-heads", lo.kv_heads, 1, lo.heads);
      check_size_flag("--head-dim", lo.head_dim, 2, 1 << 14);
      if (lo.head_dim % 2) drope::fail("--head-dim: expected an even number, got {}", lo.head_dim);
      check_size_flag("--ffn", lo.ffn, 1, 1 << 22);
      check_size_flag("--repeats", lo.repeats, 1, 1 << 20);
      check_size_flag("--threads", lo.threads, 0, 1 << 12);
      drope::bench::run_layers(lo);
    } else if (gen->parsed()) {
      check_size_flag("--context", g.context, 1, drope::app::kMaxTokensFlag);
      check_size_flag("--new-tokens", g.new_tokens, 1, drope::app::kMaxTokensFlag);
      check_size_flag("--prefill-chunk", g.chunk, 1, drope::app::kMaxTokensFlag);
      check_size_flag("--repeats", g.repeats, 1, 1 << 20);
      check_size_flag("--threads", g.threads, 0, 1 << 12);
      if (!g.json.empty()) drope::check_output_paths("--json", g.json, {g.json}, {{"--model", g.model}});
      drope::bench::run_generate(g);
    } else {
      ar.default_impls = impls_opt->count() == 0;
      drope::bench::run_attention(ar);
    }
    return 0;
  });
}
