// Greedy generation with a KV cache: chunked prefill (bounded memory for long prompts), batched decode
// over left-padded prompts, stop sequences, EOS and a max-new-token limit. Deterministic: the same
// model and prompts give the same tokens, alone or in a batch.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "drope/model/transformer.h"
#include "drope/text/tokenizer.h"

namespace drope::eval {

// Wall-clock split of a generate_tokens call (for benchmarks).
struct GenerateStats {
  double prefill_seconds = 0;  // prompt forwards, through the first token of every row
  double decode_seconds = 0;   // the one-token steps after that
  int64_t prompt_tokens = 0, decode_steps = 0;
};

struct GenerateOptions {
  int64_t max_new_tokens = 128;
  std::vector<std::string> stop;   // generation ends once the decoded text contains one (it is cut off)
  bool stop_at_eos = true;         // end at the tokenizer's EOS (when it has one)
  int64_t prefill_chunk = 2048;    // prompt tokens per forward during prefill
  int64_t batch_size = 1;          // prompts decoded together
  GenerateStats* stats = nullptr;  // if set, receives the timing split
};

struct Generation {
  std::string text;             // generated text, cut before the first stop sequence
  std::vector<int32_t> tokens;  // generated token ids (without the stop-sequence cut)
  int64_t prompt_tokens = 0;
  std::string finish;           // "stop", "eos" or "length"
};

// Token-level greedy decoding. `eos` < 0 disables EOS. `stop_check(i, tokens)` (optional) returns true
// when sequence i should end after its current tokens.
struct TokenGeneration {
  std::vector<int32_t> tokens;
  std::string finish;  // "eos", "stop" or "length"
};
using StopCheck = std::function<bool(size_t, const std::vector<int32_t>&)>;
std::vector<TokenGeneration> generate_tokens(DecoderLM& model, const std::vector<std::vector<int32_t>>& prompts,
                                             const GenerateOptions& opt, int32_t eos, const StopCheck& stop_check = {});

// Text-level: encodes each prompt (with BOS when the tokenizer has one and `add_bos`), decodes greedily,
// applies the stop sequences. Prompts longer than the model can hold are the caller's business
// (LongBench truncates, NIAH sizes its contexts).
std::vector<Generation> generate(DecoderLM& model, const text::Tokenizer& tok, const std::vector<std::string>& prompts,
                                 const GenerateOptions& opt, bool add_bos = false);

}  // namespace drope::eval
