// RunMetrics: the arithmetic of the step lines (throughput, MFU, ETA) against hand-computed values, their
// console format, and which lines reach log.jsonl (and which survive a resume).
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "drope/core/files.h"
#include "drope/train/metrics.h"
#include "test_util.h"

using namespace drope;
using namespace drope::train;
namespace fs = std::filesystem;

namespace {

std::vector<nlohmann::json> log_lines(const std::string& dir) {
  std::vector<nlohmann::json> out;
  std::istringstream in(read_file((fs::path(dir) / "log.jsonl").string()));
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

MetricsOptions options(const std::string& dir) {
  MetricsOptions o;
  o.out_dir = dir;
  o.steps = 10;
  o.log_every = 4;
  o.peak_tflops = 100;
  o.main_rank = true;
  return o;
}

}  // namespace

TEST(RunMetrics, ThroughputMfuAndEta) {
  EXPECT_DOUBLE_EQ(RunMetrics::tokens_per_s(1000, 0.5), 2000.0);
  EXPECT_DOUBLE_EQ(RunMetrics::tokens_per_s(1000, 0.0), 0.0);  // no time measured yet
  // 6 GFLOP a token at 10k tokens/s is 60 TFLOP/s: 60 % of a 100 TFLOP/s peak.
  EXPECT_DOUBLE_EQ(RunMetrics::mfu(6e9, 1e4, 100), 0.6);
  EXPECT_DOUBLE_EQ(RunMetrics::mfu(6e9, 1e4, 0), -1.0);  // no peak: no MFU
  // 3 steps in 30 s, 7 to go: 70 s.
  EXPECT_DOUBLE_EQ(RunMetrics::eta_s(30, 3, 7), 70.0);
  EXPECT_DOUBLE_EQ(RunMetrics::eta_s(30, 3, 0), 0.0);
}

TEST(RunMetrics, ConsoleLinesAsPrinted) {
  EXPECT_EQ(RunMetrics::step_line(10, 100, {2.5, 3e-4, 1.25}, 12345, 0.45, 70),
            "step     10/100 | loss 2.5000 | lr 3.00e-04 | grad-norm 1.250 | 12.3k tok/s | MFU 45.0% | ETA 1m10s");
  EXPECT_EQ(RunMetrics::step_line(1, 5, {10, 1e-3, 0.5}, 0, -1, 3725),
            "step      1/5 | loss 10.0000 | lr 1.00e-03 | grad-norm 0.500 | 0.0k tok/s | MFU - | ETA 1h02m");
  EXPECT_EQ(RunMetrics::progress_bar(15, 30), "[###############...............] step 15/30");
  EXPECT_EQ(RunMetrics::progress_bar(1, 30), "[#.............................] step 1/30");
  EXPECT_EQ(RunMetrics::progress_bar(30, 30), "[##############################] step 30/30");
}

TEST(RunMetrics, LogLinesEveryLogEveryStepsFirstAndLast) {
  const auto dir = test::tmp_dir("metrics_lines");
  RunMetrics m;
  m.open(options(dir), 0, false);
  m.set_flops_per_token(6e9);
  m.start(0);
  int64_t tokens = 0;
  for (int64_t s = 1; s <= 10; ++s) {
    tokens += 512;
    m.add_tokens(512);
    m.step(s, tokens, {1.0 / double(s), 1e-3, 0.5}, /*finite=*/s != 8,
           [](nlohmann::json& j) { j["engine"] = "replicated"; });
    if (s == 4) m.validation(s, 2.0);
  }
  const auto lines = log_lines(dir);
  std::vector<int64_t> steps;
  for (const auto& j : lines) steps.push_back(j.at("step").get<int64_t>());
  // steps 1, 4 (and its validation) and 10; step 8 was not finite: no line
  EXPECT_EQ(steps, (std::vector<int64_t>{1, 4, 4, 10}));
  const auto& last = lines.back();
  EXPECT_EQ(last.at("tokens").get<int64_t>(), 5120);
  EXPECT_DOUBLE_EQ(last.at("loss").get<double>(), 0.1);
  EXPECT_EQ(last.at("engine"), "replicated");
  // MFU is the line's own throughput against the peak
  EXPECT_DOUBLE_EQ(last.at("mfu").get<double>(), 6e9 * last.at("tokens_per_s").get<double>() / 100e12);
  EXPECT_DOUBLE_EQ(lines[2].at("val_loss").get<double>(), 2.0);
  EXPECT_NEAR(lines[2].at("val_ppl").get<double>(), 7.38905609893065, 1e-12);
}

TEST(RunMetrics, ResumeCutsTheLogAfterTheCheckpointAndOtherRanksWriteNothing) {
  const auto dir = test::tmp_dir("metrics_resume");
  {
    RunMetrics m;
    m.open(options(dir), 0, false);
    m.start(0);
    for (int64_t s = 1; s <= 9; ++s) m.step(s, s * 100, {1, 1, 1}, true, {});
  }
  {
    RunMetrics m;  // resumed from step 5: the lines of steps 6-9 go
    m.open(options(dir), 5, true);
    m.start(5);
    m.line({{"step", 6}, {"note", "after resume"}});
  }
  std::vector<int64_t> steps;
  for (const auto& j : log_lines(dir)) steps.push_back(j.at("step").get<int64_t>());
  EXPECT_EQ(steps, (std::vector<int64_t>{1, 4, 6}));
  auto o = options(dir);
  o.main_rank = false;
  RunMetrics other;
  other.open(o, 6, true);
  other.line({{"step", 7}});
  EXPECT_EQ(log_lines(dir).size(), 3u);
}

TEST(GemmRoof, MfuDividesByTheRoofOfTheTrainingDtype) {
  GemmRoof roof;
  roof.cpu = "Test CPU";
  roof.levels = "drope kernels avx512, ATen AVX512";
  roof.threads = 2;
  roof.gflops = {{"float32", 250}, {"bfloat16", 1000}};
  const auto peak = [&](double override_tflops, const std::string& dtype, int threads = 2,
                        const std::string& levels = "drope kernels avx512, ATen AVX512") {
    return mfu_peak_tflops(override_tflops, dtype, roof, "Test CPU", levels, threads);
  };
  EXPECT_DOUBLE_EQ(peak(0, "float32"), 0.25);
  EXPECT_DOUBLE_EQ(peak(0, "bfloat16"), 1.0);
  EXPECT_DOUBLE_EQ(peak(3.5, "bfloat16"), 3.5);  // train.peak_tflops overrides
  EXPECT_DOUBLE_EQ(peak(0, "bfloat16", 1), 0.0);  // measured at another thread count: no MFU
  EXPECT_DOUBLE_EQ(peak(0, "float32", 2, "drope kernels avx2 (native avx512), ATen AVX2"), 0.0);  // other ISA caps
  EXPECT_DOUBLE_EQ(mfu_peak_tflops(0, "float32", std::nullopt, "Test CPU", roof.levels, 2), 0.0);
  EXPECT_DOUBLE_EQ(mfu_peak_tflops(0, "float32", roof, "Other CPU", roof.levels, 2), 0.0);
  // The same tokens/s against each dtype's roof: bf16's MFU is float32's over the roofs' ratio.
  const double fpt = 3e8, tps = 800;
  EXPECT_DOUBLE_EQ(RunMetrics::mfu(fpt, tps, peak(0, "float32")), 3e8 * 800 / 250e9);
  EXPECT_DOUBLE_EQ(RunMetrics::mfu(fpt, tps, peak(0, "bfloat16")), 3e8 * 800 / 1000e9);
  std::string why;
  mfu_peak_tflops(0, "bfloat16", roof, "Test CPU", roof.levels, 2, &why);
  EXPECT_NE(why.find("bfloat16 GEMM roof, 1000 GFLOP/s"), std::string::npos) << why;
}

TEST(GemmRoof, FileRoundTripAndRefusal) {
  const auto dir = fs::path(DROPE_TEST_TMP) / "gemm-roof";
  fs::remove_all(dir);
  GemmRoof roof;
  roof.cpu = "Test CPU";
  roof.levels = "drope kernels avx512, ATen AVX512";
  roof.threads = 2;
  roof.gflops = {{"float32", 250.5}, {"bfloat16", 1001}};
  const auto path = (dir / "sub" / "peak.json").string();
  EXPECT_FALSE(read_roof(path).has_value());
  write_roof(path, roof);
  const auto back = read_roof(path);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->cpu, roof.cpu);
  EXPECT_EQ(back->levels, roof.levels);
  EXPECT_EQ(back->threads, 2);
  EXPECT_DOUBLE_EQ(back->gflops.at("float32"), 250.5);
  EXPECT_DOUBLE_EQ(back->gflops.at("bfloat16"), 1001);
  write_file_atomic(path, "{\"cpu\": 1}");
  try {
    read_roof(path);
    FAIL() << "a malformed roof file was read";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("not a GEMM roof file"), std::string::npos) << e.what();
  }
}
