// jieba 0.42.1's accurate mode (`jieba.cut(s)`, cut_all=False, HMM=True), re-implemented from its
// algorithm description:
//   1. split the text into blocks of [\u4E00-\u9FD5a-zA-Z0-9+#&._%-]; every other character is a word
//      of its own ("\r\n" stays one word);
//   2. per block: a DAG of all dictionary words starting at each position, the route maximising the sum
//      of log(freq/total) (ties: the longer word), consecutive single characters collected in a buffer;
//   3. a buffer that is not itself a dictionary word goes to finalseg: Han runs are segmented by a
//      4-state (B/M/E/S) HMM Viterbi, other runs are split into [a-zA-Z0-9]+(\.\d+)?%? tokens and the
//      text between them.
// Floating-point sums are evaluated in Python's order so that ties and near-ties resolve identically.
#include "drope/tasks/jieba.h"
#include "drope/core/environment.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "drope/core/error.h"
#include "drope/core/files.h"
#include "drope/text/tokenizer.h"

namespace drope::tasks {

bool py_isspace(char32_t c) {
  // CPython's _PyUnicode_IsWhitespace: bidirectional class WS/B/S or category Zs.
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

namespace {

constexpr double kMinFloat = -3.14e100;  // finalseg's MIN_FLOAT: log-probability of "impossible"
constexpr char kStateName[4] = {'B', 'M', 'E', 'S'};
enum State { B = 0, M = 1, E = 2, S = 3 };

bool is_han(char32_t c) { return c >= 0x4E00 && c <= 0x9FD5; }
bool is_ascii_alnum(char32_t c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'); }
// jieba's re_han_default character class.
bool in_block(char32_t c) {
  return is_han(c) || is_ascii_alnum(c) || c == '+' || c == '#' || c == '&' || c == '.' || c == '_' || c == '%' ||
         c == '-';
}

std::string missing_hint(const std::string& path) {
  return fmt::format(
      "jieba data file {} not found: install Debian's python3-jieba (apt-get install python3-jieba) or set "
      "DROPE_JIEBA_DIR to a jieba package directory (with dict.txt and finalseg/prob_*.py)",
      path);
}

std::string read_data_file(const std::string& path) {
  if (!std::filesystem::is_regular_file(path)) throw Error(missing_hint(path));
  return read_file(path);
}

// A tiny reader for the Python literals in jieba/finalseg/prob_*.py: `P = <value>` where a value is a
// float or a dict {str: value}. Only what those files use; anything else fails naming the offset.
struct PyValue {
  bool is_dict = false;
  double number = 0.0;
  std::vector<std::pair<std::u32string, PyValue>> items;
};

class PyLiteralReader {
 public:
  static constexpr int kMaxDepth = 2;  // dicts in dicts: {state: {state or character: number}}, no deeper

  PyLiteralReader(std::string path, std::string text) : path_(std::move(path)), s_(std::move(text)) {}

  PyValue read_assignment() {
    // Skip `from __future__ import ...` and comments up to the line `P=...`.
    size_t pos = 0;
    for (;;) {
      size_t eol = s_.find('\n', pos);
      std::string_view line(s_.data() + pos, (eol == std::string::npos ? s_.size() : eol) - pos);
      size_t k = line.find_first_not_of(" \t");
      if (k != std::string_view::npos && line[k] == 'P') {
        size_t eq = line.find('=', k);
        if (eq != std::string_view::npos &&
            line.substr(k + 1, eq - k - 1).find_first_not_of(" \t") == std::string_view::npos) {
          i_ = pos + eq + 1;
          break;
        }
      }
      if (eol == std::string::npos) fail("{}: no assignment `P = ...` found (not a jieba finalseg table?)", path_);
      pos = eol + 1;
    }
    PyValue v = value();
    skip_space();
    if (i_ != s_.size()) error("unexpected text after the value");
    return v;
  }

 private:
  [[noreturn]] void error(const std::string& what) const {
    size_t line = 1 + std::count(s_.begin(), s_.begin() + static_cast<std::ptrdiff_t>(std::min(i_, s_.size())), '\n');
    fail("{}:{}: {} (byte offset {})", path_, line, what, i_);
  }
  void skip_space() {
    while (i_ < s_.size()) {
      char c = s_[i_];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        ++i_;
      } else if (c == '#') {
        while (i_ < s_.size() && s_[i_] != '\n') ++i_;
      } else {
        break;
      }
    }
  }
  void expect(char c) {
    skip_space();
    if (i_ >= s_.size() || s_[i_] != c) error(fmt::format("expected '{}'", c));
    ++i_;
  }
  PyValue value(int depth = 0) {
    skip_space();
    if (i_ >= s_.size()) error("unexpected end of file");
    PyValue v;
    if (s_[i_] == '{') {
      if (depth == kMaxDepth)
        error(fmt::format("dicts nested more than {} deep (a finalseg table has at most {})", kMaxDepth, kMaxDepth));
      ++i_;
      v.is_dict = true;
      for (;;) {
        skip_space();
        if (i_ < s_.size() && s_[i_] == '}') {
          ++i_;
          break;
        }
        std::u32string key = string_literal();
        expect(':');
        v.items.emplace_back(std::move(key), value(depth + 1));
        skip_space();
        if (i_ < s_.size() && s_[i_] == ',') {
          ++i_;
        } else if (i_ >= s_.size() || s_[i_] != '}') {
          error("expected ',' or '}' in a dict");
        }
      }
      return v;
    }
    const char* begin = s_.data() + i_;
    const char* end = s_.data() + s_.size();
    if (*begin == '+') ++begin;  // from_chars takes no leading '+'
    auto [p, ec] = std::from_chars(begin, end, v.number);
    if (ec != std::errc()) error("expected a number or a dict");
    i_ = static_cast<size_t>(p - s_.data());
    return v;
  }
  unsigned hex(size_t digits) {
    if (i_ + digits > s_.size()) error("truncated escape");
    unsigned v = 0;
    for (size_t k = 0; k < digits; ++k) {
      char c = s_[i_ + k];
      int d = (c >= '0' && c <= '9')   ? c - '0'
              : (c >= 'a' && c <= 'f') ? c - 'a' + 10
              : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                                       : -1;
      if (d < 0) error("bad hex digit in an escape");
      v = v * 16 + static_cast<unsigned>(d);
    }
    i_ += digits;
    return v;
  }
  std::u32string string_literal() {
    skip_space();
    if (i_ < s_.size() && (s_[i_] == 'u' || s_[i_] == 'U')) ++i_;
    if (i_ >= s_.size() || (s_[i_] != '\'' && s_[i_] != '"')) error("expected a string key");
    char quote = s_[i_++];
    std::string raw;  // UTF-8 of the characters between escapes
    std::u32string out;
    auto flush = [&] {
      out += utf8_to_u32(raw);
      raw.clear();
    };
    for (;;) {
      if (i_ >= s_.size() || s_[i_] == '\n') error("unterminated string");
      char c = s_[i_++];
      if (c == quote) break;
      if (c != '\\') {
        raw += c;
        continue;
      }
      if (i_ >= s_.size()) error("unterminated string");
      char e = s_[i_++];
      flush();
      switch (e) {
        case 'u': out += static_cast<char32_t>(hex(4)); break;
        case 'U': out += static_cast<char32_t>(hex(8)); break;
        case 'x': out += static_cast<char32_t>(hex(2)); break;
        case 'n': out += U'\n'; break;
        case 't': out += U'\t'; break;
        case 'r': out += U'\r'; break;
        case '\\': out += U'\\'; break;
        case '\'': out += U'\''; break;
        case '"': out += U'"'; break;
        default: error(fmt::format("unsupported escape \\{}", e));
      }
    }
    flush();
    return out;
  }

  std::string path_;
  std::string s_;
  size_t i_ = 0;
};

int state_index(const std::u32string& key, const std::string& path) {
  for (int k = 0; k < 4; ++k)
    if (key.size() == 1 && key[0] == static_cast<char32_t>(kStateName[k])) return k;
  fail("{}: unknown HMM state '{}' (expected B, M, E or S)", path, u32_to_utf8(key));
}

PyValue read_table(const std::string& path, bool want_dict) {
  PyValue v = PyLiteralReader(path, read_data_file(path)).read_assignment();
  if (!v.is_dict) fail("{}: P is not a dict", path);
  for (const auto& [k, sub] : v.items)
    if (sub.is_dict != want_dict)
      fail("{}: P['{}'] must be {}", path, u32_to_utf8(k), want_dict ? "a dict" : "a number");
  return v;
}

// Python's bytes.strip(): ASCII whitespace.
std::string_view strip_ascii(std::string_view s) {
  const char* ws = " \t\n\r\x0b\x0c";
  size_t b = s.find_first_not_of(ws);
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

}  // namespace

Jieba::Jieba(const std::string& dir) {
  namespace fs = std::filesystem;
  const std::string dict_path = (fs::path(dir) / "dict.txt").string();
  const std::string text = read_data_file(dict_path);
  freq_.reserve(600000);
  size_t pos = 0;
  int64_t lineno = 0;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string::npos) eol = text.size();
    ++lineno;
    std::string_view line = strip_ascii(std::string_view(text).substr(pos, eol - pos));
    pos = eol + 1;
    // jieba's gen_pfdict: "word freq [tag]" split on single spaces; prefixes of every word get 0.
    size_t sp = line.find(' ');
    std::string_view word = line.substr(0, sp);
    std::string_view count = sp == std::string_view::npos ? std::string_view{} : line.substr(sp + 1);
    count = count.substr(0, count.find(' '));
    int64_t f = 0;
    const char* cb = count.data();
    if (!count.empty() && count[0] == '+') ++cb;
    auto [p, ec] = std::from_chars(cb, count.data() + count.size(), f);
    if (sp == std::string_view::npos || count.empty() || ec != std::errc() || p != count.data() + count.size())
      fail("{}:{}: invalid dictionary entry '{}' (expected 'word frequency [tag]')", dict_path, lineno, line);
    if (text::utf8_error_offset(line) >= 0) fail("{}:{}: invalid UTF-8 in dictionary entry", dict_path, lineno);
    std::u32string w = utf8_to_u32(word);
    freq_[w] = f;
    total_ += f;
    for (size_t k = 1; k < w.size(); ++k) freq_.emplace(w.substr(0, k), 0);
  }
  if (total_ <= 0) fail("{}: empty dictionary (total frequency {})", dict_path, total_);
  log_total_ = std::log(static_cast<double>(total_));

  const fs::path fin = fs::path(dir) / "finalseg";
  start_.fill(kMinFloat);
  for (auto& row : trans_) row.fill(kMinFloat);
  const std::string start_path = (fin / "prob_start.py").string();
  for (const auto& [k, v] : read_table(start_path, false).items) start_[state_index(k, start_path)] = v.number;
  const std::string trans_path = (fin / "prob_trans.py").string();
  for (const auto& [k, row] : read_table(trans_path, true).items)
    for (const auto& [k2, v] : row.items) trans_[state_index(k, trans_path)][state_index(k2, trans_path)] = v.number;
  const std::string emit_path = (fin / "prob_emit.py").string();
  for (const auto& [k, row] : read_table(emit_path, true).items) {
    auto& m = emit_[state_index(k, emit_path)];
    m.reserve(row.items.size());
    for (const auto& [ch, v] : row.items) {
      if (ch.size() != 1) fail("{}: emission key '{}' is not one character", emit_path, u32_to_utf8(ch));
      m[ch[0]] = v.number;
    }
  }
}

std::string Jieba::default_dir() {
  if (const char* dir = env::get("DROPE_JIEBA_DIR")) return dir;
  return "/usr/lib/python3/dist-packages/jieba";
}

const Jieba& Jieba::shared() {
  static const Jieba instance(default_dir());
  return instance;
}

int64_t Jieba::frequency(std::u32string_view word) const {
  auto it = freq_.find(std::u32string(word));
  return it == freq_.end() ? -1 : it->second;
}

std::vector<std::string> Jieba::cut(std::string_view text) const {
  std::vector<std::string> out;
  for (const auto& w : cut(utf8_to_u32(text))) out.push_back(u32_to_utf8(w));
  return out;
}

std::vector<std::u32string> Jieba::cut(std::u32string_view text) const {
  std::vector<std::u32string> out;
  size_t i = 0;
  const size_t n = text.size();
  while (i < n) {
    if (in_block(text[i])) {
      size_t j = i;
      while (j < n && in_block(text[j])) ++j;
      cut_dag(text.substr(i, j - i), out);
      i = j;
    } else if (text[i] == U'\r' && i + 1 < n && text[i + 1] == U'\n') {
      out.emplace_back(U"\r\n");
      i += 2;
    } else {
      out.emplace_back(1, text[i]);  // whitespace and any other character: a word of its own
      ++i;
    }
  }
  return out;
}

void Jieba::cut_dag(std::u32string_view block, std::vector<std::u32string>& out) const {
  const size_t n = block.size();
  // DAG: for each start k the end positions of dictionary words (freq > 0); at least k itself.
  std::vector<std::vector<size_t>> dag(n);
  std::u32string frag;
  for (size_t k = 0; k < n; ++k) {
    frag.clear();
    for (size_t i = k; i < n; ++i) {
      frag.push_back(block[i]);
      auto it = freq_.find(frag);
      if (it == freq_.end()) break;
      if (it->second > 0) dag[k].push_back(i);
    }
    if (dag[k].empty()) dag[k].push_back(k);
  }
  // Best route from the right: max over (log(freq or 1) - log(total) + route[x+1], x).
  std::vector<std::pair<double, size_t>> route(n + 1, {0.0, 0});
  for (size_t idx = n; idx-- > 0;) {
    bool first = true;
    for (size_t x : dag[idx]) {
      int64_t f = frequency(block.substr(idx, x + 1 - idx));
      double v = (std::log(static_cast<double>(f > 0 ? f : 1)) - log_total_) + route[x + 1].first;
      // Python's max over tuples: a tie on the score goes to the larger x (DAG lists are ascending).
      if (first || v >= route[idx].first) route[idx] = {v, x};
      first = false;
    }
  }
  std::u32string buf;
  for (size_t x = 0; x < n;) {
    size_t y = route[x].second + 1;
    if (y - x == 1) {
      buf += block[x];
    } else {
      if (!buf.empty()) {
        flush_buffer(buf, out);
        buf.clear();
      }
      out.emplace_back(block.substr(x, y - x));
    }
    x = y;
  }
  if (!buf.empty()) flush_buffer(buf, out);
}

void Jieba::flush_buffer(const std::u32string& buf, std::vector<std::u32string>& out) const {
  if (buf.size() == 1) {
    out.push_back(buf);
  } else if (frequency(buf) <= 0) {
    cut_unknown(buf, out);  // not a dictionary word: let the HMM find new words
  } else {
    for (char32_t c : buf) out.emplace_back(1, c);
  }
}

void Jieba::cut_unknown(std::u32string_view s, std::vector<std::u32string>& out) const {
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    size_t j = i;
    if (is_han(s[i])) {
      while (j < n && is_han(s[j])) ++j;
      cut_hmm(s.substr(i, j - i), out);
      i = j;
      continue;
    }
    while (j < n && !is_han(s[j])) ++j;
    // Non-Han run: tokens [a-zA-Z0-9]+(\.\d+)?%? and the (non-empty) text between them. Only
    // re_han_default characters reach here, so \d can only meet ASCII digits.
    std::u32string_view run = s.substr(i, j - i);
    size_t gap = 0, p = 0;
    while (p < run.size()) {
      if (!is_ascii_alnum(run[p])) {
        ++p;
        continue;
      }
      size_t q = p;
      while (q < run.size() && is_ascii_alnum(run[q])) ++q;
      if (q + 1 < run.size() && run[q] == U'.' && run[q + 1] >= U'0' && run[q + 1] <= U'9') {
        q += 2;
        while (q < run.size() && run[q] >= U'0' && run[q] <= U'9') ++q;
      }
      if (q < run.size() && run[q] == U'%') ++q;
      if (p > gap) out.emplace_back(run.substr(gap, p - gap));
      out.emplace_back(run.substr(p, q - p));
      gap = p = q;
    }
    if (run.size() > gap) out.emplace_back(run.substr(gap));
    i = j;
  }
}

void Jieba::cut_hmm(std::u32string_view s, std::vector<std::u32string>& out) const {
  const size_t n = s.size();
  if (n == 0) return;
  // Predecessor states per state (finalseg's PrevStatus).
  static const int prev[4][2] = {{E, S}, {M, B}, {B, M}, {S, E}};
  auto emit = [&](int st, char32_t c) {
    auto it = emit_[st].find(c);
    return it == emit_[st].end() ? kMinFloat : it->second;
  };
  std::vector<std::array<double, 4>> v(n);
  std::vector<std::array<int, 4>> back(n);
  for (int y = 0; y < 4; ++y) v[0][y] = start_[y] + emit(y, s[0]);
  for (size_t t = 1; t < n; ++t) {
    for (int y = 0; y < 4; ++y) {
      double em = emit(y, s[t]);
      int best = -1;
      double best_p = 0.0;
      for (int y0 : prev[y]) {
        double p = v[t - 1][y0] + trans_[y0][y] + em;
        // max over (prob, state name): ties go to the later letter.
        if (best < 0 || p > best_p || (p == best_p && kStateName[y0] > kStateName[best])) {
          best = y0;
          best_p = p;
        }
      }
      v[t][y] = best_p;
      back[t][y] = best;
    }
  }
  int state = v[n - 1][S] >= v[n - 1][E] ? S : E;  // max over 'ES': a tie picks 'S'
  std::vector<int> path(n);
  for (size_t t = n; t-- > 0;) {
    path[t] = state;
    if (t > 0) state = back[t][state];
  }
  size_t begin = 0, next = 0;
  for (size_t i = 0; i < n; ++i) {
    if (path[i] == B) {
      begin = i;
    } else if (path[i] == E) {
      out.emplace_back(s.substr(begin, i + 1 - begin));
      next = i + 1;
    } else if (path[i] == S) {
      out.emplace_back(1, s[i]);
      next = i + 1;
    }
  }
  if (next < n) out.emplace_back(s.substr(next));
}

}  // namespace drope::tasks
