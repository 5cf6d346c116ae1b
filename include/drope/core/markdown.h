// Text for the Markdown tables drope generates (docs/training.md's settings and environment tables).
#pragma once

#include <string>
#include <string_view>

namespace drope {

// `text` as one table cell: a '|' would end the cell, so it is escaped.
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
