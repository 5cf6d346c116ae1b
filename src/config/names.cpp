#include "drope/config/names.h"

#include "drope/core/error.h"

namespace drope {

std::string join_names(const std::vector<std::string>& names) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += i + 1 == names.size() ? " or " : ", ";
    out += names[i];
  }
  return out;
}

void fail_unknown_name(std::string_view where, std::string_view what, std::string_view name,
                       const std::vector<std::string>& names) {
  fail("{}: unknown {} '{}' (expected {})", where, what, name, join_names(names));
}

}  // namespace drope
