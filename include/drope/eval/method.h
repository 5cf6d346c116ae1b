// The model an evaluation runs: a model directory, its tokenizer and a method (model/variant.h) applied
// to it, with the label and description that every results file carries.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "drope/model/transformer.h"
#include "drope/model/variant.h"
#include "drope/text/tokenizer.h"

namespace drope::eval {

struct MethodSpec {
  std::string model_dir;
  std::string tokenizer;  // default: the model directory
  Variant variant;        // RoPE scaling, temperature, DroPE, training-length override
  std::string label;      // method name in tables; default from the model directory and the variant
  int threads = 0;        // intra-op CPU threads; 0 = LibTorch's default
};

struct EvalModel {
  DecoderLM model{nullptr};
  std::unique_ptr<text::Tokenizer> tokenizer;  // null when not requested
  std::string label;
  Variant variant;
  int64_t train_length = 0;
  double temperature = 0.0;  // c in β = 1 + c·ln s
  // The method as a JSON object (label, positional, rope_scaling, factor, train_length, temperature, qk_norm,
  // variant) for results files.
  nlohmann::json describe() const;
};

// Loads the model (eval mode), applies the method and, if `need_tokenizer`, loads the tokenizer (a model
// without one is a clear error, as is a tokenizer larger than the model's vocabulary).
EvalModel load_eval_model(const MethodSpec& m, bool need_tokenizer);

// Loads the tokenizer of a model loaded without one, as load_eval_model does with `need_tokenizer` (for
// callers that check flags against the model before they require a tokenizer).
void load_eval_tokenizer(EvalModel& em, const MethodSpec& m);

}  // namespace drope::eval
