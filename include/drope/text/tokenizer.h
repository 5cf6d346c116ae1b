// Tokenizers for data preparation: SentencePiece models (libsentencepiece) and HF `tokenizer.json`
// byte-level BPE (GPT-2 / Qwen2 / SmolLM style), behind one interface. Torch-free.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "drope/core/utf8.h"

namespace drope::text {

// Text ↔ token ids. encode() adds no BOS/EOS; decode() returns valid UTF-8 (bytes that do not form
// UTF-8 become U+FFFD, as HF tokenizers and SentencePiece do).
class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // Token ids of `text` (UTF-8; invalid UTF-8 is an error naming the byte offset).
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  // Text of `ids`; special tokens are rendered unless `skip_special` (SentencePiece always drops its
  // control tokens BOS/EOS). Ids outside the vocabulary fail.
  virtual std::string decode(const std::vector<int32_t>& ids, bool skip_special = false) const = 0;
  // One more than the largest id the tokenizer can produce.
  virtual int64_t vocab_size() const = 0;
  // End/begin-of-sequence ids, -1 when the tokenizer has none.
  virtual int32_t eos_id() const = 0;
  virtual int32_t bos_id() const = 0;
  // "sentencepiece" or "hf-bpe".
  virtual std::string kind() const = 0;
  // The file it was loaded from (.model or tokenizer.json).
  virtual const std::string& path() const = 0;
};

// Loads a SentencePiece `.model`; a missing, corrupt or non-SentencePiece file fails naming it.
std::unique_ptr<Tokenizer> load_sentencepiece(const std::string& model_path);

// Loads an HF `tokenizer.json` with a byte-level BPE model. Every key is validated where it is read;
// unsupported components (another model type, a normalizer other than NFC, ...) fail naming the key.
// EOS/BOS come from a `tokenizer_config.json` beside it when present, else from well-known special
// tokens (<|endoftext|>, </s>, <|end_of_text|>, <eos> / <s>, <|begin_of_text|>, <bos>).
std::unique_ptr<Tokenizer> load_hf_bpe(const std::string& tokenizer_json);

// Chooses by file: `*.model` → SentencePiece; `*.json`, or a directory holding `tokenizer.json` → BPE; `*.gguf` →
// the tokenizer its metadata describes (drope/text/gguf_tokenizer.h);
// a directory holding `tokenizer.model` → SentencePiece.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path);

// Options for training a SentencePiece model.
struct SentencePieceTrainOptions {
  int64_t vocab_size = 8000;
  std::string model_type = "bpe";  // bpe | unigram
  int num_threads = 2;
  // Sentences longer than this many bytes are cut into pieces for training only.
  int64_t max_sentence_bytes = 4096;
  // Normalisation: identity (every text round-trips) or nmt_nfkc (SentencePiece's default, NFKC with a
  // precompiled charsmap in the model).
  std::string normalization_rule = "identity";
};

// Source of training text: calls `emit(line)` for every training line, in a fixed order.
using TextSource = std::function<void(const std::function<void(std::string_view)>& emit)>;

// Trains a SentencePiece model (byte fallback on, identity normalisation, whitespace kept, so every
// UTF-8 text round-trips) on the lines `source` emits and writes `out_model` atomically. unk = 0,
// bos = 1, eos = 2.
void train_sentencepiece(const TextSource& source, const SentencePieceTrainOptions& options,
                         const std::string& out_model);

// The same, reading the lines of `corpus_files` (each must be UTF-8).
void train_sentencepiece(const std::vector<std::string>& corpus_files, const SentencePieceTrainOptions& options,
                         const std::string& out_model);

// Byte offset of the first invalid UTF-8 sequence in `s`, or -1 when `s` is valid UTF-8 (drope/core/utf8.h).
using drope::utf8_error_offset;

// `bytes` as valid UTF-8: each maximal invalid subsequence becomes U+FFFD (Unicode's recommended
// practice, as Rust's from_utf8_lossy and HF tokenizers do; drope/core/utf8.h).
using drope::utf8_lossy;

}  // namespace drope::text
