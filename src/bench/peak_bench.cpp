// drope-bench peak (bench/runners.h): the machine's GEMM roof per dtype, LibTorch's `mm` at the training's thread
// count on square and training-shaped products, every (dtype, shape) once per round so that a machine whose speed
// drifts slows all alike; medians over rounds. The roof of a dtype is its fastest shape's median.
#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include <ATen/Parallel.h>
#include <fmt/format.h>
#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include "drope/bench/runners.h"
#include "drope/core/error.h"
#include "drope/core/files.h"
#include "drope/kernels/cpu_isa.h"
#include "drope/train/metrics.h"

namespace drope::bench {

namespace {

struct Shape {
  const char* what;
  int64_t m, n, k;  // C (m, n) = A (m, k) · B (n, k)ᵀ, as the linear layers call it
};

// Square products and the GEMMs of a small-50m step (4 × 512 tokens, hidden 512, MLP 1536, 8 / 2 heads × 64).
const std::vector<Shape> kShapes{{"square 1024", 1024, 1024, 1024},       {"square 2048", 2048, 2048, 2048},
                                 {"q/k/v (2048 tokens)", 2048, 768, 512}, {"gate/up (2048 tokens)", 2048, 3072, 512},
                                 {"down (2048 tokens)", 2048, 512, 1536}, {"down weight grad", 512, 1536, 2048}};

at::ScalarType dtype_of(const std::string& name) {
  if (name == "float32") return at::kFloat;
  if (name == "bfloat16") return at::kBFloat16;
  fail("drope-bench peak: --dtypes takes float32 and bfloat16, got '{}'", name);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// One timed measurement: `reps` products back to back (about 1 GFLOP of work in all), GFLOP/s.
struct Gemm {
  at::Tensor a, b, c;
  int64_t reps = 1;
  double flops = 0;
  double run() {
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < reps; ++i) at::mm_out(c, a, b.t());
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return flops * double(reps) / s / 1e9;
  }
};

}  // namespace

void run_peak(const PeakRun& r) {
  if (r.rounds < 1) fail("drope-bench peak: --rounds must be >= 1");
  if (r.dtypes.empty()) fail("drope-bench peak: --dtypes is empty");
  if (r.threads > 0) at::set_num_threads(r.threads);
  torch::NoGradGuard ng;
  struct Cell {
    std::string dtype;
    Shape shape;
    Gemm g;
    std::vector<double> gflops;
  };
  std::vector<Cell> cells;
  for (const auto& dn : r.dtypes) {
    const auto dt = dtype_of(dn);
    for (const auto& s : kShapes) {
      Cell c{dn, s, {}, {}};
      c.g.a = torch::randn({s.m, s.k}).to(dt);
      c.g.b = torch::randn({s.n, s.k}).to(dt);
      c.g.c = torch::empty({s.m, s.n}, c.g.a.options());
      c.g.flops = 2.0 * double(s.m) * double(s.n) * double(s.k);
      c.g.reps = std::max<int64_t>(1, int64_t(1e9 / c.g.flops));
      c.g.run();  // warm-up: kernels generated, memory touched
      cells.push_back(std::move(c));
    }
  }
  for (int round = 0; round < r.rounds; ++round)
    for (auto& c : cells) c.gflops.push_back(c.g.run());

  train::GemmRoof roof;
  roof.cpu = train::cpu_model_name();
  roof.levels = kernels::describe_cpu_levels();
  roof.threads = at::get_num_threads();
  nlohmann::json shapes = nlohmann::json::array();
  fmt::print("GEMM roof: LibTorch mm, {} threads, {}; median of {} interleaved rounds (GFLOP/s)\n", roof.threads,
             roof.levels, r.rounds);
  fmt::print("| dtype | GEMM | M × N × K | median | range |\n|---|---|---|---:|---:|\n");
  for (const auto& c : cells) {
    const double med = median(c.gflops);
    const auto [lo, hi] = std::minmax_element(c.gflops.begin(), c.gflops.end());
    fmt::print("| {} | {} | {} × {} × {} | {:.0f} | {:.0f}–{:.0f} |\n", c.dtype, c.shape.what, c.shape.m, c.shape.n,
               c.shape.k, med, *lo, *hi);
    roof.gflops[c.dtype] = std::max(roof.gflops[c.dtype], med);
    shapes.push_back({{"dtype", c.dtype},
                      {"what", c.shape.what},
                      {"m", c.shape.m},
                      {"n", c.shape.n},
                      {"k", c.shape.k},
                      {"median_gflops", med},
                      {"gflops", c.gflops}});
  }
  for (const auto& [dt, g] : roof.gflops) fmt::print("roof {}: {:.0f} GFLOP/s\n", dt, g);
  if (roof.gflops.count("float32") && roof.gflops.count("bfloat16"))
    fmt::print("bfloat16 / float32: {:.2f}x\n", roof.gflops["bfloat16"] / roof.gflops["float32"]);
  auto j = train::roof_json(roof);
  j["rounds"] = r.rounds;
  j["shapes"] = shapes;
  if (r.json == "-") fmt::print("{}\n", j.dump());
  else if (!r.json.empty()) write_file_atomic(r.json, j.dump(2) + "\n");
  if (r.save) {
    const auto path = train::roof_file_path();
    train::write_roof(path, roof);
    fmt::print("saved to {} (drope-train's MFU divides by the roof of the dtype it trains in)\n", path);
  }
}

}  // namespace drope::bench
