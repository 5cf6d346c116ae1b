// NIAH samples (RULER's tasks): the per-sample draws (keys, values, depths, excerpt), the context for a
// given number of haystack units with the needles inserted, and sizing to a token budget.
#include "drope/tasks/niah.h"

#include <algorithm>
#include <cmath>
#include <set>

#include <fmt/format.h>

#include "drope/core/error.h"
#include "niah_internal.h"

namespace drope::tasks {

using niah_detail::estimate_units;
using niah_detail::largest_fitting;

// ---- samples ------------------------------------------------------------------------------------------

namespace {

// RULER's depth grid: np.round(np.linspace(0, 100, 40)).astype(int) (numpy rounds half to even).
const std::vector<int>& ruler_depths() {
  static const std::vector<int> grid = [] {
    std::vector<int> g;
    for (int i = 0; i < 40; ++i) g.push_back(static_cast<int>(std::nearbyint(100.0 * i / 39.0)));
    return g;
  }();
  return grid;
}

// Everything a sample draws before sizing; the prompt is then a pure function of the unit count.
struct Draws {
  std::vector<std::string> keys;
  std::vector<std::vector<std::string>> values;           // per key
  std::vector<std::pair<int, int>> needle_order;           // (key, value) per needle, in depth order
  std::vector<double> depths;                             // ascending, percent
  std::vector<int> query_keys;
  int64_t essay_start = 0;
  uint64_t distractor_seed = 0;
  std::set<std::string> used;                             // keys and values (distractors avoid them)
};

std::string draw_distinct(std::mt19937_64& rng, NeedleKind kind, std::set<std::string>& used) {
  while (true) {
    std::string s = draw_needle_item(rng, kind);
    if (used.insert(s).second) return s;
  }
}

template <typename T>
void shuffle(std::vector<T>& v, std::mt19937_64& rng) {
  for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[draw_below(rng, i)]);
}

Draws draw(const NiahTask& task, uint64_t sample_seed, const EssayText& essay, const NiahOptions& opt) {
  if (task.haystack == Haystack::essay && essay.words.empty())
    fail("niah_{}: needs an essay haystack, but none was loaded", task.name);
  std::mt19937_64 rng(sample_seed);
  Draws d;
  for (int k = 0; k < task.num_keys; ++k) {
    d.keys.push_back(draw_distinct(rng, task.key_kind, d.used));
    d.values.emplace_back();
    for (int v = 0; v < task.num_values; ++v) d.values.back().push_back(draw_distinct(rng, task.value_kind, d.used));
  }
  for (int k = 0; k < task.num_keys; ++k)
    for (int v = 0; v < task.num_values; ++v) d.needle_order.emplace_back(k, v);
  shuffle(d.needle_order, rng);
  const size_t needles = d.needle_order.size();
  if (task.haystack == Haystack::essay) {
    // RULER: random.sample(DEPTHS, #needles), sorted — distinct depths from the 40-point grid.
    std::vector<int> grid = ruler_depths();
    for (size_t i = 0; i < needles && i < grid.size(); ++i) {
      std::swap(grid[i], grid[i + draw_below(rng, grid.size() - i)]);
      d.depths.push_back(grid[i]);
    }
  } else {
    // RULER samples distinct unit indices uniformly; drawing a uniform depth per needle keeps the prompt a
    // function of the unit count (index = floor(depth · units)).
    for (size_t i = 0; i < needles; ++i) d.depths.push_back(100.0 * draw_unit(rng));
  }
  std::sort(d.depths.begin(), d.depths.end());
  std::vector<int> idx(task.num_keys);
  for (int k = 0; k < task.num_keys; ++k) idx[k] = k;
  for (int q = 0; q < task.num_queries; ++q) {  // random.sample(range(k), q): a random subset in random order
    std::swap(idx[q], idx[q + draw_below(rng, idx.size() - q)]);
    d.query_keys.push_back(idx[q]);
  }
  if (task.haystack == Haystack::essay && opt.random_excerpt)
    d.essay_start = essay.sentence_starts[draw_below(rng, essay.sentence_starts.size())];
  d.distractor_seed = rng();
  return d;
}

int64_t index_at_depth(double depth, int64_t count) {
  return std::min<int64_t>(static_cast<int64_t>(std::floor(count * depth / 100.0)), std::max<int64_t>(count - 1, 0));
}

// The context for `units` haystack units, with the needles inserted; fills positions.
std::string build_context(const NiahTask& task, const Draws& d, const EssayText& essay, int64_t units,
                          std::vector<std::string>* distractor_cache, std::vector<int64_t>& positions) {
  std::vector<std::string> pieces;
  std::string sep = "\n";
  if (task.haystack == Haystack::essay) {
    pieces = essay_sentences(essay, d.essay_start, units);
    sep = " ";
  } else if (task.haystack == Haystack::noise) {
    pieces.assign(units, kNoiseUnit);
  } else {
    // Distractor needles, each from its own derived stream so that the first `units` never depend on
    // how many are requested; keys and values never repeat the real ones.
    auto& cache = *distractor_cache;
    while (static_cast<int64_t>(cache.size()) < units) {
      std::mt19937_64 rng(derive_seed(d.distractor_seed, {cache.size()}));
      std::string key, value;
      do key = draw_needle_item(rng, task.key_kind);
      while (d.used.count(key));
      do value = draw_needle_item(rng, task.value_kind);
      while (d.used.count(value));
      cache.push_back(niah_needle(task.value_kind, key, value));
    }
    pieces.assign(cache.begin(), cache.begin() + units);
  }
  const int64_t count = static_cast<int64_t>(pieces.size());
  positions.clear();
  for (double depth : d.depths)
    // Essay: RULER's int(len(sentences) * depth / 100) (the needle may follow the last sentence);
    // noise/needle: an index in [0, units) like random.sample(range(units)).
    positions.push_back(task.haystack == Haystack::essay ? static_cast<int64_t>(std::floor(count * depth / 100.0))
                                                         : index_at_depth(depth, count));
  std::string out;
  size_t next = 0;
  auto append = [&](const std::string& s) {
    if (!out.empty()) out += sep;
    out += s;
  };
  for (int64_t g = 0; g <= count; ++g) {
    while (next < positions.size() && positions[next] == g) {
      const auto [k, v] = d.needle_order[next++];
      append(niah_needle(task.value_kind, d.keys[k], d.values[k][v]));
    }
    if (g < count) append(pieces[g]);
  }
  return out;
}
uint64_t sample_seed(const NiahTask& task, int64_t length, uint64_t seed, int64_t trial) {
  return derive_seed(seed,
                     {stable_hash("niah/" + task.name), static_cast<uint64_t>(length), static_cast<uint64_t>(trial)});
}

NiahSample finish_sample(const NiahTask& task, int64_t length, int64_t trial, uint64_t s, const Draws& d,
                         std::string prompt, int64_t units, std::vector<int64_t> positions,
                         const TokenCounter& counter) {
  NiahSample out;
  out.task = task.name;
  out.length = length;
  out.trial = trial;
  out.seed = s;
  out.prompt = std::move(prompt);
  out.keys = d.keys;
  for (size_t i = 0; i < d.needle_order.size(); ++i) {
    const auto [k, v] = d.needle_order[i];
    out.needles.push_back(niah_needle(task.value_kind, d.keys[k], d.values[k][v]));
  }
  out.depths = d.depths;
  out.positions = std::move(positions);
  for (int q : d.query_keys) {
    out.queries.push_back(d.keys[q]);
    for (const auto& v : d.values[q]) out.expected.push_back(v);
  }
  out.haystack_units = units;
  out.essay_start = d.essay_start;
  out.prompt_tokens = counter(out.prompt);
  return out;
}

std::vector<std::string> query_names(const Draws& d) {
  std::vector<std::string> q;
  for (int k : d.query_keys) q.push_back(d.keys[k]);
  return q;
}

}  // namespace

NiahSample make_niah_sample_with_units(const NiahTask& task, int64_t length, uint64_t seed, int64_t trial,
                                       const EssayText& essay, const TokenCounter& counter, const NiahOptions& opt,
                                       int64_t units) {
  const uint64_t s = sample_seed(task, length, seed, trial);
  const Draws d = draw(task, s, essay, opt);
  std::vector<std::string> cache;
  std::vector<int64_t> positions;
  const int64_t asked = static_cast<int64_t>(task.num_queries) * task.num_values;
  std::string prompt =
      niah_prompt(task.value_kind, build_context(task, d, essay, units, &cache, positions), query_names(d), asked);
  return finish_sample(task, length, trial, s, d, std::move(prompt), units, std::move(positions), counter);
}

NiahSample make_niah_sample(const NiahTask& task, int64_t length, uint64_t seed, int64_t trial, const EssayText& essay,
                            const TokenCounter& counter, const NiahOptions& opt, int64_t* hint,
                            const std::string& length_flag) {
  const uint64_t s = sample_seed(task, length, seed, trial);
  const Draws d = draw(task, s, essay, opt);
  const int64_t asked = static_cast<int64_t>(task.num_queries) * task.num_values;
  const auto queries = query_names(d);
  std::vector<std::string> cache;
  std::vector<int64_t> positions;
  auto prompt_at = [&](int64_t units) {
    return niah_prompt(task.value_kind, build_context(task, d, essay, units, &cache, positions), queries, asked);
  };
  auto tokens_at = [&](int64_t units) { return counter(prompt_at(units)); };
  const int64_t budget = length - opt.max_new_tokens;
  auto fits = [&](int64_t units) { return tokens_at(units) <= budget; };
  if (!fits(1)) {
    fail("{}: {} tokens cannot hold a niah_{} prompt: the template, its needles and one haystack unit take {} tokens, "
         "plus {} generated tokens",
         length_flag, length, task.name, tokens_at(1), opt.max_new_tokens);
  }
  int64_t start = hint && *hint > 0 ? *hint : estimate_units(tokens_at, budget);
  const int64_t units = largest_fitting(fits, start, fmt::format("{} {}", length_flag, length));
  if (hint) *hint = units;
  std::string prompt = prompt_at(units);
  return finish_sample(task, length, trial, s, d, std::move(prompt), units, positions, counter);
}

std::vector<NiahSample> make_niah_samples(const NiahTask& task, int64_t length, int64_t trials, uint64_t seed,
                                          const EssayText& essay, const TokenCounter& counter, const NiahOptions& opt) {
  if (trials <= 0) fail("--trials: must be positive, got {}", trials);
  std::vector<NiahSample> out;
  int64_t hint = 0;
  for (int64_t t = 0; t < trials; ++t)
    out.push_back(make_niah_sample(task, length, seed, t, essay, counter, opt, &hint));
  return out;
}

}  // namespace drope::tasks
