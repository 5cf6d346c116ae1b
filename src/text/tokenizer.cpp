// Tokenizer factory and the UTF-8 helpers shared by both implementations.
#include "drope/text/tokenizer.h"

#include <filesystem>

#include "drope/core/error.h"

namespace fs = std::filesystem;

namespace drope::text {

namespace {

// Length of the valid UTF-8 sequence starting at s[i] (> 0), or minus the length of its maximal
// invalid prefix (< 0: that many bytes form one replacement character).
int utf8_step(std::string_view s, size_t i) {
  const auto b = static_cast<unsigned char>(s[i]);
  if (b < 0x80) return 1;
  int need;
  unsigned char lo = 0x80, hi = 0xBF;
  if (b >= 0xC2 && b <= 0xDF) {
    need = 1;
  } else if (b >= 0xE0 && b <= 0xEF) {
    need = 2;
    if (b == 0xE0) lo = 0xA0;
    if (b == 0xED) hi = 0x9F;
  } else if (b >= 0xF0 && b <= 0xF4) {
    need = 3;
    if (b == 0xF0) lo = 0x90;
    if (b == 0xF4) hi = 0x8F;
  } else {
    return -1;
  }
  for (int k = 1; k <= need; ++k) {
    if (i + k >= s.size()) return -k;
    const auto c = static_cast<unsigned char>(s[i + k]);
    const unsigned char l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
    if (c < l || c > h) return -k;
  }
  return need + 1;
}

}  // namespace

int64_t utf8_error_offset(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const int n = utf8_step(s, i);
    if (n < 0) return static_cast<int64_t>(i);
    i += static_cast<size_t>(n);
  }
  return -1;
}

std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (size_t i = 0; i < bytes.size();) {
    const int n = utf8_step(bytes, i);
    if (n > 0) {
      out.append(bytes.substr(i, static_cast<size_t>(n)));
      i += static_cast<size_t>(n);
    } else {
      out += "\xEF\xBF\xBD";
      i += static_cast<size_t>(-n);
    }
  }
  return out;
}

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) fail("{}: tokenizer not found", path);
  if (fs::is_directory(path, ec)) {
    const auto json = fs::path(path) / "tokenizer.json";
    const auto model = fs::path(path) / "tokenizer.model";
    if (fs::exists(json, ec)) return load_hf_bpe(json.string());
    if (fs::exists(model, ec)) return load_sentencepiece(model.string());
    fail("{}: directory holds neither tokenizer.json nor tokenizer.model", path);
  }
  const auto ext = fs::path(path).extension().string();
  if (ext == ".model") return load_sentencepiece(path);
  if (ext == ".json") return load_hf_bpe(path);
  fail("{}: unknown tokenizer file; expected a SentencePiece .model, an HF tokenizer.json, or a directory "
       "holding one",
       path);
}

}  // namespace drope::text
