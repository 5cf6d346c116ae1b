// Flags of `drope-bench generate` (bench::run_generate): one context length per process (peak RSS is per
// process); scripts/bench_generate.py runs it beside HF generate.
#include <memory>

#include "app_common.h"
#include "bench/commands.h"
#include "cli_numbers.h"
#include "drope/bench/runners.h"
#include "drope/core/files.h"

namespace drope::benchcli {

void add_generate_command(CLI::App& cli, int& rc) {
  auto g = std::make_shared<bench::GenerateRun>();
  auto* gen = cli.add_subcommand("generate", "Prefill and decode tokens/s of greedy generation (KV cache)");
  gen->add_option("--model", g->model, "Model directory")->required();
  gen->add_option("--context", g->context, "Prompt tokens")->capture_default_str();
  gen->add_option("--new-tokens", g->new_tokens, "Tokens generated per run (the first ends the prefill)")
      ->capture_default_str();
  gen->add_option("--prefill-chunk", g->chunk, "Prompt tokens per prefill forward")->capture_default_str();
  gen->add_option("--threads", g->threads, "Intra-op threads (0 = LibTorch default)");
  gen->add_option("--seed", g->seed, "Seed of the random prompt");
  gen->add_option("--repeats", g->repeats, "Timed runs; the fastest is reported")->capture_default_str();
  gen->add_option("--json", g->json, "Write the numbers as JSON here (atomic)");
  gen->add_option("--device", g->device, "cpu or cuda (scripts/gpu-check.sh compares the tokens of both)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  gen->callback([g, &rc] {
    rc = app::run([&] {
      using app::check_size_flag;
      check_size_flag("--context", g->context, 1, app::kMaxTokensFlag);
      check_size_flag("--new-tokens", g->new_tokens, 1, app::kMaxTokensFlag);
      check_size_flag("--prefill-chunk", g->chunk, 1, app::kMaxTokensFlag);
      check_size_flag("--repeats", g->repeats, 1, 1 << 20);
      check_size_flag("--threads", g->threads, 0, 1 << 12);
      if (!g->json.empty()) check_output_paths("--json", g->json, {g->json}, {{"--model", g->model}});
      bench::run_generate(*g);
      return 0;
    });
  });
}

}  // namespace drope::benchcli
