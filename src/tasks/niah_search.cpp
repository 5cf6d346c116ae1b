// NIAH sizing: the search for the largest number of haystack units whose prompt fits a token budget
// (galloping from a hint, then bisection), and its starting estimate.
#include "niah_internal.h"

#include <algorithm>

#include "drope/core/error.h"

namespace drope::tasks::niah_detail {

constexpr int64_t kMaxUnits = int64_t{1} << 22;

int64_t largest_fitting(const std::function<bool(int64_t)>& fits, int64_t hint, const std::string& what) {
  int64_t lo = 1, hi = -1;  // fits(lo), !fits(hi)
  if (hint > 1) {
    if (fits(hint)) lo = hint;
    else hi = hint;
  }
  if (hi < 0) {
    for (int64_t step = 1;; step *= 2) {
      const int64_t cand = lo + step;
      if (cand > kMaxUnits)
        fail("{}: more than {} haystack units still fit; is the token counter broken?", what, kMaxUnits);
      if (fits(cand)) lo = cand;
      else {
        hi = cand;
        break;
      }
    }
  } else {
    for (int64_t step = 1;; step *= 2) {
      const int64_t cand = hi - step;
      if (cand <= lo) break;
      if (fits(cand)) {
        lo = cand;
        break;
      }
      hi = cand;
    }
  }
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (fits(mid)) lo = mid;
    else hi = mid;
  }
  return lo;
}

int64_t estimate_units(const std::function<int64_t(int64_t)>& tokens_at, int64_t budget) {
  const int64_t base = tokens_at(0), at64 = tokens_at(64);
  const double per = std::max(1e-3, (at64 - base) / 64.0);
  return std::max<int64_t>(1, static_cast<int64_t>((budget - base) / per));
}

}  // namespace drope::tasks::niah_detail
