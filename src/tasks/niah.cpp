// Needle-in-a-haystack prompts and scoring (SPEC.md §5.2). The task facts (needle sentence, template,
// answer prefix, singular rewrite, presets, depth grid, string_match_all) follow RULER's
// scripts/data/synthetic/niah.py, constants.py and synthetic.yaml; the code is our own.
#include "drope/tasks/niah.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <set>

#include <fmt/format.h>

#include "drope/core/error.h"
#include "drope/core/files.h"
#include "drope/text/tokenizer.h"

namespace drope::tasks {

namespace fs = std::filesystem;

// ---- tasks ------------------------------------------------------------------------------------------

const std::vector<NiahTask>& niah_tasks() {
  // RULER's synthetic.yaml. multikey_2/3 keep num_needle_k = 1 as RULER does: their haystack is made of
  // distractor needles, which supply the other keys. multiquery has 4 keys because RULER raises
  // num_needle_k to num_needle_q.
  static const std::vector<NiahTask> tasks = {
      {"single_1", Haystack::noise, NeedleKind::words, NeedleKind::numbers, 1, 1, 1},
      {"single_2", Haystack::essay, NeedleKind::words, NeedleKind::numbers, 1, 1, 1},
      {"single_3", Haystack::essay, NeedleKind::words, NeedleKind::uuids, 1, 1, 1},
      {"multikey_1", Haystack::essay, NeedleKind::words, NeedleKind::numbers, 4, 1, 1},
      {"multikey_2", Haystack::needle, NeedleKind::words, NeedleKind::numbers, 1, 1, 1},
      {"multikey_3", Haystack::needle, NeedleKind::uuids, NeedleKind::uuids, 1, 1, 1},
      {"multivalue", Haystack::essay, NeedleKind::words, NeedleKind::numbers, 1, 4, 1},
      {"multiquery", Haystack::essay, NeedleKind::words, NeedleKind::numbers, 4, 1, 4},
  };
  return tasks;
}

namespace {

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

std::vector<std::string> split_list(const std::string& list) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (true) {
    const size_t comma = list.find(',', pos);
    out.push_back(trim(list.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos)));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

}  // namespace

std::vector<NiahTask> parse_niah_tasks(const std::string& list, const std::string& flag) {
  const auto& all = niah_tasks();
  std::string known = "all, paper";
  for (const auto& t : all) known += ", " + t.name;
  std::vector<NiahTask> out;
  auto add = [&](const std::string& name) {
    for (const auto& t : out)
      if (t.name == name) return;
    for (const auto& t : all)
      if (t.name == name) out.push_back(t);
  };
  for (std::string name : split_list(list)) {
    if (name.empty()) fail("{}: empty task name in '{}' (known: {})", flag, list, known);
    if (name.rfind("niah_", 0) == 0) name = name.substr(5);
    if (name == "all") {
      for (const auto& t : all) add(t.name);
    } else if (name == "paper") {
      for (const char* n : {"multiquery", "multikey_1", "multivalue"}) add(n);
    } else if (std::any_of(all.begin(), all.end(), [&](const NiahTask& t) { return t.name == name; })) {
      add(name);
    } else {
      fail("{}: unknown NIAH task '{}' (known: {})", flag, name, known);
    }
  }
  return out;
}

std::string to_string(Haystack h) {
  switch (h) {
    case Haystack::noise: return "noise";
    case Haystack::essay: return "essay";
    case Haystack::needle: return "needle";
  }
  return "?";
}

std::string to_string(NeedleKind k) {
  switch (k) {
    case NeedleKind::words: return "words";
    case NeedleKind::numbers: return "numbers";
    case NeedleKind::uuids: return "uuids";
  }
  return "?";
}

// ---- text pieces --------------------------------------------------------------------------------------

const char* const kNoiseUnit =
    "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.";
const char* const kDefaultHaystack = "/usr/share/common-licenses";

namespace {

// RULER's constants.py: the niah template and its answer prefix, concatenated as prepare.py does.
const char* const kTemplate =
    "Some special magic {type_needle_v} are hidden within the following text. Make sure to memorize it. "
    "I will quiz you about the {type_needle_v} afterwards.\n{context}\nWhat are all the special magic "
    "{type_needle_v} for {query} mentioned in the provided text?";
const char* const kAnswerPrefix = " The special magic {type_needle_v} for {query} mentioned in the provided text are";

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  size_t pos = 0;
  while ((pos = s.find(from, pos)) != std::string::npos) {
    s.replace(pos, from.size(), to);
    pos += to.size();
  }
  return s;
}

// Fills {type_needle_v}, {context} and {query} in one pass over the template, so braces inside the
// substituted text are never re-interpreted (Python's str.format has the same property).
std::string fill_template(std::string tmpl, NeedleKind kind, const std::string& context,
                          const std::vector<std::string>& keys, int64_t values_asked) {
  std::string type = to_string(kind);
  if (values_asked == 1) {
    // RULER's singular rewrite, applied to the template before formatting, in RULER's order.
    tmpl = replace_all(tmpl, "Some", "A");
    tmpl = replace_all(tmpl, "are all", "is");
    tmpl = replace_all(tmpl, "are", "is");
    tmpl = replace_all(tmpl, "answers", "answer");
    type.pop_back();
  }
  const std::string query = join_query_keys(keys);
  std::string out;
  out.reserve(tmpl.size() + context.size() + 64);
  for (size_t i = 0; i < tmpl.size();) {
    if (tmpl[i] == '{') {
      const size_t close = tmpl.find('}', i);
      const std::string name = tmpl.substr(i + 1, close - i - 1);
      if (name == "type_needle_v") out += type;
      else if (name == "context") out += context;
      else if (name == "query") out += query;
      else fail("niah template: unknown placeholder {{{}}}", name);
      i = close + 1;
    } else {
      out += tmpl[i++];
    }
  }
  return out;
}

}  // namespace

std::string niah_needle(NeedleKind value_kind, const std::string& key, const std::string& value) {
  return "One of the special magic " + to_string(value_kind) + " for " + key + " is: " + value + ".";
}

std::string join_query_keys(const std::vector<std::string>& keys) {
  if (keys.empty()) return "";
  if (keys.size() == 1) return keys[0];
  std::string out;
  for (size_t i = 0; i + 1 < keys.size(); ++i) out += keys[i] + ", ";
  return out + "and " + keys.back();
}

std::string niah_prompt(NeedleKind value_kind, const std::string& context, const std::vector<std::string>& query_keys,
                        int64_t values_asked) {
  return fill_template(std::string(kTemplate) + kAnswerPrefix, value_kind, context, query_keys, values_asked);
}

std::string niah_answer_prefix(NeedleKind value_kind, const std::vector<std::string>& query_keys,
                               int64_t values_asked) {
  return fill_template(kAnswerPrefix, value_kind, "", query_keys, values_asked);
}

std::string niah_question(NeedleKind value_kind, const std::vector<std::string>& query_keys, int64_t values_asked) {
  const std::string tmpl(kTemplate);
  const std::string after = tmpl.substr(tmpl.find("{context}") + std::string("{context}").size());
  return fill_template(after + kAnswerPrefix, value_kind, "", query_keys, values_asked);
}

// ---- randomness -----------------------------------------------------------------------------------------

uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t derive_seed(uint64_t seed, std::initializer_list<uint64_t> parts) {
  uint64_t h = mix64(seed);
  for (uint64_t p : parts) h = mix64(h ^ mix64(p));
  return h;
}

uint64_t stable_hash(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a 64-bit offset basis
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ULL;  // FNV prime
  return h;
}

uint64_t draw_below(std::mt19937_64& rng, uint64_t n) {
  if (n == 0) fail("draw_below: empty range");
  // Reject the top partial block of 2^64 so every residue is equally likely.
  const uint64_t limit = std::numeric_limits<uint64_t>::max() - std::numeric_limits<uint64_t>::max() % n;
  uint64_t x;
  do x = rng();
  while (x >= limit);
  return x % n;
}

double draw_unit(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

std::string draw_needle_item(std::mt19937_64& rng, NeedleKind kind) {
  switch (kind) {
    case NeedleKind::numbers: return std::to_string(1000000 + draw_below(rng, 9000000));
    case NeedleKind::words: {
      const auto& adj = niah_adjectives();
      const auto& noun = niah_nouns();
      const std::string a = adj[draw_below(rng, adj.size())];
      return a + "-" + noun[draw_below(rng, noun.size())];
    }
    case NeedleKind::uuids: {
      uint64_t hi = rng(), lo = rng();
      hi = (hi & ~0xf000ULL) | 0x4000ULL;                     // version 4 (bits 76..79 of the 128)
      lo = (lo & ~(0xc000ULL << 48)) | (0x8000ULL << 48);     // RFC 4122 variant 10xx
      return fmt::format("{:08x}-{:04x}-{:04x}-{:04x}-{:012x}", hi >> 32, (hi >> 16) & 0xffff, hi & 0xffff, lo >> 48,
                         lo & 0xffffffffffffULL);
    }
  }
  return "";
}

// ---- essay haystack ---------------------------------------------------------------------------------

namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

// Strips closing quotes/brackets (ASCII and the UTF-8 ” ’ ») from the end of a word.
std::string strip_closers(std::string w) {
  while (!w.empty()) {
    const char c = w.back();
    if (c == ')' || c == ']' || c == '"' || c == '\'') {
      w.pop_back();
    } else if (w.size() >= 3 && (w.compare(w.size() - 3, 3, "\xe2\x80\x9d") == 0 ||
                                 w.compare(w.size() - 3, 3, "\xe2\x80\x99") == 0)) {
      w.resize(w.size() - 3);
    } else if (w.size() >= 2 && w.compare(w.size() - 2, 2, "\xc2\xbb") == 0) {
      w.resize(w.size() - 2);
    } else {
      break;
    }
  }
  return w;
}

bool is_abbreviation(const std::string& core_with_dot) {
  // core_with_dot ends in '.'; look at what precedes it.
  std::string core = core_with_dot.substr(0, core_with_dot.size() - 1);
  while (!core.empty() && (core.front() == '(' || core.front() == '[' || core.front() == '"' || core.front() == '\''))
    core.erase(core.begin());
  if (core.empty()) return false;
  std::string lower;
  for (char c : core) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  static const std::set<std::string> known = {"mr", "mrs", "ms", "dr", "prof", "sr", "jr", "st", "vs", "inc",
                                              "ltd", "co", "corp", "no", "nos", "fig", "figs", "al", "cf",
                                              "approx", "dept", "vol", "p", "pp", "sec", "art", "ch", "e.g",
                                              "i.e", "resp", "incl", "esp", "ca", "viz"};
  if (known.count(lower)) return true;
  // Single-letter initials ("J.") and dotted letter abbreviations ("U.S.", "a.m.").
  bool letters_and_dots = true, alternating = true;
  for (size_t i = 0; i < lower.size(); ++i) {
    const bool letter = lower[i] >= 'a' && lower[i] <= 'z';
    if (!letter && lower[i] != '.') letters_and_dots = false;
    if ((i % 2 == 0) != letter) alternating = false;
  }
  if (letters_and_dots && alternating) return true;
  return false;
}

// A bare enumerator ("1.", "2.3.") — a list label when it starts a line, not a sentence end.
bool is_enumerator(const std::string& core_with_dot) {
  return std::all_of(core_with_dot.begin(), core_with_dot.end(), [](char c) { return (c >= '0' && c <= '9') || c == '.'; });
}

bool ends_with_terminal(const std::string& w) {
  if (w.empty()) return false;
  const char c = w.back();
  return c == '.' || c == '!' || c == '?';
}

// The first meaningful byte of the next word after opening quotes/brackets.
bool starts_lowercase(const std::string& w) {
  size_t i = 0;
  while (i < w.size()) {
    if (w[i] == '(' || w[i] == '[' || w[i] == '"' || w[i] == '\'') {
      ++i;
    } else if (w.compare(i, 3, "\xe2\x80\x9c") == 0 || w.compare(i, 3, "\xe2\x80\x98") == 0) {
      i += 3;
    } else {
      break;
    }
  }
  return i < w.size() && w[i] >= 'a' && w[i] <= 'z';
}

}  // namespace

EssayText make_essay(const std::string& text, const std::string& source) {
  if (const int64_t bad = text::utf8_error_offset(text); bad >= 0)
    fail("{}: not valid UTF-8 (byte offset {})", source, bad);
  EssayText e;
  e.source = source;
  std::vector<uint8_t> paragraph_after;  // the whitespace after word i holds a blank line
  std::vector<uint8_t> line_start;       // word i is the first on its line
  size_t i = 0;
  while (i < text.size()) {
    int newlines = 0;
    while (i < text.size() && is_space(text[i])) newlines += text[i++] == '\n';
    if (!e.words.empty() && newlines >= 2) paragraph_after.back() = 1;
    if (i >= text.size()) break;
    const size_t b = i;
    while (i < text.size() && !is_space(text[i])) ++i;
    line_start.push_back(e.words.empty() || newlines > 0);
    e.words.push_back(text.substr(b, i - b));
    paragraph_after.push_back(0);
  }
  if (e.words.empty()) fail("{}: no words (the haystack text is empty or only whitespace)", source);
  const size_t n = e.words.size();
  e.sentence_end.assign(n, 0);
  for (size_t w = 0; w < n; ++w) {
    if (w + 1 == n || paragraph_after[w]) {
      e.sentence_end[w] = 1;
      continue;
    }
    const std::string core = strip_closers(e.words[w]);
    if (!ends_with_terminal(core)) continue;
    if (core.back() == '.' && (is_abbreviation(core) || (line_start[w] && is_enumerator(core)))) continue;
    if (starts_lowercase(e.words[w + 1])) continue;
    e.sentence_end[w] = 1;
  }
  e.sentence_starts.push_back(0);
  for (size_t w = 0; w + 1 < n; ++w)
    if (e.sentence_end[w]) e.sentence_starts.push_back(static_cast<int64_t>(w + 1));
  return e;
}

EssayText load_essay(const std::string& path, const std::string& flag) {
  std::error_code ec;
  if (path.empty()) fail("{}: no haystack file given", flag);
  if (!fs::exists(path, ec)) fail("{}: haystack file {} not found", flag, path);
  std::string text;
  auto add_file = [&](const std::string& file) {
    std::string t = read_file(file);
    if (const int64_t bad = text::utf8_error_offset(t); bad >= 0)
      fail("{}: haystack file {} is not valid UTF-8 (byte offset {})", flag, file, bad);
    if (!text.empty()) text += "\n\n";
    text += t;
  };
  if (fs::is_directory(path, ec)) {
    std::vector<std::string> files;
    for (const auto& entry : fs::directory_iterator(path, ec))
      if (!entry.is_symlink() && entry.is_regular_file()) files.push_back(entry.path().string());
    std::sort(files.begin(), files.end());
    if (files.empty()) fail("{}: haystack directory {} holds no regular files", flag, path);
    for (const auto& f : files) add_file(f);
  } else {
    add_file(path);
  }
  if (trim(text).empty()) fail("{}: haystack file {} is empty (no words)", flag, path);
  return make_essay(text, path);
}

std::vector<std::string> essay_sentences(const EssayText& essay, int64_t start, int64_t n) {
  std::vector<std::string> out;
  const int64_t total = static_cast<int64_t>(essay.words.size());
  std::string cur;
  for (int64_t j = 0; j < n; ++j) {
    const int64_t idx = (start + j) % total;
    if (!cur.empty()) cur += ' ';
    cur += essay.words[idx];
    if (essay.sentence_end[idx] || j + 1 == n) {
      out.push_back(std::move(cur));
      cur.clear();
    }
  }
  return out;
}

std::vector<std::string> split_sentences(const std::string& text) {
  const EssayText e = make_essay(text, "text");
  return essay_sentences(e, 0, static_cast<int64_t>(e.words.size()));
}

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

constexpr int64_t kMaxUnits = int64_t{1} << 22;

// The largest n ≥ 1 with fits(n), given fits(1): gallops from `hint` then bisects.
int64_t largest_fitting(const std::function<bool(int64_t)>& fits, int64_t hint, const std::string& what) {
  int64_t lo = 1, hi = -1;  // fits(lo), !fits(hi)
  if (hint > 1) {
    if (fits(hint)) lo = hint;
    else hi = hint;
  }
  if (hi < 0) {
    for (int64_t step = 1;; step *= 2) {
      const int64_t cand = lo + step;
      if (cand > kMaxUnits) fail("{}: more than {} haystack units still fit; is the token counter broken?", what, kMaxUnits);
      if (fits(cand)) lo = cand;
      else {
        hi = cand;
        break;
      }
    }
  } else {
    for (int64_t step = 1;; step *= 2) {
      const int64_t cand = hi - step;
      if (cand <= lo) break;
      if (fits(cand)) {
        lo = cand;
        break;
      }
      hi = cand;
    }
  }
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (fits(mid)) lo = mid;
    else hi = mid;
  }
  return lo;
}

uint64_t sample_seed(const NiahTask& task, int64_t length, uint64_t seed, int64_t trial) {
  return derive_seed(seed, {stable_hash("niah/" + task.name), static_cast<uint64_t>(length), static_cast<uint64_t>(trial)});
}

NiahSample finish_sample(const NiahTask& task, int64_t length, int64_t trial, uint64_t s, const Draws& d,
                         std::string prompt, int64_t units, std::vector<int64_t> positions, const TokenCounter& counter) {
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

// Starting point for the search when no hint is known: extrapolate the tokens per unit from 0 and 64 units.
int64_t estimate_units(const std::function<int64_t(int64_t)>& tokens_at, int64_t budget) {
  const int64_t base = tokens_at(0), at64 = tokens_at(64);
  const double per = std::max(1e-3, (at64 - base) / 64.0);
  return std::max<int64_t>(1, static_cast<int64_t>((budget - base) / per));
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

NiahSample make_niah_sample(const NiahTask& task, int64_t length, uint64_t seed, int64_t trial,
                            const EssayText& essay, const TokenCounter& counter, const NiahOptions& opt,
                            int64_t* hint, const std::string& length_flag) {
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
                                          const EssayText& essay, const TokenCounter& counter,
                                          const NiahOptions& opt) {
  if (trials <= 0) fail("--trials: must be positive, got {}", trials);
  std::vector<NiahSample> out;
  int64_t hint = 0;
  for (int64_t t = 0; t < trials; ++t) out.push_back(make_niah_sample(task, length, seed, t, essay, counter, opt, &hint));
  return out;
}

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

// ---- scoring ------------------------------------------------------------------------------------------

std::string niah_postprocess(const std::string& output) {
  std::string s = trim(output);
  for (char& c : s)
    if (static_cast<unsigned char>(c) < 0x20) c = '\n';
  return trim(s);
}

double string_match_all(const std::string& output, const std::vector<std::string>& expected) {
  if (expected.empty()) return 0.0;
  auto lower = [](std::string s) {
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
  };
  const std::string out = lower(output);
  int found = 0;
  for (const auto& e : expected) found += out.find(lower(e)) != std::string::npos;
  return 100.0 * found / static_cast<double>(expected.size());
}

// ---- parsers ------------------------------------------------------------------------------------------

std::vector<int64_t> parse_int_list(const std::string& list, const std::string& flag) {
  std::vector<int64_t> out;
  for (const auto& item : split_list(list)) {
    int64_t v = 0;
    const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (item.empty() || ec != std::errc() || end != item.data() + item.size() || v <= 0)
      fail("{}: '{}' is not a positive integer (in '{}')", flag, item, list);
    out.push_back(v);
  }
  return out;
}

std::vector<double> parse_depth_list(const std::string& list, const std::string& flag) {
  std::vector<double> out;
  for (const auto& item : split_list(list)) {
    char* end = nullptr;
    const double v = item.empty() ? NAN : std::strtod(item.c_str(), &end);
    if (item.empty() || end != item.c_str() + item.size() || !(v >= 0.0 && v <= 100.0))
      fail("{}: '{}' is not a depth in [0, 100] percent (in '{}')", flag, item, list);
    out.push_back(v);
  }
  return out;
}

}  // namespace drope::tasks
