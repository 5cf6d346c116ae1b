// Small string helpers shared across the layers.
#pragma once

#include <string>
#include <string_view>

namespace drope {

// Whether `s` ends with `suffix`.
inline bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// `text` as one cell of a Markdown table (docs/training.md's generated tables): a '|' would end the cell, so it is
// escaped.
inline std::string markdown_cell(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    if (c == '|') out += '\\';
    out += c;
  }
  return out;
}

}  // namespace drope
