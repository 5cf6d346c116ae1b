// drope-bench: benchmarks (not tests). `drope-bench attention`: our fused attention op against LibTorch's
// scaled_dot_product_attention (plain and with a dense additive mask) and the plain-ATen reference.
#include <sys/resource.h>

#include <chrono>
#include <fstream>
#include <cstdio>
#include <random>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "app_common.h"
#include "drope/bench/attention_bench.h"
#include "drope/core/error.h"
#include "drope/core/files.h"
#include "drope/eval/generate.h"
#include "drope/io/model_io.h"

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
  att->add_option("--cases", opt.cases, "Cases among causal, alibi, window, gqa")->delimiter(',')->capture_default_str();
  att->add_option("--impls", opt.impls, "Implementations among ours, sdpa, sdpa_mask, reference")
      ->delimiter(',')
      ->capture_default_str();
  att->add_flag("--forward-only", fwd_only, "Skip forward+backward");
  att->add_option("--json", json_path, "Also write all numbers as JSON to this file (atomic)");
  att->add_flag("--quiet", quiet, "No progress lines on stderr");

  // `generate`: prefill and decode throughput of greedy generation with the KV cache, for one context
  // length per process (peak RSS is per process). scripts/bench_generate.py runs it beside HF generate.
  struct GenOpts {
    std::string model, json;
    int64_t context = 2048, new_tokens = 64, chunk = 2048;
    int threads = 0;
    uint64_t seed = 0;
    int repeats = 3;
  } g;
  auto* gen = cli.add_subcommand("generate", "Prefill and decode tokens/s of greedy generation (KV cache)");
  gen->add_option("--model", g.model, "Model directory")->required();
  gen->add_option("--context", g.context, "Prompt tokens")->capture_default_str();
  gen->add_option("--new-tokens", g.new_tokens, "Tokens generated per run (the first ends the prefill)")->capture_default_str();
  gen->add_option("--prefill-chunk", g.chunk, "Prompt tokens per prefill forward")->capture_default_str();
  gen->add_option("--threads", g.threads, "Intra-op threads (0 = LibTorch default)");
  gen->add_option("--seed", g.seed, "Seed of the random prompt");
  gen->add_option("--repeats", g.repeats, "Timed runs; the fastest is reported")->capture_default_str();
  gen->add_option("--json", g.json, "Write the numbers as JSON here (atomic)");
  CLI11_PARSE(cli, argc, argv);

  if (gen->parsed())
    return drope::app::run([&] {
      if (g.context < 1 || g.new_tokens < 1 || g.repeats < 1)
        drope::fail("--context, --new-tokens and --repeats must be >= 1");
      if (g.threads > 0) at::set_num_threads(g.threads);
      auto model = drope::io::load_model(g.model);
      model->eval();
      std::mt19937_64 rng(g.seed);
      std::vector<int32_t> prompt(size_t(g.context));
      for (auto& t : prompt) t = int32_t(rng() % uint64_t(model->config().vocab_size));
      drope::eval::GenerateOptions o;
      o.prefill_chunk = g.chunk;
      o.stop_at_eos = false;
      // Best of `repeats` runs after a warm-up: prefill (prompt → first token) and decode (the one-token
      // steps after it) timed inside generate_tokens.
      o.max_new_tokens = g.new_tokens;
      double prefill = 1e300, decode = 1e300;
      std::vector<int32_t> all;
      for (int r = 0; r <= g.repeats; ++r) {
        drope::eval::GenerateStats st;
        o.stats = &st;
        all = drope::eval::generate_tokens(model, {prompt}, o, -1)[0].tokens;
        if (r == 0) continue;  // warm-up
        prefill = std::min(prefill, st.prefill_seconds);
        decode = std::min(decode, st.decode_seconds / double(std::max<int64_t>(1, st.decode_steps)));
      }
      // VmHWM, not ru_maxrss: Linux carries ru_maxrss across execve, so a child of a big parent (the
      // Python benchmark driver) would report the parent's peak.
      double hwm_kb = -1;
      {
        std::ifstream st("/proc/self/status");
        std::string k;
        while (st >> k)
          if (k == "VmHWM:") {
            st >> hwm_kb;
            break;
          }
      }
      nlohmann::json j = {{"impl", "drope"},
                          {"context", g.context},
                          {"new_tokens", g.new_tokens},
                          {"threads", at::get_num_threads()},
                          {"prefill_s", prefill},
                          {"prefill_tok_s", double(g.context) / prefill},
                          {"decode_s_per_token", decode},
                          {"decode_tok_s", 1.0 / decode},
                          {"peak_rss_mb", hwm_kb / 1024.0},
                          {"tokens", all}};
      fmt::print("{}\n", j.dump());
      if (!g.json.empty()) drope::write_file_atomic(g.json, j.dump(2) + "\n");
      return 0;
    });

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
