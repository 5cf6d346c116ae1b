// NIAH Kamradt grid: one needle at a requested token depth of an essay excerpt (backed up to a sentence
// end, as LLMNeedleHaystackTester does), sized like the RULER samples.
#include "drope/tasks/niah.h"

#include <cmath>

#include <fmt/format.h>

#include "drope/core/error.h"
#include "niah_internal.h"

namespace drope::tasks {

using niah_detail::estimate_units;
using niah_detail::largest_fitting;

// ---- Kamradt grid -----------------------------------------------------------------------------------

namespace {
std::string join_range(const std::vector<std::string>& s, size_t b, size_t e) {
  std::string out;
  for (size_t i = b; i < e; ++i) {
    if (i > b) out += ' ';
    out += s[i];
  }
  return out;
}

}  // namespace

int64_t kamradt_insertion(const std::vector<std::string>& sentences, double depth, const TokenCounter& counter) {
  const int64_t n = static_cast<int64_t>(sentences.size());
  if (depth >= 100.0) return n;
  const int64_t total = counter(join_range(sentences, 0, sentences.size()));
  const auto target = static_cast<int64_t>(std::floor(total * depth / 100.0));
  // Largest i in [0, n] whose prefix fits in `target` tokens: the needle then starts right after a
  // sentence end at or before the requested depth, as LLMNeedleHaystackTester backs up to a period.
  int64_t lo = 0, hi = n + 1;  // prefix(lo) ≤ target (or lo = 0), prefix(hi) > target
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (counter(join_range(sentences, 0, static_cast<size_t>(mid))) <= target) lo = mid;
    else hi = mid;
  }
  return lo;
}

KamradtSample make_kamradt_sample(int64_t length, double depth, uint64_t seed, int64_t trial, const EssayText& essay,
                                  const TokenCounter& counter, const NiahOptions& opt, int64_t* hint,
                                  const std::string& length_flag) {
  if (essay.words.empty()) fail("needle grid: needs an essay haystack, but none was loaded");
  KamradtSample out;
  out.length = length;
  out.depth = depth;
  out.trial = trial;
  out.seed = derive_seed(seed, {stable_hash("kamradt"), static_cast<uint64_t>(length),
                                static_cast<uint64_t>(std::llround(depth * 1000)), static_cast<uint64_t>(trial)});
  std::mt19937_64 rng(out.seed);
  out.key = draw_needle_item(rng, NeedleKind::words);
  out.value = draw_needle_item(rng, NeedleKind::numbers);
  out.needle = niah_needle(NeedleKind::numbers, out.key, out.value);
  out.essay_start = opt.random_excerpt ? essay.sentence_starts[draw_below(rng, essay.sentence_starts.size())] : 0;
  const std::vector<std::string> query = {out.key};
  auto prompt_for = [&](const std::vector<std::string>& sents, int64_t at) {
    std::string ctx = join_range(sents, 0, at);
    ctx += (ctx.empty() ? "" : " ") + out.needle;
    if (at < static_cast<int64_t>(sents.size())) ctx += " " + join_range(sents, at, sents.size());
    return niah_prompt(NeedleKind::numbers, ctx, query, 1);
  };
  const int64_t budget = length - opt.max_new_tokens;
  // Size with the needle at the end (one count per step); its position hardly changes the token count,
  // and the placed prompt is checked below.
  auto tokens_at = [&](int64_t units) {
    const auto sents = essay_sentences(essay, out.essay_start, units);
    return counter(prompt_for(sents, static_cast<int64_t>(sents.size())));
  };
  auto fits = [&](int64_t units) { return tokens_at(units) <= budget; };
  if (!fits(1))
    fail("{}: {} tokens cannot hold a needle prompt: the template, the needle and one haystack word take {} tokens, "
         "plus {} generated tokens",
         length_flag, length, tokens_at(1), opt.max_new_tokens);
  int64_t units = largest_fitting(fits, hint && *hint > 0 ? *hint : estimate_units(tokens_at, budget),
                                  fmt::format("{} {}", length_flag, length));
  if (hint) *hint = units;
  for (;; --units) {
    const auto sents = essay_sentences(essay, out.essay_start, units);
    const int64_t at = kamradt_insertion(sents, depth, counter);
    std::string prompt = prompt_for(sents, at);
    const int64_t tokens = counter(prompt);
    if (tokens <= budget || units == 1) {
      const int64_t total = counter(join_range(sents, 0, sents.size()));
      out.actual_depth = at == static_cast<int64_t>(sents.size()) || total == 0
                             ? 100.0
                             : 100.0 * counter(join_range(sents, 0, at)) / total;
      out.sentences_before = at;
      out.haystack_units = units;
      out.prompt = std::move(prompt);
      out.prompt_tokens = tokens;
      return out;
    }
  }
}

}  // namespace drope::tasks
