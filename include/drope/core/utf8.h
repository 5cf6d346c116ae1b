// UTF-8 validation, decoding and encoding, shared by the YAML reader (drope_base), the tokenizers
// (drope_text) and the task metrics (drope_tasks).
//
// Invalid input is handled in one of two documented ways, each kept where it was used before:
//   - utf8_lossy: each maximal invalid subsequence becomes one U+FFFD (Unicode's recommended practice,
//     as Rust's from_utf8_lossy and HF tokenizers do);
//   - utf8_to_u32: each byte that does not start a valid sequence becomes one U+FFFD (the per-byte
//     policy the jieba / LongBench metrics were written with).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace drope {

// Length of the valid UTF-8 sequence starting at s[i] (> 0), or minus the length of its maximal
// invalid prefix (< 0: that many bytes form one replacement character).
int utf8_step(std::string_view s, size_t i);

// Byte offset of the first invalid UTF-8 sequence in `s`, or -1 when `s` is valid UTF-8.
int64_t utf8_error_offset(std::string_view s);

// Decodes the code point at s[i] of *valid* UTF-8 (nothing is checked) and advances i past it.
inline char32_t utf8_next(std::string_view s, size_t& i) {
  const auto b = static_cast<unsigned char>(s[i]);
  const int n = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
  char32_t cp = n == 1 ? b : n == 2 ? (b & 0x1F) : n == 3 ? (b & 0x0F) : (b & 0x07);
  for (int k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  i += static_cast<size_t>(n);
  return cp;
}

// Appends the UTF-8 encoding of code point `cp`; surrogates and values past U+10FFFF are written as
// U+FFFD (as ICU's UnicodeString::fromUTF32 does).
void utf8_append(std::string& out, char32_t cp);

// `bytes` as valid UTF-8: each maximal invalid subsequence becomes U+FFFD.
std::string utf8_lossy(std::string_view bytes);

// The code points of `s`; each byte that does not start a valid sequence (bad lead byte, missing
// continuation, overlong form, surrogate, past U+10FFFF) becomes one U+FFFD and decoding goes on at the
// next byte.
std::u32string utf8_to_u32(std::string_view s);

// UTF-32 → UTF-8 by utf8_append (invalid code points become U+FFFD).
std::string u32_to_utf8(std::u32string_view s);

// Largest prefix length <= max of `s` that ends on a UTF-8 character boundary (by continuation bytes
// only); `max` itself when no boundary lies in (0, max].
size_t utf8_cut(std::string_view s, size_t max);

}  // namespace drope
