// UTF-8 validation shared by the YAML reader (drope_base) and the tokenizers (drope_text).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace drope {

// Length of the valid UTF-8 sequence starting at s[i] (> 0), or minus the length of its maximal
// invalid prefix (< 0: that many bytes form one replacement character).
int utf8_step(std::string_view s, size_t i);

// Byte offset of the first invalid UTF-8 sequence in `s`, or -1 when `s` is valid UTF-8.
int64_t utf8_error_offset(std::string_view s);

}  // namespace drope
