#include "drope/eval/generate.h"

#include <algorithm>
#include <chrono>

#include "drope/core/error.h"
#include "drope/eval/perplexity.h"

namespace drope::eval {

namespace {

// Prefills one prompt into a fresh single-row cache in chunks; returns the logits of its last token.
torch::Tensor prefill(DecoderLM& model, const std::vector<int32_t>& prompt, int64_t chunk, KVCache& cache) {
  const int64_t P = int64_t(prompt.size());
  auto ids = torch::tensor(std::vector<int64_t>(prompt.begin(), prompt.end()), torch::kLong)
                 .view({1, P})
                 .to(model->lm_head_weight().device());  // the model's device (CUDA when moved there)
  cache.length_hint = {P};  // β and dynamic scaling as if the whole prompt were one forward
  ForwardOptions fo;
  fo.cache = &cache;
  torch::Tensor last;
  for (int64_t s = 0; s < P; s += chunk) {
    auto h = model->hidden(ids.narrow(1, s, std::min(chunk, P - s)), fo);  // (1, t, C)
    if (s + chunk >= P) last = h.select(1, h.size(1) - 1);                 // (1, C)
  }
  return torch::matmul(last, model->lm_head_weight().t()).squeeze(0);     // (V)
}

// Stacks single-row caches into one left-padded cache with room for `extra` more tokens.
KVCache merge(std::vector<KVCache>& rows, int64_t extra) {
  KVCache out;
  int64_t S = 0;
  for (const auto& r : rows) S = std::max(S, r.length);
  const int64_t B = int64_t(rows.size());
  for (const auto& r : rows) out.pad.push_back(S - r.length);
  const size_t layers = rows[0].k.size();
  out.k.resize(layers);
  out.v.resize(layers);
  for (size_t l = 0; l < layers; ++l) {
    const auto& k0 = rows[0].k[l];
    auto kb = torch::zeros({B, k0.size(1), S + extra, k0.size(3)}, k0.options());
    auto vb = torch::zeros_like(kb);
    for (int64_t b = 0; b < B; ++b) {
      const auto& r = rows[size_t(b)];
      kb[b].narrow(1, out.pad[size_t(b)], r.length).copy_(r.k[l][0].narrow(1, 0, r.length));
      vb[b].narrow(1, out.pad[size_t(b)], r.length).copy_(r.v[l][0].narrow(1, 0, r.length));
    }
    out.k[l] = kb;
    out.v[l] = vb;
  }
  out.length = S;
  for (auto& r : rows) r = KVCache{};  // free the single-row buffers
  return out;
}

int32_t greedy_token(const torch::Tensor& logits) { return int32_t(logits.argmax().item<int64_t>()); }

}  // namespace

std::vector<TokenGeneration> generate_tokens(DecoderLM& model, const std::vector<std::vector<int32_t>>& prompts,
                                             const GenerateOptions& opt, int32_t eos, const StopCheck& stop_check) {
  // A length beyond any context a model can hold (checked first: the memory estimate adds it to the prompt).
  constexpr int64_t kMaxNewTokens = int64_t(1) << 22;
  if (opt.max_new_tokens < 0 || opt.max_new_tokens > kMaxNewTokens)
    fail("generate: --max-new-tokens must be in [0, {}], got {}", kMaxNewTokens, opt.max_new_tokens);
  if (opt.prefill_chunk <= 0) fail("generate: prefill_chunk must be > 0, got {}", opt.prefill_chunk);
  if (opt.batch_size <= 0) fail("generate: batch_size must be > 0, got {}", opt.batch_size);
  const int64_t V = model->config().vocab_size;
  for (size_t i = 0; i < prompts.size(); ++i) {
    if (prompts[i].empty()) fail("generate: prompt {} is empty", i);
    for (auto t : prompts[i])
      if (t < 0 || t >= V) fail("generate: prompt {} has token id {} outside the vocabulary [0, {})", i, t, V);
  }
  size_t longest = 0;
  for (const auto& p : prompts) longest = std::max(longest, p.size());
  // Prefill runs one prompt at a time in chunks; the decode batch holds every row's full KV cache.
  check_fits_in_memory(model->config(), std::min<int64_t>(opt.prefill_chunk, int64_t(longest)),
                       int64_t(longest) + opt.max_new_tokens,
                       std::min<int64_t>(opt.batch_size, int64_t(prompts.size())), "generation");
  torch::NoGradGuard no_grad;
  std::vector<TokenGeneration> out(prompts.size());
  for (size_t begin = 0; begin < prompts.size(); begin += size_t(opt.batch_size)) {
    const size_t end = std::min(prompts.size(), begin + size_t(opt.batch_size));
    const size_t B = end - begin;
    std::vector<KVCache> rows(B);
    std::vector<int32_t> next(B);
    auto t0 = std::chrono::steady_clock::now();
    for (size_t b = 0; b < B; ++b)
      next[b] = greedy_token(prefill(model, prompts[begin + b], opt.prefill_chunk, rows[b]));
    KVCache cache = B == 1 ? std::move(rows[0]) : merge(rows, opt.max_new_tokens);
    auto t1 = std::chrono::steady_clock::now();
    if (opt.stats) {
      opt.stats->prefill_seconds += std::chrono::duration<double>(t1 - t0).count();
      for (size_t b = 0; b < B; ++b) opt.stats->prompt_tokens += int64_t(prompts[begin + b].size());
    }
    cache.length_hint.clear();
    std::vector<bool> done(B, false);
    size_t live = B;
    auto finish = [&](size_t b, const char* why) {
      out[begin + b].finish = why;
      done[b] = true;
      --live;
    };
    if (opt.max_new_tokens == 0)
      for (size_t b = 0; b < B; ++b) finish(b, "length");
    for (int64_t step = 0; live > 0; ++step) {
      // Record each live row's chosen token and decide whether it ends there.
      for (size_t b = 0; b < B; ++b) {
        if (done[b]) continue;
        auto& g = out[begin + b];
        if (opt.stop_at_eos && eos >= 0 && next[b] == eos) {
          finish(b, "eos");
          continue;
        }
        g.tokens.push_back(next[b]);
        if (stop_check && stop_check(begin + b, g.tokens)) finish(b, "stop");
        else if (int64_t(g.tokens.size()) >= opt.max_new_tokens) finish(b, "length");
      }
      if (live == 0) break;
      // One decode step for the whole batch (finished rows feed their last token; output ignored).
      std::vector<int64_t> ids(B);
      for (size_t b = 0; b < B; ++b) ids[b] = next[b];
      ForwardOptions fo;
      fo.cache = &cache;
      auto step_ids = torch::tensor(ids, torch::kLong).view({int64_t(B), 1}).to(model->lm_head_weight().device());
      auto h = model->hidden(step_ids, fo);  // (B, 1, C)
      auto logits = torch::matmul(h.squeeze(1), model->lm_head_weight().t());            // (B, V)
      auto best = logits.argmax(-1);
      for (size_t b = 0; b < B; ++b) next[b] = int32_t(best[int64_t(b)].item<int64_t>());
      if (opt.stats) ++opt.stats->decode_steps;
    }
    if (opt.stats)
      opt.stats->decode_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  }
  return out;
}

namespace {

// The generated ids the tokenizer has: a model's embedding is often padded beyond its tokenizer (Qwen2: 151 936
// rows, 151 646 tokens), and greedy decoding may pick a padding row. Like HF tokenizers' decode, which skips ids
// it has no token for, the text leaves them out (the token ids keep them).
std::string decode_known(const text::Tokenizer& tok, const std::vector<int32_t>& ids) {
  std::vector<int32_t> known;
  known.reserve(ids.size());
  for (int32_t id : ids)
    if (id >= 0 && id < tok.vocab_size()) known.push_back(id);
  return tok.decode(known, /*skip_special=*/true);
}

}  // namespace

std::vector<Generation> generate(DecoderLM& model, const text::Tokenizer& tok, const std::vector<std::string>& prompts,
                                 const GenerateOptions& opt, bool add_bos) {
  std::vector<std::vector<int32_t>> ids;
  ids.reserve(prompts.size());
  for (const auto& p : prompts) {
    auto t = tok.encode(p);
    if (add_bos && tok.bos_id() >= 0) t.insert(t.begin(), tok.bos_id());
    ids.push_back(std::move(t));
  }
  // A stop sequence may span tokens: check the decoded text of the generated tokens so far.
  StopCheck stop;
  if (!opt.stop.empty()) {
    stop = [&](size_t, const std::vector<int32_t>& toks) {
      const auto text = decode_known(tok, toks);
      for (const auto& s : opt.stop)
        if (!s.empty() && text.find(s) != std::string::npos) return true;
      return false;
    };
  }
  auto gens = generate_tokens(model, ids, opt, tok.eos_id(), stop);
  std::vector<Generation> out(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto& g = out[i];
    g.tokens = std::move(gens[i].tokens);
    g.finish = gens[i].finish;
    g.prompt_tokens = int64_t(ids[i].size());
    g.text = decode_known(tok, g.tokens);
    size_t cut = std::string::npos;
    for (const auto& s : opt.stop)
      if (!s.empty()) cut = std::min(cut, g.text.find(s));
    if (cut != std::string::npos) g.text.resize(cut);
  }
  return out;
}

}  // namespace drope::eval
