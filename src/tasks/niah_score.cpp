// NIAH scoring: RULER's postprocess_pred and string_match_all.
#include "drope/tasks/niah.h"

#include <cctype>

#include "niah_internal.h"

namespace drope::tasks {

using niah_detail::trim;

// ---- scoring ------------------------------------------------------------------------------------------

std::string niah_postprocess(const std::string& output) {
  std::string s = trim(output);
  for (char& c : s)
    if (static_cast<unsigned char>(c) < 0x20) c = '\n';
  return trim(s);
}

double string_match_all(const std::string& output, const std::vector<std::string>& expected) {
  if (expected.empty()) return 0.0;
  auto lower = [](std::string s) {
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
  };
  const std::string out = lower(output);
  int found = 0;
  for (const auto& e : expected) found += out.find(lower(e)) != std::string::npos;
  return 100.0 * found / static_cast<double>(expected.size());
}

}  // namespace drope::tasks
