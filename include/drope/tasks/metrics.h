// LongBench v1's metrics (LongBench/metrics.py), re-implemented so that every value equals what the
// official scorer computes with its pinned dependencies: `rouge` 1.0.1, `jieba` 0.42.1 and
// `fuzzywuzzy` 0.18.0 without python-Levenshtein (LongBench's requirements.txt lists neither
// python-Levenshtein nor fuzzywuzzy[speedup], so fuzz.ratio runs on difflib.SequenceMatcher).
// Strings are UTF-8 and are treated as Python str (code points, Python's lower()/isspace()/\b/\d).
// Torch-free.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace drope::tasks {

// --- Python str semantics -----------------------------------------------------------------------
std::string py_lower(std::string_view s);               // str.lower() (full Unicode case mapping)
std::vector<std::string> py_split(std::string_view s);  // str.split() with no separator

// --- the metric building blocks -----------------------------------------------------------------
// Lowercase, drop string.punctuation, drop the articles a/an/the, collapse whitespace.
std::string normalize_answer(std::string_view s);
// Lowercase, drop string.punctuation and metrics.py's Chinese punctuation list, drop all whitespace.
std::string normalize_zh_answer(std::string_view s);
// Token-multiset F1 (metrics.py f1_score); 0 when nothing is shared.
double f1_score(const std::vector<std::string>& prediction, const std::vector<std::string>& ground_truth);

// ROUGE-L F of `rouge` 1.0.1: Rouge().get_scores([hyp], [ref], avg=True)["rouge-l"]["f"]. Texts are
// split into sentences on '.', words are space-separated and counted as sets (the package's default
// exclusive=True), LCS is the package's union-LCS with its tie-breaking. Returns nullopt where the
// package raises: an empty hypothesis/reference (no sentence), or an LCS walk deeper than
// `max_recursion` nested `_recon` calls (CPython's recursion limit; see kRougeRecursion*).
std::optional<double> rouge_l(std::string_view hyp, std::string_view ref, int max_recursion = 1 << 30);

// `_recon` frames that fit under CPython's default recursion limit (1000) when eval.py runs the
// scorer: measured with CPython 3.11 through eval.py's scorer()/scorer_e(). rouge_zh_score adds a
// frame. Deeper walks raise RecursionError, which LongBench's bare `except:` turns into a 0 score.
inline constexpr int kRougeRecursionEn = 991;
inline constexpr int kRougeRecursionZh = 990;

// difflib.SequenceMatcher(None, a, b).ratio() with autojunk=True, over code points.
double sequence_matcher_ratio(std::u32string_view a, std::u32string_view b);
// fuzzywuzzy.fuzz.ratio: 100 for equal strings, 0 if either is empty, else round(100 * ratio).
int fuzz_ratio(std::string_view a, std::string_view b);

// --- LongBench's metric functions (prediction, ground truth) → [0, 1] ---------------------------
double qa_f1_score(std::string_view prediction, std::string_view ground_truth);
double qa_f1_zh_score(std::string_view prediction, std::string_view ground_truth);  // jieba tokens
double rouge_score(std::string_view prediction, std::string_view ground_truth);     // 0 where rouge raises
double rouge_zh_score(std::string_view prediction, std::string_view ground_truth);  // jieba, then rouge
double classification_score(std::string_view prediction, std::string_view ground_truth,
                            const std::vector<std::string>& all_classes);
// The paragraph number in the ground truth ("Paragraph N" / "段落N"); none there → drope::Error.
double retrieval_score(std::string_view prediction, std::string_view ground_truth);
double retrieval_zh_score(std::string_view prediction, std::string_view ground_truth);
double count_score(std::string_view prediction, std::string_view ground_truth);
// First line (after leading newlines) without '`', '#' or '//', fuzz.ratio / 100.
double code_sim_score(std::string_view prediction, std::string_view ground_truth);

}  // namespace drope::tasks
