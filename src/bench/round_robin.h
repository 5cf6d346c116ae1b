// Timing shared by the drope-bench runners that compare paths of the same computation.
#pragma once

#include <algorithm>
#include <chrono>
#include <functional>
#include <vector>

namespace drope::bench {

// Median milliseconds of each path, run round-robin (path 0, 1, ..., 0, 1, ...) after one warm-up round, so that a
// machine whose speed drifts during the run slows every path alike.
inline std::vector<double> median_ms_round_robin(int repeats, const std::vector<std::function<void()>>& paths) {
  for (const auto& f : paths) f();
  std::vector<std::vector<double>> ms(paths.size());
  for (int r = 0; r < repeats; ++r)
    for (size_t i = 0; i < paths.size(); ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      paths[i]();
      ms[i].push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
  std::vector<double> med;
  for (auto& v : ms) {
    std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
    med.push_back(v[v.size() / 2]);
  }
  return med;
}

}  // namespace drope::bench
