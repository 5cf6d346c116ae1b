// `drope-bench attention`: our fused attention op against LibTorch's scaled_dot_product_attention (plain,
// and with a dense additive mask) and the plain-ATen reference, side by side in one process on one device.
// On CUDA also each backend of the attention plan (docs/gpu.md) forced through ops::ForceAttentionBackend:
// flash, mem_efficient, cudnn, own_cuda.
// Library code so that a test can run a tiny configuration; the CLI in apps/bench/ is thin.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <ATen/ATen.h>

namespace drope::bench {

struct AttentionBenchOptions {
  std::vector<int64_t> lengths{1024, 2048, 4096, 8192, 16384};
  int64_t batch = 1;
  int64_t heads = 8;
  int64_t gqa_kv_heads = 2;  // the GQA case uses heads / gqa_kv_heads query heads per kv head
  int64_t head_dim = 64;
  int64_t window = 512;      // the sliding-window case
  at::ScalarType dtype = at::kFloat;
  std::string device = "cpu";  // cpu | cuda (memory column: peak CUDA allocator bytes instead of RSS)
  int repeats = 5;           // timed runs per measurement; the median is reported
  // Interleaved rounds: every implementation of a (case, T) measured once per round, in turn (ours, sdpa, ...,
  // ours, sdpa, ...); times are medians over rounds, ratios to ours are taken per round.
  int rounds = 1;
  double busy_spread = 1.25;  // a round whose slowest timed run took more than this × its fastest is flagged busy
  int warmup = 1;            // untimed runs first
  double max_seconds = 120;  // budget per measurement (warmup + repeats), predicted from the previous length
  double max_mem_gb = 4;     // skip a measurement whose estimated extra memory exceeds this
  std::vector<std::string> cases{"causal", "alibi", "window", "gqa"};
  // ours, sdpa, sdpa_mask, reference; on CUDA also the plan's backends (attention_backend_impls()).
  std::vector<std::string> impls{"ours", "sdpa", "sdpa_mask", "reference"};
  bool forward = true;   // measure the forward pass
  bool backward = true;  // measure forward + backward of sum(out * g) w.r.t. q, k, v
  std::function<void(const std::string&)> log;  // progress lines (may be empty)
};

// One timed measurement (a forward, or a forward + backward).
struct Measurement {
  std::string status = "not run";  // "ok", "skipped (budget)", "skipped (memory)", "n/a", "n/a: why", "error: ..."
  std::string backend;             // CUDA: the plan backend that ran (ours: the plan's default choice)
  double median_ms = 0, min_ms = 0, max_ms = 0;  // over every timed run (median: of the rounds' medians)
  std::vector<double> round_ms;   // each round's median (rounds > 1)
  std::vector<double> ratio_ours; // each round's time over ours's in the same round (rounds > 1)
  int runs = 0;                 // timed runs done
  double tflops = 0;            // effective TFLOP/s from the analytic FLOP count (see flops)
  double flops = 0;             // forward 4·B·H·T·S_eff·D (S_eff = T/2 causal, min(W, T) window); ×3.5 fwd+bwd
  double est_bytes = 0;         // estimated peak extra memory used for the skip decision
  double peak_rss_mb = -1;      // measured: peak resident set (sampled every ~1 ms) minus RSS at start
  double maxrss_growth_mb = -1; // measured: getrusage ru_maxrss growth across the measurement (0 below old peak)
  bool ok() const { return status == "ok"; }
};

struct BenchRow {
  std::string case_name, impl;
  int64_t T = 0;
  int64_t kv_heads = 0;
  double analytic_bytes =
      0;   // analytic extra memory: out + lse (ours, sdpa), + mask (sdpa_mask), T·S·H logits (reference)
  std::string analytic_note;   // e.g. "O(T·D)" / "O(T·S·H)"
  double max_abs_diff = -1;    // forward output vs ours at the same case and T (−1: not compared)
  Measurement fwd, fwdbwd;
};

struct AttentionBenchResult {
  AttentionBenchOptions options;
  std::string device, torch_version;
  int threads = 0;
  std::vector<BenchRow> rows;
  std::vector<std::string> notes;
  std::vector<std::string> busy;  // "causal T=1024 round 2 (ours fwd+bwd spread 1.40)": rounds flagged busy
};

// The forced-backend implementations (CUDA only): "flash", "mem_efficient", "cudnn", "own_cuda"
// (ops::attn_backend_name of each).
const std::vector<std::string>& attention_backend_impls();

// The implementations `drope-bench attention` runs when --impls is not given: the four above on CPU; on CUDA
// ours, every backend, sdpa, sdpa_mask and reference.
std::vector<std::string> default_attention_impls(const std::string& device);

// Runs every (case, T, impl) of `opt` and returns all numbers. Throws drope::Error on bad options.
AttentionBenchResult run_attention_bench(const AttentionBenchOptions& opt);

// The readable aligned table.
std::string format_attention_table(const AttentionBenchResult& r);

// All numbers as JSON (device, torch version, threads, options, rows).
std::string attention_bench_json(const AttentionBenchResult& r);

// Writes attention_bench_json atomically to `path`.
void write_attention_bench_json(const AttentionBenchResult& r, const std::string& path);

}  // namespace drope::bench
