// The attention benchmark's library code on a tiny configuration: structure only, no timing thresholds.
#include <torch/cuda.h>
#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "drope/bench/attention_bench.h"
#include "drope/core/files.h"
#include "drope/ops/attention_plan.h"
#include "drope/ops/attention_registry.h"
#include "test_util.h"

namespace {

drope::bench::AttentionBenchOptions tiny() {
  drope::bench::AttentionBenchOptions o;
  o.lengths = {64, 128};
  o.heads = 4;
  o.gqa_kv_heads = 2;
  o.head_dim = 16;
  o.window = 32;
  o.repeats = 1;
  o.warmup = 0;
  return o;
}

}  // namespace

TEST(AttentionBench, TinyRunHasEveryCaseAndImpl) {
  const auto opt = tiny();
  const auto r = drope::bench::run_attention_bench(opt);
  EXPECT_FALSE(r.device.empty());
  EXPECT_FALSE(r.torch_version.empty());
  EXPECT_GT(r.threads, 0);
  ASSERT_EQ(r.rows.size(), opt.cases.size() * opt.lengths.size() * opt.impls.size());
  std::set<std::string> seen;
  for (const auto& row : r.rows) {
    seen.insert(row.case_name + "/" + std::to_string(row.T) + "/" + row.impl);
    const bool na = row.impl == "sdpa" && (row.case_name == "alibi" || row.case_name == "window");
    if (na) {
      EXPECT_EQ(row.fwd.status, "n/a");
      continue;
    }
    for (const auto* m : {&row.fwd, &row.fwdbwd}) {
      EXPECT_EQ(m->status, "ok") << row.case_name << " " << row.impl << " T=" << row.T;
      EXPECT_GT(m->median_ms, 0);
      EXPECT_GT(m->tflops, 0);
      EXPECT_EQ(m->runs, 1);
    }
    EXPECT_GT(row.fwdbwd.flops, row.fwd.flops);
    EXPECT_GT(row.analytic_bytes, 0);
    // Every implementation computes the same attention as ours.
    ASSERT_GE(row.max_abs_diff, 0) << row.case_name << " " << row.impl;
    EXPECT_LT(row.max_abs_diff, 1e-4) << row.case_name << " " << row.impl << " T=" << row.T;
  }
  for (const auto& c : opt.cases)
    for (auto T : opt.lengths)
      for (const auto& i : opt.impls) EXPECT_TRUE(seen.count(c + "/" + std::to_string(T) + "/" + i)) << c << T << i;

  const auto table = drope::bench::format_attention_table(r);
  for (const char* needle : {"causal", "alibi", "window", "gqa", "ours", "sdpa_mask", "reference", "TFLOP/s"})
    EXPECT_NE(table.find(needle), std::string::npos) << needle;

  const auto dir = drope::test::tmp_dir("bench");
  const auto path = dir + "/bench.json";
  drope::bench::write_attention_bench_json(r, path);
  const auto j = nlohmann::json::parse(drope::read_file(path));
  EXPECT_EQ(j.at("benchmark"), "attention");
  EXPECT_TRUE(j.at("device").is_string());
  EXPECT_TRUE(j.at("torch_version").is_string());
  EXPECT_GT(j.at("threads").get<int>(), 0);
  ASSERT_EQ(j.at("rows").size(), r.rows.size());
  for (const auto& row : j.at("rows")) {
    ASSERT_TRUE(row.contains("fwd") && row.contains("fwdbwd"));
    if (row.at("fwd").at("status") == "ok") EXPECT_GT(row.at("fwd").at("median_ms").get<double>(), 0);
  }
}

TEST(AttentionBench, SkipsOverMemoryBudgetAndRejectsBadOptions) {
  auto opt = tiny();
  opt.lengths = {128};
  opt.cases = {"alibi"};
  opt.impls = {"ours", "reference"};
  opt.max_mem_gb = 1e-6;  // ~1 KiB: not even our O(T·D) output fits
  const auto r = drope::bench::run_attention_bench(opt);
  ASSERT_EQ(r.rows.size(), 2u);
  for (const auto& row : r.rows) EXPECT_EQ(row.fwd.status, "skipped (memory)") << row.impl;

  auto bad = tiny();
  bad.cases = {"nope"};
  drope::test::expect_error([&] { drope::bench::run_attention_bench(bad); }, {"unknown case", "nope"});
  bad = tiny();
  bad.heads = 3;
  drope::test::expect_error([&] { drope::bench::run_attention_bench(bad); }, {"multiple"});
  bad = tiny();
  bad.device = "tpu";
  drope::test::expect_error([&] { drope::bench::run_attention_bench(bad); }, {"--device must be cpu or cuda", "tpu"});
  if (!torch::cuda::is_available()) {
    bad.device = "cuda";
    drope::test::expect_error([&] { drope::bench::run_attention_bench(bad); }, {"no CUDA device"});
  }
}

TEST(AttentionBench, BackendImplsNeedCuda) {
  // The forced backends are exactly the registry's CUDA backends but the baselines' own (sdpa, reference), by the
  // registry's names and in its order; those registered so far in this order.
  const auto& backends = drope::bench::attention_backend_impls();
  std::vector<std::string> registered;
  for (const auto* d : drope::ops::attn_backends())
    if ((d->devices & drope::ops::kAttnCuda) && std::string(d->name) != "sdpa" && std::string(d->name) != "reference")
      registered.emplace_back(d->name);
  ASSERT_EQ(backends, registered);
  const std::vector<std::string> known{"flash", "mem_efficient", "cudnn", "cudnn_graph", "own_cuda"};
  std::vector<std::string> seen;
  for (const auto& b : backends)
    if (std::find(known.begin(), known.end(), b) != known.end()) seen.push_back(b);
  EXPECT_EQ(seen, known);
  for (const auto& b : backends) {
    drope::ops::AttnBackend parsed;
    ASSERT_TRUE(drope::ops::parse_attn_backend(b.c_str(), &parsed)) << b;
    EXPECT_EQ(std::string(drope::ops::attn_backend_name(parsed)), b);
  }
  // CPU defaults unchanged; CUDA adds every backend between ours and the baselines.
  EXPECT_EQ(drope::bench::default_attention_impls("cpu"),
            (std::vector<std::string>{"ours", "sdpa", "sdpa_mask", "reference"}));
  std::vector<std::string> cuda{"ours"};
  cuda.insert(cuda.end(), backends.begin(), backends.end());
  cuda.insert(cuda.end(), {"sdpa", "sdpa_mask", "reference"});
  EXPECT_EQ(drope::bench::default_attention_impls("cuda"), cuda);
  // A backend named on the CPU is a clear error before anything runs.
  for (const auto& b : backends) {
    auto bad = tiny();
    bad.impls = {"ours", b};
    drope::test::expect_error([&] { drope::bench::run_attention_bench(bad); }, {"--impls " + b, "--device cuda"});
  }
  auto bad = tiny();
  bad.impls = {"sdpa_flash"};
  drope::test::expect_error(
      [&] { drope::bench::run_attention_bench(bad); },
      {"unknown implementation 'sdpa_flash'", "flash, mem_efficient, cudnn, cudnn_graph, own_cuda"});
}

TEST(AttentionBench, InterleavedRoundsGiveMediansAndPerRoundRatios) {
  auto opt = tiny();
  opt.lengths = {64};
  opt.cases = {"causal"};
  opt.impls = {"ours", "sdpa"};
  opt.rounds = 3;
  opt.repeats = 2;
  const auto r = drope::bench::run_attention_bench(opt);
  ASSERT_EQ(r.rows.size(), 2u);
  for (const auto& row : r.rows)
    for (const auto* m : {&row.fwd, &row.fwdbwd}) {
      ASSERT_TRUE(m->ok()) << row.impl << " " << m->status;
      ASSERT_EQ(m->round_ms.size(), 3u) << row.impl;
      ASSERT_EQ(m->ratio_ours.size(), 3u) << row.impl;
      EXPECT_EQ(m->runs, 6);
      // The median of the rounds' medians; every run's extremes around it.
      std::vector<double> v = m->round_ms;
      std::sort(v.begin(), v.end());
      EXPECT_DOUBLE_EQ(m->median_ms, v[1]);
      EXPECT_LE(m->min_ms, v[0]);
      EXPECT_GE(m->max_ms, v[2]);
      if (row.impl == "ours")
        for (double x : m->ratio_ours) EXPECT_DOUBLE_EQ(x, 1.0);
    }
  const auto table = drope::bench::format_attention_table(r);
  EXPECT_NE(table.find("per-round time / ours (median [range] over 3 interleaved rounds)"), std::string::npos) << table;
  EXPECT_NE(table.find("causal T=64 sdpa:"), std::string::npos) << table;
  const auto j = nlohmann::json::parse(drope::bench::attention_bench_json(r));
  EXPECT_EQ(j.at("options").at("rounds").get<int>(), 3);
  EXPECT_EQ(j.at("rows").at(1).at("fwd").at("round_ratio_vs_ours").size(), 3u);
}
