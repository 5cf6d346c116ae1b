// Long-context probes during training (drope-train's eval: section): perplexity at several window lengths over
// the first tokens of a token dataset's validation split, and an optional small needle-in-a-haystack probe. They
// run the protocols of `drope-eval ppl` (sliding windows) and `drope-eval niah` (RULER prompts, greedy decoding,
// string_match_all), so a reading at step N equals those commands on the checkpoint of step N.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "drope/model/transformer.h"
#include "drope/tasks/niah.h"
#include "drope/text/tokenizer.h"

namespace drope::eval {

struct ProbeOptions {
  std::vector<int64_t> lengths;       // perplexity window lengths; empty = no perplexity probe
  int64_t max_tokens = 16384;         // validation tokens scored per length (drope-eval ppl --max-tokens)
  int64_t stride = 256;               // sliding-window stride (drope-eval ppl --stride)
  std::vector<int64_t> niah_lengths;  // NIAH target lengths; empty = no NIAH probe
  std::string niah_task = "single_1";
  int64_t niah_trials = 4;
  uint64_t niah_seed = 42;
  int64_t niah_max_new_tokens = 32;
  std::string haystack = tasks::kDefaultHaystack;
};

// One probe's numbers: "ppl@<L>" for each length and "niah_<task>@<L>" (score in %) for each NIAH length; and
// the NIAH samples as JSON lines (task, length, trial, prompt_tokens, expected, output, finish, score: the fields
// of drope-eval niah's .samples.jsonl).
struct ProbeReading {
  nlohmann::json values = nlohmann::json::object();
  std::string niah_samples;
};

class LengthProbe {
 public:
  // Reads what every reading needs once: the first max_tokens tokens of `dataset`'s val split, and for NIAH its
  // tokenizer and the haystack. Fails naming the dataset when it has no val split or too few tokens.
  LengthProbe(ProbeOptions o, const std::string& dataset);
  ~LengthProbe();
  // Evaluates `model` (no gradients); `runner` runs the decoder blocks of a sharded model (empty: the model's own).
  ProbeReading run(DecoderLM& model, const BlockRunner& runner = {}) const;
  const ProbeOptions& options() const { return o_; }

 private:
  ProbeOptions o_;
  std::vector<int32_t> stream_;
  std::unique_ptr<text::Tokenizer> tokenizer_;
  tasks::NiahTask niah_task_;  // eval.niah_task, parsed once
  tasks::EssayText essay_;
};

}  // namespace drope::eval
