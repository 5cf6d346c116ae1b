// Tokenizer factory and the lossy UTF-8 decoding shared by both implementations.
#include "drope/text/tokenizer.h"

#include <filesystem>

#include "drope/core/error.h"

namespace fs = std::filesystem;

namespace drope::text {

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
