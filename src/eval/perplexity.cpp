#include "drope/eval/perplexity.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "drope/core/cpu_budget.h"
#include "drope/core/error.h"

#include <fmt/format.h>

namespace drope::eval {

double forward_memory_bytes(const ModelConfig& c, int64_t tokens, int64_t kv_tokens, int64_t batch) {
  // Activations alive during one no-grad layer (residual, norm, q/k/v/o, gate/up/act, fused attention
  // O(T·D) state) plus the KV cache of every layer; float32.
  const double bt = double(tokens) * double(batch);
  const double D = double(c.resolved_head_dim());
  const double act =
      bt * (6.0 * double(c.hidden_size) + 2.0 * double(c.num_heads) * D + 3.0 * double(c.intermediate_size));
  const double kv = double(kv_tokens) * double(batch) * 2.0 * double(c.num_layers) * double(c.num_kv_heads) * D;
  return 4.0 * (act + kv);
}

void check_fits_in_memory(const ModelConfig& c, int64_t tokens, int64_t kv_tokens, int64_t batch,
                          const std::string& what) {
  check_memory_estimate(forward_memory_bytes(c, tokens, kv_tokens, batch),
                        fmt::format("{} of {} tokens (batch {})", what, std::max(tokens, kv_tokens), batch),
                        "activations and KV cache; use shorter lengths or a smaller batch");
}

double window_nll(DecoderLM& model, const torch::Tensor& ids, int64_t first, const BlockRunner& runner) {
  const int64_t T = ids.size(1);
  TORCH_CHECK(first >= 1 && first < T, "window_nll: first scored token ", first, " outside [1, ", T, ")");
  torch::NoGradGuard no_grad;
  ForwardOptions fwd;
  fwd.block_runner = runner;
  auto h = model->hidden(ids, fwd);                                         // (1, T, C)
  // Only the scored positions go through the LM head, in row chunks: T × V logits at once would not fit
  // for long windows and large vocabularies (32K × 151K floats = 19 GB).
  const int64_t n = T - first, rows = 1024;
  double sum = 0;
  const auto w = model->lm_head_weight().t();
  for (int64_t s = 0; s < n; s += rows) {
    const int64_t m = std::min(rows, n - s);
    auto logits = torch::matmul(h.narrow(1, first - 1 + s, m), w).squeeze(0);  // (m, V) predicts first+s..
    if (logits.scalar_type() != torch::kDouble) logits = logits.to(torch::kFloat);  // bf16 → float32 softmax
    auto target = ids.narrow(1, first + s, m).reshape({-1});
    sum += torch::nn::functional::cross_entropy(logits, target,
                                                torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
               .item<double>();
  }
  return sum / double(n);
}

namespace {
void check_opts(const PerplexityOptions& o, DecoderLM& model) {
  if (o.length < 2) fail("perplexity: length must be >= 2, got {}", o.length);
  if (o.stride <= 0) fail("perplexity: stride must be > 0, got {}", o.stride);
  if (o.max_tokens < 0 || o.max_windows < 0) fail("perplexity: max_tokens/max_windows must be >= 0");
  // A window is one forward without a cache: activations and keys of all L tokens.
  check_fits_in_memory(model->config(), o.length, o.length, 1, fmt::format("perplexity at length {}", o.length));
}

PerplexityResult finish(const std::vector<double>& nlls, int64_t scored) {
  if (nlls.empty()) fail("perplexity: no window to score (the input is shorter than the window)");
  PerplexityResult r;
  double sum = 0;
  for (size_t i = 0; i < nlls.size(); ++i) {
    if (!std::isfinite(nlls[i]))
      fail("perplexity: window {} of {} has a non-finite loss ({}): the model's logits overflow or are NaN", i + 1,
           nlls.size(), nlls[i]);
    sum += nlls[i];
  }
  r.mean_nll = sum / double(nlls.size());
  r.ppl = std::exp(r.mean_nll);
  r.windows = int64_t(nlls.size());
  r.tokens_scored = scored;
  return r;
}
}  // namespace

PerplexityResult perplexity_sliding(DecoderLM& model, const std::vector<int32_t>& stream, const PerplexityOptions& o) {
  check_opts(o, model);
  int64_t n = int64_t(stream.size());
  if (o.max_tokens > 0) n = std::min(n, o.max_tokens);
  if (n < 2) fail("perplexity: the token stream has {} tokens; need at least 2", n);
  auto all = torch::tensor(std::vector<int64_t>(stream.begin(), stream.begin() + n), torch::kLong).view({1, n});
  std::vector<double> nlls;
  int64_t scored = 0, prev_end = 0;
  // HF's perplexity guide: window [begin, end); tokens [prev_end, end) are new and scored (the first
  // window scores all but its first token, which has no context).
  for (int64_t begin = 0; begin < n; begin += o.stride) {
    const int64_t end = std::min(begin + o.length, n);
    const int64_t first = std::max<int64_t>(prev_end - begin, 1);
    if (end - begin >= 2 && first < end - begin) {
      nlls.push_back(window_nll(model, all.narrow(1, begin, end - begin), first, o.block_runner));
      scored += end - begin - first;
    }
    prev_end = end;
    if (end == n || (o.max_windows > 0 && int64_t(nlls.size()) >= o.max_windows)) break;
  }
  return finish(nlls, scored);
}

PerplexityResult perplexity_truncate(DecoderLM& model, const std::vector<std::vector<int32_t>>& documents,
                                     const PerplexityOptions& o) {
  check_opts(o, model);
  std::vector<double> nlls;
  int64_t scored = 0;
  for (const auto& d : documents) {
    if (int64_t(d.size()) < o.length) continue;
    auto ids = torch::tensor(std::vector<int64_t>(d.begin(), d.begin() + o.length), torch::kLong).view({1, o.length});
    nlls.push_back(window_nll(model, ids, 1, o.block_runner));
    scored += o.length - 1;
    if (o.max_windows > 0 && int64_t(nlls.size()) >= o.max_windows) break;
  }
  if (nlls.empty())
    fail("perplexity --truncate: no document has {} tokens (the longest has {})", o.length,
         documents.empty() ? 0 : std::max_element(documents.begin(), documents.end(), [](auto& a, auto& b) {
                                   return a.size() < b.size();
                                 })->size());
  auto r = finish(nlls, scored);
  r.documents_used = r.windows;
  return r;
}

TemperatureFit fit_temperature(DecoderLM& model, const std::vector<int32_t>& stream,
                               const std::vector<int64_t>& lengths, const PerplexityOptions& base, double beta_max) {
  return fit_temperature_with(model, lengths, beta_max, [&](int64_t L) {
    auto o = base;
    o.length = L;
    return perplexity_sliding(model, stream, o).ppl;
  });
}

TemperatureFit fit_temperature_with(DecoderLM& model, const std::vector<int64_t>& lengths, double beta_max,
                                    const std::function<double(int64_t)>& held_out_ppl) {
  const int64_t C = model->config().max_position;
  const double saved = model->config().softmax_temperature;
  TemperatureFit fit;
  auto ppl_at = [&](int64_t L, double beta) {
    // β at length L through the model's own formula: c = (β − 1) / ln(L / C).
    model->set_softmax_temperature(beta <= 1.0 ? 0.0 : (beta - 1.0) / std::log(double(L) / double(C)));
    return held_out_ppl(L);
  };
  try {
    for (int64_t L : lengths) {
      if (L <= C) fail("fit-temperature: length {} is not beyond the training length {}", L, C);
      std::vector<double> bs, ps;
      auto eval = [&](double b) {
        for (size_t i = 0; i < bs.size(); ++i)
          if (std::abs(bs[i] - b) < 1e-12) return ps[i];
        bs.push_back(b);
        ps.push_back(ppl_at(L, b));
        return ps.back();
      };
      // Coarse grid, then golden-section search around the best grid point (ppl(β) is unimodal in practice).
      const int grid = 7;
      double best_b = 1.0;
      for (int i = 0; i < grid; ++i) {
        double b = 1.0 + (beta_max - 1.0) * i / (grid - 1);
        if (eval(b) <= eval(best_b)) best_b = b;
      }
      const double step = (beta_max - 1.0) / (grid - 1);
      double lo = std::max(1.0, best_b - step), hi = std::min(beta_max, best_b + step);
      const double g = (std::sqrt(5.0) - 1) / 2;
      double x1 = hi - g * (hi - lo), x2 = lo + g * (hi - lo);
      for (int it = 0; it < 8; ++it) {
        if (eval(x1) <= eval(x2)) {
          hi = x2, x2 = x1, x1 = hi - g * (hi - lo);
        } else {
          lo = x1, x1 = x2, x2 = lo + g * (hi - lo);
        }
      }
      size_t bi = 0;
      for (size_t i = 1; i < ps.size(); ++i)
        if (ps[i] < ps[bi]) bi = i;
      // Keep the grid sorted by β for plots.
      std::vector<size_t> order(bs.size());
      for (size_t i = 0; i < order.size(); ++i) order[i] = i;
      std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return bs[a] < bs[b]; });
      std::vector<double> sb, sp;
      for (auto i : order) sb.push_back(bs[i]), sp.push_back(ps[i]);
      fit.lengths.push_back(L);
      fit.best_beta.push_back(bs[bi]);
      fit.best_ppl.push_back(ps[bi]);
      fit.base_ppl.push_back(eval(1.0));
      fit.grid_beta.push_back(sb);
      fit.grid_ppl.push_back(sp);
    }
  } catch (...) {
    model->set_softmax_temperature(saved);
    throw;
  }
  model->set_softmax_temperature(saved);
  double num = 0, den = 0;
  for (size_t i = 0; i < fit.lengths.size(); ++i) {
    const double x = std::log(double(fit.lengths[i]) / double(C));
    num += x * (fit.best_beta[i] - 1.0);
    den += x * x;
  }
  fit.c = den > 0 ? num / den : 0.0;
  return fit;
}

}  // namespace drope::eval
