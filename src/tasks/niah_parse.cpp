// Comma-separated CLI lists for the NIAH commands (--lengths, --depths) and the helpers behind them.
#include "drope/tasks/niah.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>

#include "drope/core/error.h"
#include "niah_internal.h"

namespace drope::tasks {

namespace niah_detail {

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

std::vector<std::string> split_list(const std::string& list) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (true) {
    const size_t comma = list.find(',', pos);
    out.push_back(trim(list.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos)));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

}  // namespace niah_detail

using niah_detail::split_list;

// ---- parsers ------------------------------------------------------------------------------------------

std::vector<int64_t> parse_int_list(const std::string& list, const std::string& flag) {
  std::vector<int64_t> out;
  for (const auto& item : split_list(list)) {
    int64_t v = 0;
    const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (item.empty() || ec != std::errc() || end != item.data() + item.size() || v <= 0)
      fail("{}: '{}' is not a positive integer (in '{}')", flag, item, list);
    if (std::find(out.begin(), out.end(), v) != out.end()) fail("{}: {} is listed twice (in '{}')", flag, v, list);
    out.push_back(v);
  }
  return out;
}

std::vector<double> parse_depth_list(const std::string& list, const std::string& flag) {
  std::vector<double> out;
  for (const auto& item : split_list(list)) {
    char* end = nullptr;
    const double v = item.empty() ? NAN : std::strtod(item.c_str(), &end);
    if (item.empty() || end != item.c_str() + item.size() || !(v >= 0.0 && v <= 100.0))
      fail("{}: '{}' is not a depth in [0, 100] percent (in '{}')", flag, item, list);
    if (std::find(out.begin(), out.end(), v) != out.end()) fail("{}: {:g} is listed twice (in '{}')", flag, v, list);
    out.push_back(v);
  }
  return out;
}

}  // namespace drope::tasks
