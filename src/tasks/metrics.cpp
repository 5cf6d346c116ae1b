// LongBench's metrics with the exact semantics of metrics.py and the Python packages it calls. The
// comments name the Python behaviour each step reproduces; see metrics.h for the package versions.
#include "drope/tasks/metrics.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include <unicode/locid.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include "drope/core/error.h"
#include "drope/tasks/jieba.h"

namespace drope::tasks {

namespace {

// string.punctuation
constexpr std::u32string_view kAsciiPunct = U"!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~";
// normalize_zh_answer's cn_punctuation, character for character ("》" without "《" included).
constexpr std::u32string_view kZhPunct =
    U"！？｡。＂＃＄％＆＇（）＊＋，－／：；＜＝＞＠［＼］＾＿｀｛｜｝～｟｠｢｣､、〃》「」『』【】〔〕〖〗〘〙〚〛〜〝〞〟〰〾〿–—‘’‛“”„‟…‧﹏.";

// A word character of Python's `re` on str patterns: str.isalnum() or '_'.
bool py_is_word(char32_t c) {
  return c == U'_' || u_isalpha(static_cast<UChar32>(c)) ||
         u_getIntPropertyValue(static_cast<UChar32>(c), UCHAR_NUMERIC_TYPE) != U_NT_NONE;
}
// `\d` on str patterns: Unicode decimal digits (category Nd).
bool py_is_digit(char32_t c) { return u_charType(static_cast<UChar32>(c)) == U_DECIMAL_DIGIT_NUMBER; }

std::vector<std::u32string> split_ws(std::u32string_view s) {
  std::vector<std::u32string> out;
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && py_isspace(s[i])) ++i;
    size_t j = i;
    while (j < s.size() && !py_isspace(s[j])) ++j;
    if (j > i) out.emplace_back(s.substr(i, j - i));
    i = j;
  }
  return out;
}

std::u32string join(const std::vector<std::u32string>& parts, std::u32string_view sep) {
  std::u32string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i) out += sep;
    out += parts[i];
  }
  return out;
}

std::u32string remove_chars(std::u32string_view s, std::u32string_view a, std::u32string_view b = {}) {
  std::u32string out;
  for (char32_t c : s)
    if (a.find(c) == std::u32string_view::npos && b.find(c) == std::u32string_view::npos) out += c;
  return out;
}

// re.findall(r"\d+", s)
std::vector<std::u32string> digit_runs(std::u32string_view s) {
  std::vector<std::u32string> out;
  for (size_t i = 0; i < s.size();) {
    if (!py_is_digit(s[i])) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < s.size() && py_is_digit(s[j])) ++j;
    out.emplace_back(s.substr(i, j - i));
    i = j;
  }
  return out;
}

// Share of the numbers in the prediction that equal `target` (count/retrieval scores).
double share_equal(std::string_view prediction, const std::u32string& target) {
  auto numbers = digit_runs(utf8_to_u32(prediction));
  if (numbers.empty()) return 0.0;
  size_t right = static_cast<size_t>(std::count(numbers.begin(), numbers.end(), target));
  return static_cast<double>(right) / static_cast<double>(numbers.size());
}

// re.findall(label + r"(\d+)", gt)[0]
std::u32string paragraph_id(std::string_view ground_truth, std::u32string_view label) {
  std::u32string gt = utf8_to_u32(ground_truth);
  for (size_t p = gt.find(label); p != std::u32string::npos; p = gt.find(label, p + 1)) {
    size_t j = p + label.size();
    while (j < gt.size() && py_is_digit(gt[j])) ++j;
    if (j > p + label.size()) return gt.substr(p + label.size(), j - p - label.size());
  }
  fail("retrieval ground truth '{}' holds no '{}<number>' (LongBench's scorer fails on it too)", ground_truth,
       u32_to_utf8(label));
}

// rouge 1.0.1's sentence preparation: split on '.', drop empty pieces, collapse whitespace.
std::vector<std::vector<std::string>> rouge_sentences(std::string_view text) {
  std::vector<std::vector<std::string>> sentences;
  size_t start = 0;
  for (;;) {
    size_t dot = text.find('.', start);
    std::string_view piece = text.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start);
    if (!piece.empty()) {
      // " ".join(piece.split()) then .split(" "): an all-whitespace piece becomes the word "".
      auto words = py_split(piece);
      if (words.empty()) words.emplace_back();
      sentences.push_back(std::move(words));
    }
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  return sentences;
}

}  // namespace

std::string py_lower(std::string_view s) {
  icu::UnicodeString u = icu::UnicodeString::fromUTF8(icu::StringPiece(s.data(), static_cast<int32_t>(s.size())));
  u.toLower(icu::Locale::getRoot());  // root locale: Unicode's default full mappings, as Python
  std::string out;
  u.toUTF8String(out);
  return out;
}

std::vector<std::string> py_split(std::string_view s) {
  std::vector<std::string> out;
  for (const auto& w : split_ws(utf8_to_u32(s))) out.push_back(u32_to_utf8(w));
  return out;
}

std::string normalize_answer(std::string_view s) {
  std::u32string t = remove_chars(utf8_to_u32(py_lower(s)), kAsciiPunct);
  // re.sub(r"\b(a|an|the)\b", " ", t): the pattern is all word characters, so a match is exactly a
  // maximal run of word characters equal to one of the articles.
  std::u32string out;
  for (size_t i = 0; i < t.size();) {
    if (!py_is_word(t[i])) {
      out += t[i++];
      continue;
    }
    size_t j = i;
    while (j < t.size() && py_is_word(t[j])) ++j;
    std::u32string_view w(t.data() + i, j - i);
    if (w == U"a" || w == U"an" || w == U"the") out += U' ';
    else out += w;
    i = j;
  }
  return u32_to_utf8(join(split_ws(out), U" "));
}

std::string normalize_zh_answer(std::string_view s) {
  std::u32string t = remove_chars(utf8_to_u32(py_lower(s)), kAsciiPunct, kZhPunct);
  return u32_to_utf8(join(split_ws(t), U""));
}

double f1_score(const std::vector<std::string>& prediction, const std::vector<std::string>& ground_truth) {
  std::unordered_map<std::string, int64_t> counts;
  for (const auto& t : ground_truth) ++counts[t];
  int64_t same = 0;
  for (const auto& t : prediction) {
    auto it = counts.find(t);
    if (it != counts.end() && it->second > 0) {
      --it->second;
      ++same;
    }
  }
  if (same == 0) return 0.0;
  double precision = 1.0 * static_cast<double>(same) / static_cast<double>(prediction.size());
  double recall = 1.0 * static_cast<double>(same) / static_cast<double>(ground_truth.size());
  return (2 * precision * recall) / (precision + recall);
}

double qa_f1_score(std::string_view prediction, std::string_view ground_truth) {
  return f1_score(py_split(normalize_answer(prediction)), py_split(normalize_answer(ground_truth)));
}

double qa_f1_zh_score(std::string_view prediction, std::string_view ground_truth) {
  auto tokens = [](std::string_view s) {
    std::vector<std::string> out;
    for (const auto& t : Jieba::shared().cut(s)) {
      std::string n = normalize_zh_answer(t);
      if (!n.empty()) out.push_back(std::move(n));
    }
    return out;
  };
  return f1_score(tokens(prediction), tokens(ground_truth));
}

std::optional<double> rouge_l(std::string_view hyp, std::string_view ref, int max_recursion) {
  const auto hyp_s = rouge_sentences(hyp);
  const auto ref_s = rouge_sentences(ref);
  if (hyp_s.empty() || ref_s.empty()) return std::nullopt;  // "Hypothesis is empty." etc.
  auto distinct = [](const std::vector<std::vector<std::string>>& ss) {
    std::set<std::string> words;
    for (const auto& s : ss) words.insert(s.begin(), s.end());
    return words.size();
  };
  const size_t m = distinct(ref_s), n = distinct(hyp_s);
  // Union over (reference sentence, hypothesis sentence) of the words of the reconstructed LCS.
  std::set<std::string> lcs_union;
  std::vector<int32_t> table;
  for (const auto& x : ref_s) {
    for (const auto& y : hyp_s) {
      const size_t nx = x.size(), ny = y.size(), w = ny + 1;
      table.assign((nx + 1) * w, 0);
      for (size_t i = 1; i <= nx; ++i)
        for (size_t j = 1; j <= ny; ++j)
          table[i * w + j] = x[i - 1] == y[j - 1] ? table[(i - 1) * w + j - 1] + 1
                                                  : std::max(table[(i - 1) * w + j], table[i * w + j - 1]);
      // _recon(i, j) walks back recursively: one frame per step plus the final (i == 0 or j == 0).
      size_t i = nx, j = ny;
      int frames = 1;
      while (i > 0 && j > 0) {
        if (x[i - 1] == y[j - 1]) {
          lcs_union.insert(x[i - 1]);
          --i;
          --j;
        } else if (table[(i - 1) * w + j] > table[i * w + j - 1]) {
          --i;
        } else {
          --j;
        }
        ++frames;
      }
      if (frames > max_recursion) return std::nullopt;  // RecursionError
    }
  }
  const double llcs = static_cast<double>(lcs_union.size());
  const double r = llcs / static_cast<double>(m);
  const double p = llcs / static_cast<double>(n);
  return 2.0 * ((p * r) / (p + r + 1e-8));
}

double rouge_score(std::string_view prediction, std::string_view ground_truth) {
  return rouge_l(prediction, ground_truth, kRougeRecursionEn).value_or(0.0);
}

double rouge_zh_score(std::string_view prediction, std::string_view ground_truth) {
  auto joined = [](std::string_view s) {
    std::string out;
    auto words = Jieba::shared().cut(s);
    for (size_t i = 0; i < words.size(); ++i) out += (i ? " " : "") + words[i];
    return out;
  };
  return rouge_l(joined(prediction), joined(ground_truth), kRougeRecursionZh).value_or(0.0);
}

double classification_score(std::string_view prediction, std::string_view ground_truth,
                            const std::vector<std::string>& all_classes) {
  std::vector<std::string> matches;
  for (const auto& c : all_classes)
    if (prediction.find(c) != std::string_view::npos) matches.push_back(c);
  // metrics.py removes from the list while iterating over it, so the element after each removed one
  // is skipped; list.remove drops the first equal element.
  for (size_t k = 0; k < matches.size(); ++k) {
    const std::string term = matches[k];
    if (ground_truth.find(term) != std::string_view::npos && term != ground_truth)
      matches.erase(std::find(matches.begin(), matches.end(), term));
  }
  if (std::find(matches.begin(), matches.end(), ground_truth) == matches.end()) return 0.0;
  return 1.0 / static_cast<double>(matches.size());
}

double retrieval_score(std::string_view prediction, std::string_view ground_truth) {
  return share_equal(prediction, paragraph_id(ground_truth, U"Paragraph "));
}

double retrieval_zh_score(std::string_view prediction, std::string_view ground_truth) {
  return share_equal(prediction, paragraph_id(ground_truth, U"段落"));
}

double count_score(std::string_view prediction, std::string_view ground_truth) {
  return share_equal(prediction, utf8_to_u32(ground_truth));
}

double sequence_matcher_ratio(std::u32string_view a, std::u32string_view b) {
  const size_t la = a.size(), lb = b.size();
  if (la + lb == 0) return 1.0;
  // b2j: positions of each element of b; with autojunk, elements in more than 1% (+1) of a b of 200+
  // elements are "popular" and left out (but matches may still be extended across them).
  std::unordered_map<char32_t, std::vector<size_t>> b2j;
  for (size_t j = 0; j < lb; ++j) b2j[b[j]].push_back(j);
  if (lb >= 200) {
    const size_t ntest = lb / 100 + 1;
    for (auto it = b2j.begin(); it != b2j.end();) it = it->second.size() > ntest ? b2j.erase(it) : std::next(it);
  }
  struct Match {
    size_t i, j, k;
  };
  // find_longest_match: the longest block, earliest in a, then earliest in b; then extended.
  auto longest = [&](size_t alo, size_t ahi, size_t blo, size_t bhi) {
    size_t besti = alo, bestj = blo, bestsize = 0;
    std::unordered_map<size_t, size_t> j2len, next;
    for (size_t i = alo; i < ahi; ++i) {
      next.clear();
      auto it = b2j.find(a[i]);
      if (it != b2j.end()) {
        for (size_t j : it->second) {
          if (j < blo) continue;
          if (j >= bhi) break;
          auto prev = j > 0 ? j2len.find(j - 1) : j2len.end();
          size_t k = (prev == j2len.end() ? 0 : prev->second) + 1;
          next[j] = k;
          if (k > bestsize) {
            besti = i - k + 1;
            bestj = j - k + 1;
            bestsize = k;
          }
        }
      }
      std::swap(j2len, next);
    }
    // No element is junk (isjunk=None), so only the first pair of extension loops can move.
    while (besti > alo && bestj > blo && a[besti - 1] == b[bestj - 1]) {
      --besti;
      --bestj;
      ++bestsize;
    }
    while (besti + bestsize < ahi && bestj + bestsize < bhi && a[besti + bestsize] == b[bestj + bestsize]) ++bestsize;
    return Match{besti, bestj, bestsize};
  };
  size_t matches = 0;
  std::vector<std::array<size_t, 4>> queue{{0, la, 0, lb}};
  while (!queue.empty()) {
    auto [alo, ahi, blo, bhi] = queue.back();
    queue.pop_back();
    Match m = longest(alo, ahi, blo, bhi);
    if (m.k == 0) continue;
    matches += m.k;
    if (alo < m.i && blo < m.j) queue.push_back({alo, m.i, blo, m.j});
    if (m.i + m.k < ahi && m.j + m.k < bhi) queue.push_back({m.i + m.k, ahi, m.j + m.k, bhi});
  }
  return 2.0 * static_cast<double>(matches) / static_cast<double>(la + lb);
}

int fuzz_ratio(std::string_view a, std::string_view b) {
  if (a == b) return 100;                 // check_for_equivalence comes before the empty check
  if (a.empty() || b.empty()) return 0;  // check_empty_string
  // utils.intr: int(round(x)), Python's round half to even = nearbyint in the default mode.
  return static_cast<int>(std::nearbyint(100 * sequence_matcher_ratio(utf8_to_u32(a), utf8_to_u32(b))));
}

double code_sim_score(std::string_view prediction, std::string_view ground_truth) {
  std::string_view rest = prediction.substr(std::min(prediction.find_first_not_of('\n'), prediction.size()));
  std::string_view chosen;
  for (;;) {
    size_t nl = rest.find('\n');
    std::string_view line = rest.substr(0, nl);
    if (line.find('`') == std::string_view::npos && line.find('#') == std::string_view::npos &&
        line.find("//") == std::string_view::npos) {
      chosen = line;
      break;
    }
    if (nl == std::string_view::npos) break;
    rest = rest.substr(nl + 1);
  }
  return fuzz_ratio(chosen, ground_truth) / 100.0;
}

}  // namespace drope::tasks
