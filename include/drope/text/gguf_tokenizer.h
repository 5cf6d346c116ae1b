// Tokenizers described by a GGUF file's `tokenizer.ggml.*` metadata: GPT-2-style byte-level BPE
// (tokenizer.ggml.model = gpt2, with the pre-tokenizer named by tokenizer.ggml.pre) becomes an HF
// tokenizer.json; SentencePiece-style vocabularies (tokenizer.ggml.model = llama: pieces, scores, types)
// become a SentencePiece model. Torch-free.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "drope/formats/gguf.h"
#include "drope/text/tokenizer.h"

namespace drope::text {

// The tokenizer files a GGUF implies, as a model directory would hold them.
struct GgufTokenizerFiles {
  std::string kind;                   // "hf-bpe" or "sentencepiece"
  std::string tokenizer_json;         // hf-bpe: tokenizer.json
  std::string tokenizer_model;        // sentencepiece: tokenizer.model (a serialized ModelProto)
  std::string tokenizer_config_json;  // bos/eos/unk/pad tokens, add_bos_token, chat_template

  // The tokenizer's own file name: tokenizer.json (hf-bpe) or tokenizer.model (sentencepiece).
  std::string main_file() const;
  // (file name, bytes) of every file, as a model directory holds them: the main file, then tokenizer_config.json.
  std::vector<std::pair<std::string, std::string>> files() const;
};

// Builds the files from the metadata of `f`; every key is checked (types, lengths, ids in range, merges
// of two parts) and an error names the file and key. The files are then loaded as a model directory's
// would be (merges of known tokens, one UNKNOWN piece, byte pieces, ...), so that what a caller writes is a
// tokenizer our tools load.
GgufTokenizerFiles gguf_tokenizer_files(const gguf::File& f);

// The pre-tokenizer names of tokenizer.ggml.pre that drope knows (for messages and docs).
std::string gguf_pre_tokenizer_names();

// Loads the tokenizer of the GGUF file at `path` (load_tokenizer does this for a *.gguf path).
std::unique_ptr<Tokenizer> load_gguf_tokenizer(const std::string& path);

// Loaders from bytes held in memory; `label` names the source in errors and path().
std::unique_ptr<Tokenizer> load_hf_bpe_text(const std::string& label, const std::string& tokenizer_json,
                                            const std::string& tokenizer_config_json);
std::unique_ptr<Tokenizer> load_sentencepiece_bytes(const std::string& label, const std::string& model_bytes);

}  // namespace drope::text
