#include "drope/train/quick.h"

#include <cmath>
#include <map>
#include <random>

#include "drope/core/error.h"
#include "drope/train/optim.h"

namespace drope::train {

double cosine_lr(int64_t step, int64_t steps, int64_t warmup, double peak) {
  return schedule_lr(ScheduleConfig{"cosine", warmup, steps, 0.1, 0.2}, step, peak);
}

std::vector<double> train_lm(DecoderLM& model, const std::vector<int64_t>& tokens, const QuickTrainOptions& opt,
                             const StepCallback& on_step) {
  if ((int64_t)tokens.size() < opt.seq_len + 2) fail("training data has {} tokens, need more than seq_len + 1", tokens.size());
  // Weight decay on matrices only (not norms, biases or embeddings).
  std::vector<torch::Tensor> decay, no_decay;
  for (auto& kv : model->named_parameters()) {
    const bool matrix = kv.value().dim() == 2 && kv.key().find("embed_tokens") == std::string::npos;
    (matrix ? decay : no_decay).push_back(kv.value());
  }
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decay, std::make_unique<torch::optim::AdamWOptions>(
                                 torch::optim::AdamWOptions(opt.lr).betas({0.9, 0.95}).eps(1e-8).weight_decay(opt.weight_decay)));
  groups.emplace_back(no_decay, std::make_unique<torch::optim::AdamWOptions>(
                                    torch::optim::AdamWOptions(opt.lr).betas({0.9, 0.95}).eps(1e-8).weight_decay(0.0)));
  torch::optim::AdamW adamw(groups, torch::optim::AdamWOptions(opt.lr));
  std::mt19937_64 rng(opt.seed);
  std::uniform_int_distribution<int64_t> start(0, (int64_t)tokens.size() - opt.seq_len - 2);
  auto data = torch::tensor(tokens, torch::kLong);
  model->train();
  std::vector<double> losses;
  for (int64_t step = 0; step < opt.steps; ++step) {
    std::vector<torch::Tensor> rows;
    for (int64_t b = 0; b < opt.batch; ++b) rows.push_back(data.narrow(0, start(rng), opt.seq_len + 1));
    auto batch = torch::stack(rows);                     // (B, T+1)
    auto inputs = batch.narrow(1, 0, opt.seq_len);       // (B, T)
    auto labels = batch.narrow(1, 1, opt.seq_len);       // (B, T)
    const double lr = cosine_lr(step, opt.steps, opt.warmup, opt.lr);
    for (auto& g : adamw.param_groups()) static_cast<torch::optim::AdamWOptions&>(g.options()).lr(lr);
    adamw.zero_grad();
    auto logits = model->forward(inputs);                // (B, T, V)
    auto loss = torch::nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}), labels.reshape({-1}));
    loss.backward();
    const double gnorm = torch::nn::utils::clip_grad_norm_(model->parameters(), opt.clip);
    adamw.step();
    losses.push_back(loss.item<double>());
    if (on_step) on_step(step, losses.back(), lr, gnorm);
  }
  model->eval();
  return losses;
}

double perplexity(DecoderLM& model, const std::vector<int64_t>& tokens, int64_t seq_len, int64_t max_windows) {
  torch::NoGradGuard ng;
  model->eval();
  const int64_t n = std::min<int64_t>(max_windows, ((int64_t)tokens.size() - 1) / seq_len);
  if (n < 1) fail("evaluation data has {} tokens, fewer than one window of {}", tokens.size(), seq_len + 1);
  auto data = torch::tensor(tokens, torch::kLong);
  double nll = 0;
  for (int64_t w = 0; w < n; ++w) {
    auto win = data.narrow(0, w * seq_len, seq_len + 1).unsqueeze(0);  // (1, T+1)
    auto logits = model->forward(win.narrow(1, 0, seq_len));          // (1, T, V)
    nll += torch::nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}), win.narrow(1, 1, seq_len).reshape({-1}))
               .item<double>();
  }
  return std::exp(nll / double(n));
}

double unigram_entropy(const std::vector<int64_t>& tokens, int64_t vocab) {
  std::vector<double> count(vocab, 0.0);
  for (auto t : tokens) count[t] += 1;
  double h = 0;
  for (double c : count)
    if (c > 0) h -= c / tokens.size() * std::log(c / tokens.size());
  return h;
}

}  // namespace drope::train
