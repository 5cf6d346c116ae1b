// drope-bench: benchmarks (not tests). `drope-bench attention`: our fused attention op against LibTorch's
// scaled_dot_product_attention (plain and with a dense additive mask) and the plain-ATen reference.
// `drope-bench layers`: the fused RMSNorm / rotary / SwiGLU kernels and the stacked q/k/v GEMM against the
// same math in separate ATen ops (what an eager PyTorch model runs). `drope-bench generate`: KV-cache generation throughput.
#include <sys/resource.h>

#include <chrono>
#include <fstream>
#include <cstdio>
#include <algorithm>
#include <array>
#include <functional>
#include <optional>
#include <random>

#include <CLI/CLI.hpp>
#include <torch/cuda.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "app_common.h"
#include "cli_numbers.h"
#include "log_flags.h"
#include "drope/bench/attention_bench.h"
#include "drope/core/error.h"
#include "drope/core/files.h"
#include "drope/core/log.h"
#include "drope/eval/generate.h"
#include "drope/io/model_io.h"
#include "drope/ops/layers.h"

int main(int argc, char** argv) {
  CLI::App cli{"drope-bench: benchmarks of the drope ops"};
  cli.require_subcommand(1);

  drope::bench::AttentionBenchOptions opt;
  std::string dtype = "float32", json_path;
  bool fwd_only = false;
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
  auto* impls_opt = att->add_option("--impls", opt.impls,
                                    "Implementations among ours, sdpa, sdpa_mask, reference; with --device cuda also "
                                    "the attention plan's backends forced one at a time: flash, mem_efficient, cudnn, "
                                    "own_cuda (default on CUDA: all eight)")
                        ->delimiter(',')
                        ->capture_default_str();
  att->add_flag("--forward-only", fwd_only, "Skip forward+backward");
  att->add_option("--json", json_path, "Also write all numbers as JSON to this file (atomic)");

  // `generate`: prefill and decode throughput of greedy generation with the KV cache, for one context
  // length per process (peak RSS is per process). scripts/bench_generate.py runs it beside HF generate.
  struct GenOpts {
    std::string model, json, device = "cpu";
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
  gen->add_option("--device", g.device, "cpu or cuda (scripts/gpu-check.sh compares the tokens of both)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();

  // `layers`: forward and forward+backward time of each fused layer kernel vs the plain-ATen composite.
  struct LayerOpts {
    int64_t batch = 8, seq = 512, hidden = 256, heads = 8, kv_heads = 2, head_dim = 32, ffn = 768;
    int repeats = 20, threads = 0;
    std::string dtype = "float32", json;
  } lo;
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

  if (lay->parsed())
    return drope::app::run([&] {
      if (lo.batch < 1 || lo.seq < 1 || lo.hidden < 1 || lo.heads < 1 || lo.kv_heads < 1 || lo.ffn < 1 ||
          lo.head_dim < 2 || lo.head_dim % 2 || lo.repeats < 1)
        drope::fail("drope-bench layers: sizes and --repeats must be >= 1, --head-dim even");
      if (lo.threads > 0) at::set_num_threads(lo.threads);
      const auto opt = torch::TensorOptions().dtype(lo.dtype == "float64" ? torch::kDouble : torch::kFloat);
      torch::manual_seed(0);
      const int64_t B = lo.batch, T = lo.seq;
      auto angle = torch::rand({T, lo.head_dim / 2}, opt) * 6;
      auto cos = torch::cat({angle.cos(), angle.cos()}, -1), sin = torch::cat({angle.sin(), angle.sin()}, -1);
      auto rms_w = torch::randn({lo.hidden}, opt);
      struct Case {
        std::string name;
        std::vector<torch::Tensor> inputs;
        std::function<torch::Tensor(const std::vector<torch::Tensor>&)> op;
      };
      std::vector<Case> cases = {
          {"rms_norm", {torch::randn({B, T, lo.hidden}, opt), rms_w},
           [](const std::vector<torch::Tensor>& t) { return drope::ops::rms_norm(t[0], t[1], 1e-5); }},
          // q as the model passes it: a (B, T, H, D) projection viewed as (B, H, T, D).
          {"rotary", {torch::randn({B, T, lo.heads, lo.head_dim}, opt).transpose(1, 2)},
           [&](const std::vector<torch::Tensor>& t) { return drope::ops::rotary(t[0], cos, sin); }},
          // The MLP's hidden activation silu(x·gateᵀ)·(x·upᵀ): ATen runs two GEMMs, silu and a product.
          {"swiglu", {torch::randn({B, T, lo.hidden}, opt), torch::randn({lo.ffn, lo.hidden}, opt) * 0.05,
                      torch::randn({lo.ffn, lo.hidden}, opt) * 0.05},
           [](const std::vector<torch::Tensor>& t) { return drope::ops::swiglu(t[0], t[1], {}, t[2], {}); }},
          // The attention's q, k and v projections (summed, so that one tensor comes out): three GEMMs in ATen.
          {"qkv_proj", {torch::randn({B, T, lo.hidden}, opt), torch::randn({lo.heads * lo.head_dim, lo.hidden}, opt) * 0.05,
                        torch::randn({lo.kv_heads * lo.head_dim, lo.hidden}, opt) * 0.05,
                        torch::randn({lo.kv_heads * lo.head_dim, lo.hidden}, opt) * 0.05},
           [](const std::vector<torch::Tensor>& t) {
             auto p = drope::ops::linear_split(t[0], {t[1], t[2], t[3]});
             return p[0].sum(-1) + p[1].sum(-1) + p[2].sum(-1);
           }},
      };
      // Median times of the fused and the ATen path, timed alternately (fused, ATen, fused, …) so that a
      // machine whose speed drifts during the run slows both alike.
      auto median_ms = [&](const std::function<void(bool composite)>& f) {
        f(false), f(true);  // warm-up
        std::vector<double> ms[2];
        for (int r = 0; r < lo.repeats; ++r)
          for (int composite = 0; composite < 2; ++composite) {
            std::optional<drope::ops::ForceCompositeLayers> force;
            if (composite) force.emplace();
            auto t0 = std::chrono::steady_clock::now();
            f(composite);
            ms[composite].push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
          }
        std::array<double, 2> med;
        for (int i = 0; i < 2; ++i) {
          std::nth_element(ms[i].begin(), ms[i].begin() + ms[i].size() / 2, ms[i].end());
          med[i] = ms[i][ms[i].size() / 2];
        }
        return med;
      };
      nlohmann::json out = nlohmann::json::array();
      fmt::print("batch {} x seq {}, hidden {}, heads {} ({} kv) x {}, ffn {}, {}, {} threads; median of {} alternating runs (ms)\n",
                 B, T, lo.hidden, lo.heads, lo.kv_heads, lo.head_dim, lo.ffn, lo.dtype, at::get_num_threads(), lo.repeats);
      fmt::print("| op | fused fwd | ATen fwd | speed-up | fused fwd+bwd | ATen fwd+bwd | speed-up |\n"
                 "|---|---:|---:|---:|---:|---:|---:|\n");
      for (auto& c : cases) {
        double t[2][2];  // [fused/aten][fwd/fwdbwd]
        const auto fwd = median_ms([&](bool) {
          torch::NoGradGuard ng;
          c.op(c.inputs);
        });
        std::vector<torch::Tensor> leaves;
        for (auto& x : c.inputs) leaves.push_back(x.detach().requires_grad_(true));
        auto g = torch::randn_like(c.op(leaves).detach());
        const auto both = median_ms([&](bool) {
          auto y = c.op(leaves);
          torch::autograd::grad({y}, leaves, {g});
        });
        for (int i = 0; i < 2; ++i) t[i][0] = fwd[i], t[i][1] = both[i];
        fmt::print("| {} | {:.3f} | {:.3f} | {:.2f}x | {:.3f} | {:.3f} | {:.2f}x |\n", c.name, t[0][0], t[1][0],
                   t[1][0] / t[0][0], t[0][1], t[1][1], t[1][1] / t[0][1]);
        out.push_back({{"op", c.name}, {"fused_fwd_ms", t[0][0]}, {"aten_fwd_ms", t[1][0]},
                       {"fused_fwd_bwd_ms", t[0][1]}, {"aten_fwd_bwd_ms", t[1][1]}});
      }
      if (!lo.json.empty()) drope::write_file_atomic(lo.json, out.dump(2) + "\n");
      return 0;
    });

  if (gen->parsed())
    return drope::app::run([&] {
      if (g.context < 1 || g.new_tokens < 1 || g.repeats < 1)
        drope::fail("--context, --new-tokens and --repeats must be >= 1");
      if (g.threads > 0) at::set_num_threads(g.threads);
      if (g.device == "cuda" && !torch::cuda::is_available())
        drope::fail("drope-bench generate: --device cuda, but no CUDA device is available on this machine");
      auto model = drope::io::load_model(g.model);
      model->to(torch::Device(g.device));
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
                          {"device", g.device},
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
    if (impls_opt->count() == 0) opt.impls = drope::bench::default_attention_impls(opt.device);
    opt.log = [](const std::string& line) { drope::logging::info("{}", line); };
    const auto res = drope::bench::run_attention_bench(opt);
    fmt::print("{}", drope::bench::format_attention_table(res));
    if (!json_path.empty()) {
      drope::bench::write_attention_bench_json(res, json_path);
      drope::logging::info("wrote {}", json_path);
    }
    return 0;
  });
}
