// Internal to the NIAH sources (niah*.cpp): the comma-list and whitespace helpers and the search for
// the largest haystack that fits a token budget, shared by the RULER samples and the Kamradt grid.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace drope::tasks::niah_detail {

// `s` without leading and trailing spaces, tabs, CR and LF.
std::string trim(const std::string& s);

// "a, b,c" → {"a", "b", "c"} (items trimmed; empty items kept, so callers can reject them).
std::vector<std::string> split_list(const std::string& list);

// The largest n ≥ 1 with fits(n), given fits(1): gallops from `hint` then bisects.
int64_t largest_fitting(const std::function<bool(int64_t)>& fits, int64_t hint, const std::string& what);

// Starting point for the search when no hint is known: extrapolate the tokens per unit from 0 and 64 units.
int64_t estimate_units(const std::function<int64_t(int64_t)>& tokens_at, int64_t budget);

}  // namespace drope::tasks::niah_detail
