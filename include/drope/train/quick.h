// A small single-process language-model trainer and perplexity evaluator over an in-memory token
// stream: what the quickstart pipeline (pretrain → DroPE → recalibrate → evaluate) needs on a CPU.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "drope/model/transformer.h"

namespace drope::train {

struct QuickTrainOptions {
  int64_t steps = 200;         // optimizer steps
  int64_t batch = 16;          // sequences per step
  int64_t seq_len = 64;        // tokens per sequence
  double lr = 3e-3;            // peak learning rate
  int64_t warmup = 20;         // linear warmup steps, then cosine decay to 10% of peak
  double weight_decay = 0.1;   // decoupled, on matrices only
  double clip = 1.0;           // gradient-norm clip
  uint64_t seed = 0;           // batch sampling seed
};

// Called after each step with (step, loss, lr, grad_norm).
using StepCallback = std::function<void(int64_t, double, double, double)>;

// Trains with AdamW (β 0.9/0.95, ε 1e-8) on random windows of `tokens`; returns the loss per step.
std::vector<double> train_lm(DecoderLM& model, const std::vector<int64_t>& tokens, const QuickTrainOptions& opt,
                             const StepCallback& on_step = {});

// Perplexity over consecutive non-overlapping windows of `seq_len` tokens (at most `max_windows`).
double perplexity(DecoderLM& model, const std::vector<int64_t>& tokens, int64_t seq_len, int64_t max_windows = 16);

// Entropy (nats/token) of the unigram distribution of `tokens`: the loss of a model that ignores context.
double unigram_entropy(const std::vector<int64_t>& tokens, int64_t vocab);

// Learning rate at `step`: linear warmup, cosine decay to 10% of peak.
double cosine_lr(int64_t step, int64_t steps, int64_t warmup, double peak);

}  // namespace drope::train
