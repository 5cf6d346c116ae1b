// Tokenizer factory: picks the HF BPE or SentencePiece implementation by file.
#include "drope/text/tokenizer.h"

#include <filesystem>

#include "drope/core/error.h"
#include "drope/text/gguf_tokenizer.h"

namespace fs = std::filesystem;

namespace drope::text {

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
  if (gguf::is_gguf_path(path)) return load_gguf_tokenizer(path);
  fail("{}: unknown tokenizer file; expected a SentencePiece .model, an HF tokenizer.json, a GGUF model "
       "file, or a directory holding one",
       path);
}

}  // namespace drope::text
