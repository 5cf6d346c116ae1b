// Perplexity vs context length (docs/design.md#perplexity): the sliding-window protocol of the YaRN/PI papers and HF's
// perplexity guide, and the truncate protocol (first L tokens of each document in one window).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "drope/model/transformer.h"

namespace drope::eval {

struct PerplexityOptions {
  int64_t length = 0;          // window length L
  int64_t stride = 256;        // sliding: new tokens scored per window after the first
  bool truncate = false;       // truncate protocol instead of sliding windows
  int64_t max_tokens = 0;      // sliding: score at most this many tokens of the stream (0 = all)
  int64_t max_windows = 0;     // either protocol: at most this many windows (0 = all)
  BlockRunner block_runner;    // runs the decoder blocks of a sharded model (empty: the model's own)
};

struct PerplexityResult {
  double ppl = 0;             // exp(mean over windows of each window's mean NLL)
  double mean_nll = 0;        // that mean, in nats
  int64_t windows = 0;
  int64_t tokens_scored = 0;
  int64_t documents_used = 0; // truncate: documents long enough for a window
};

// Sliding windows over `stream` (documents already concatenated by the caller): windows of L tokens
// starting every `stride` tokens; each scores only the tokens the previous window did not.
PerplexityResult perplexity_sliding(DecoderLM& model, const std::vector<int32_t>& stream, const PerplexityOptions& opt);

// Truncate protocol: the first L tokens of each document with at least L tokens, one window each.
PerplexityResult perplexity_truncate(DecoderLM& model, const std::vector<std::vector<int32_t>>& documents,
                                     const PerplexityOptions& opt);

// Memory a no-grad forward needs beyond the weights: activations of one layer for `tokens` × `batch`
// plus keys/values of `kv_tokens` × `batch` in every layer (float32); and a clear error naming `what` when
// the estimate exceeds 90% of the memory available now (check_memory_estimate).
double forward_memory_bytes(const ModelConfig& c, int64_t tokens, int64_t kv_tokens, int64_t batch);
void check_fits_in_memory(const ModelConfig& c, int64_t tokens, int64_t kv_tokens, int64_t batch,
                          const std::string& what);

// Mean NLL (nats) of tokens [first, T) of `ids` (1, T) predicted from their prefixes, in one forward.
// `first` ≥ 1.
double window_nll(DecoderLM& model, const torch::Tensor& ids, int64_t first, const BlockRunner& runner = {});

// Temperature fitting (docs/design.md#softmax-temperature): for each target length L > C_train, the
// attention logit scale β minimising held-out perplexity, then c of β = 1 + c·ln(L / C_train) by least
// squares through the origin.
struct TemperatureFit {
  std::vector<int64_t> lengths;
  std::vector<double> best_beta;            // per length
  std::vector<double> best_ppl, base_ppl;   // at best β, and at β = 1
  std::vector<std::vector<double>> grid_beta, grid_ppl;  // the search, per length
  double c = 0;                             // fitted coefficient
};
TemperatureFit fit_temperature(DecoderLM& model, const std::vector<int32_t>& stream,
                               const std::vector<int64_t>& lengths, const PerplexityOptions& base,
                               double beta_max = 2.5);
// The same search with any held-out perplexity: held_out_ppl(L) evaluates the model (at the temperature the
// search has set) on held-out data of length L, e.g. the answers of a synthetic task.
TemperatureFit fit_temperature_with(DecoderLM& model, const std::vector<int64_t>& lengths, double beta_max,
                                    const std::function<double(int64_t)>& held_out_ppl);

}  // namespace drope::eval
