// Needle-in-a-haystack prompts (docs/design.md#needle-in-a-haystack): RULER's NIAH tasks (single,
// multi-key, multi-value, multi-query over noise / essay / distractor-needle haystacks) and a Kamradt-style
// length × depth grid, with contexts sized by search on the number of haystack units to fit a token budget,
// and RULER's string_match_all score. Torch-free: tokens are counted through a callback, so the same code serves a
// real tokenizer in drope-eval and a whitespace counter in tests.
//
// Determinism: every random choice comes from std::mt19937_64 (its output is fixed by the C++ standard)
// seeded by an explicit splitmix64 derivation of (seed, task, length, trial), and bounded draws are our
// own (the std::uniform_*_distribution algorithms are implementation-defined). The same seed gives the
// same prompts on every platform and standard library.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

namespace drope::tasks {

// ---- task definitions (RULER scripts/synthetic.yaml) ------------------------------------------------

enum class Haystack { noise, essay, needle };       // RULER's type_haystack
enum class NeedleKind { words, numbers, uuids };    // RULER's type_needle_k / type_needle_v

struct NiahTask {
  std::string name;         // "single_1", ... (RULER's niah_<name>)
  Haystack haystack = Haystack::essay;
  NeedleKind key_kind = NeedleKind::words;
  NeedleKind value_kind = NeedleKind::numbers;
  int num_keys = 1;         // needles with distinct keys (RULER: max(num_needle_k, num_needle_q))
  int num_values = 1;       // values per key
  int num_queries = 1;      // keys asked about
};

// RULER's eight NIAH presets: single_1 (noise, numbers), single_2 (essay, numbers), single_3 (essay,
// uuids), multikey_1 (essay, 4 keys, 1 asked), multikey_2 (distractor-needle haystack, word keys),
// multikey_3 (distractor-needle haystack, uuid keys and values), multivalue (1 key, 4 values),
// multiquery (4 keys, all asked).
const std::vector<NiahTask>& niah_tasks();

// Comma-separated names ("niah_" prefix optional), "all" (the eight) or "paper" (multiquery,
// multikey_1, multivalue: the paper's Table 1). Unknown or empty names fail naming `flag` and listing
// the known ones; duplicates are dropped, the order kept.
std::vector<NiahTask> parse_niah_tasks(const std::string& list, const std::string& flag = "--tasks");

std::string to_string(Haystack h);
std::string to_string(NeedleKind k);  // "words" | "numbers" | "uuids" (the plural used in the templates)

// ---- text pieces --------------------------------------------------------------------------------------

// RULER's noise haystack unit.
extern const char* const kNoiseUnit;

// `One of the special magic {kind} for {key} is: {value}.` (kind always plural, as RULER writes it).
std::string niah_needle(NeedleKind value_kind, const std::string& key, const std::string& value);

// Query keys as RULER writes them: "a", "a, and b", "a, b, and c" (Oxford comma, also for two keys).
std::string join_query_keys(const std::vector<std::string>& keys);

// The full prompt: RULER's template followed by its answer prefix, rewritten to the singular
// (Some→A, "are all"→is, are→is, answers→answer, kind loses its plural s) when exactly one value is
// asked (`values_asked` == 1). The model continues after "... mentioned in the provided text are/is".
std::string niah_prompt(NeedleKind value_kind, const std::string& context, const std::vector<std::string>& query_keys,
                        int64_t values_asked);

// The answer prefix alone (the prompt's tail), singular or plural like niah_prompt.
std::string niah_answer_prefix(NeedleKind value_kind, const std::vector<std::string>& query_keys, int64_t values_asked);

// The prompt after the context: the question and its answer prefix ("\nWhat is the special magic number
// for {key} mentioned in the provided text? The special magic number for {key} ... is" when one value is
// asked), for callers that assemble the context themselves (drope-analyze needle-attention).
std::string niah_question(NeedleKind value_kind, const std::vector<std::string>& query_keys, int64_t values_asked);

// Word lists for `adjective-noun` keys (written for this project; lowercase ASCII letters, distinct).
const std::vector<std::string>& niah_adjectives();
const std::vector<std::string>& niah_nouns();

// ---- randomness -----------------------------------------------------------------------------------------

// splitmix64's finaliser: a bijective 64-bit mix used to derive independent seeds.
uint64_t mix64(uint64_t x);
// Seed for one sample/stream: a chain of mix64 over the parts.
uint64_t derive_seed(uint64_t seed, std::initializer_list<uint64_t> parts);
// FNV-1a of a string (stable across platforms, unlike std::hash).
uint64_t stable_hash(const std::string& s);
// Uniform integer in [0, n) by rejection (no modulo bias); n > 0.
uint64_t draw_below(std::mt19937_64& rng, uint64_t n);
// Uniform double in [0, 1) from the top 53 bits.
double draw_unit(std::mt19937_64& rng);
// A random needle key or value: `adjective-noun`, a 7-digit number in [1000000, 9999999], or a
// version-4 UUID (lowercase 8-4-4-4-12, RFC 4122 variant bits, as Python's uuid.UUID(int=..., version=4)).
std::string draw_needle_item(std::mt19937_64& rng, NeedleKind kind);

// ---- essay haystack ---------------------------------------------------------------------------------

// Real prose as whitespace-separated words (RULER's essay unit is a word) with sentence boundaries
// found once over the whole text, so any excerpt splits the same way. The text is used circularly: an
// excerpt longer than the text wraps to its beginning (RULER repeats the essay).
struct EssayText {
  std::string source;                 // file or directory it came from (messages, results)
  std::vector<std::string> words;
  std::vector<uint8_t> sentence_end;  // word i ends a sentence (the last word always does)
  std::vector<int64_t> sentence_starts;  // word indices where sentences begin (0 first)
};

// Splits `text` into words and sentences. A word ends a sentence when it ends in . ! or ? (closing
// quotes/brackets allowed after it), is not a common abbreviation (Mr., e.g., Inc., ...), a single-letter
// initial or a bare enumerator starting a line ("1.", "2.3."), and the next word does not start with a
// lowercase letter; a blank line (paragraph break) also ends a sentence. Fails naming `source` when the text is not
// UTF-8 or holds no words.
EssayText make_essay(const std::string& text, const std::string& source);

// Largest haystack load_essay reads (all its files together): 64 MiB, about 16M words, more text than the
// longest prompt (4M tokens) uses, since excerpts wrap around. The text is split into words whole, at several
// times its size in memory, so a larger one is refused from the file sizes before anything is read.
inline constexpr uint64_t kMaxEssayBytes = uint64_t{64} << 20;

// Reads a text file, or every regular file (not symlinks) of a directory in name order, concatenated
// with blank lines. Fails naming `flag` and the path: missing, empty, larger than kMaxEssayBytes, not UTF-8,
// no words.
EssayText load_essay(const std::string& path, const std::string& flag = "--haystack");

// The default haystack: /usr/share/common-licenses (real prose on every Debian system).
extern const char* const kDefaultHaystack;

// Sentences of the excerpt of `n` words starting at word `start` (circular); the last one may be cut.
std::vector<std::string> essay_sentences(const EssayText& essay, int64_t start, int64_t n);

// Plain sentence splitting of a text with the rules of make_essay (for inspection and tests).
std::vector<std::string> split_sentences(const std::string& text);

// ---- samples ------------------------------------------------------------------------------------------

using TokenCounter = std::function<int64_t(const std::string&)>;

struct NiahOptions {
  int64_t max_new_tokens = 128;  // generation budget: prompt tokens + this ≤ target length
  bool random_excerpt = true;    // essay excerpt starts at a random sentence (paper: "a random excerpt");
                                 // false = at the text's beginning (RULER)
};

struct NiahSample {
  std::string task;
  int64_t length = 0;        // target length (prompt + generation) in tokens
  int64_t trial = 0;
  uint64_t seed = 0;         // the derived per-sample seed
  std::string prompt;        // template + context + question + answer prefix: what the model continues
  std::vector<std::string> keys;      // every inserted key
  std::vector<std::string> needles;   // the inserted needle sentences, in context order
  std::vector<double> depths;         // per needle (context order): depth in % of the haystack
  std::vector<int64_t> positions;     // per needle: haystack units (noise/needle) or sentences (essay) before it
  std::vector<std::string> queries;   // keys asked about, in question order
  std::vector<std::string> expected;  // values to find (all values of the asked keys)
  int64_t haystack_units = 0;         // units used: words (essay), noise paragraphs, distractor needles
  int64_t essay_start = 0;            // first word of the essay excerpt
  int64_t prompt_tokens = 0;          // counter(prompt)
};

// One sample of `task` sized for `length`: the keys, values, depths and excerpt are drawn first from a
// seed derived from (seed, task, length, trial); then the number of haystack units is the largest with
// counter(prompt) + max_new_tokens ≤ length (galloping + binary search, starting from `*hint` when given;
// the result is stored back so consecutive samples search little). Fails naming `length_flag` when not
// even one haystack unit fits.
NiahSample make_niah_sample(const NiahTask& task, int64_t length, uint64_t seed, int64_t trial, const EssayText& essay,
                            const TokenCounter& counter, const NiahOptions& opt = {}, int64_t* hint = nullptr,
                            const std::string& length_flag = "--lengths");

// The same sample (same draws) with exactly `units` haystack units, no sizing (tests of the search;
// prompt_tokens is still filled in).
NiahSample make_niah_sample_with_units(const NiahTask& task, int64_t length, uint64_t seed, int64_t trial,
                                       const EssayText& essay, const TokenCounter& counter, const NiahOptions& opt,
                                       int64_t units);

// `trials` samples for one task and length (trial = 0..trials-1).
std::vector<NiahSample> make_niah_samples(const NiahTask& task, int64_t length, int64_t trials, uint64_t seed,
                                          const EssayText& essay, const TokenCounter& counter,
                                          const NiahOptions& opt = {});

// ---- Kamradt grid -----------------------------------------------------------------------------------

// One needle (`One of the special magic numbers for {adjective-noun} is: {7 digits}.`) in an essay
// excerpt sized like the RULER tasks, asked with RULER's singular template ("What is the special magic
// number for {key} mentioned in the provided text? ... is"). The needle goes where
// LLMNeedleHaystackTester puts it: at `depth`% of the haystack's tokens, backed up to the previous
// sentence end (depth 100 = after the last word).
struct KamradtSample {
  int64_t length = 0;
  double depth = 0;           // requested depth, %
  double actual_depth = 0;    // tokens before the needle / haystack tokens, %
  int64_t trial = 0;
  uint64_t seed = 0;
  std::string prompt, key, value, needle;
  int64_t sentences_before = 0;  // haystack sentences before the needle
  int64_t haystack_units = 0;    // words
  int64_t essay_start = 0;
  int64_t prompt_tokens = 0;
};

// The number of leading sentences after which the needle goes: the largest i with
// counter(sentences[0..i) joined by spaces) ≤ floor(depth/100 · counter(all sentences joined)).
int64_t kamradt_insertion(const std::vector<std::string>& sentences, double depth, const TokenCounter& counter);

KamradtSample make_kamradt_sample(int64_t length, double depth, uint64_t seed, int64_t trial, const EssayText& essay,
                                  const TokenCounter& counter, const NiahOptions& opt = {}, int64_t* hint = nullptr,
                                  const std::string& length_flag = "--lengths");

// ---- scoring ------------------------------------------------------------------------------------------

// RULER's postprocess_pred: strip, control characters (U+0000..U+001F) → '\n', strip.
std::string niah_postprocess(const std::string& output);

// RULER's string_match_all for one sample: 100 × (number of `expected` values found in `output`,
// ASCII-case-insensitively) / expected.size(). Expected values are ASCII (numbers, words, uuids).
double string_match_all(const std::string& output, const std::vector<std::string>& expected);

// ---- small parsers shared by the CLI ------------------------------------------------------------------

// "512,1024" → {512, 1024}: positive integers; fails naming `flag`.
std::vector<int64_t> parse_int_list(const std::string& list, const std::string& flag);
// "0,10,50,100" → depths in [0, 100]; fails naming `flag`.
std::vector<double> parse_depth_list(const std::string& list, const std::string& flag);

}  // namespace drope::tasks
