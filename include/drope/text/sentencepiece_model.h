// Checks a serialized SentencePiece ModelProto before libsentencepiece sees it: the library trusts the
// normaliser's double-array trie, the piece scores and the piece types, and a crafted .model file
// crashes it. Our own minimal protobuf wire-format reader; torch-free.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace drope::text {

// What the check learnt about a model (for messages and tests).
struct SentencePieceModelSummary {
  int64_t num_pieces = 0;
  int64_t unk_id = -1;       // the one piece of type UNKNOWN
  int32_t model_type = 1;    // trainer_spec.model_type: 1 unigram, 2 bpe, 3 word, 4 char
  int64_t trie_units = 0;    // units of the normaliser's double-array trie (0: no normalisation)
};

// Parses `bytes` (the content of `path`) as a ModelProto and checks every invariant the library relies
// on: well-formed wire format; 1..2^24 pieces, each non-empty UTF-8 with a finite score and a known type,
// no piece twice, exactly one UNKNOWN piece, byte pieces spelled <0xXX>; a known model type; and for the
// normaliser and denormaliser, a precompiled charsmap whose trie stays inside its array on every input
// and whose leaves point at NUL-terminated strings inside the string pool. Throws drope::Error naming
// `path` and the field.
SentencePieceModelSummary check_sentencepiece_model(std::string_view bytes, const std::string& path);

}  // namespace drope::text
