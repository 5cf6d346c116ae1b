// Chinese word segmentation: jieba's default `jieba.cut(s)` (accurate mode with HMM, jieba 0.42.1)
// re-implemented in C++, reading the dictionary and HMM tables that Debian's python3-jieba ships, so
// that LongBench's Chinese metrics (qa_f1_zh, rouge_zh) segment exactly as the official scorer does.
// Also the few Python `str` semantics (code points, str.isspace) that the metrics need. Torch-free.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "drope/core/utf8.h"

namespace drope::tasks {

// UTF-8 → code points (a Python str). Bytes that do not form UTF-8 become U+FFFD, one per byte
// (drope/core/utf8.h).
using drope::u32_to_utf8;
using drope::utf8_to_u32;

// Python's str.isspace() for one code point (also what `\s` and str.split() use).
bool py_isspace(char32_t c);

class Jieba {
 public:
  // Reads <dir>/dict.txt and <dir>/finalseg/prob_{start,trans,emit}.py. A missing file fails naming
  // it and the package that provides it; a malformed one fails naming the file and line/offset.
  explicit Jieba(const std::string& dir);

  // $DROPE_JIEBA_DIR, else Debian's /usr/lib/python3/dist-packages/jieba.
  static std::string default_dir();
  // One segmenter over default_dir(), loaded on first use (thread-safe).
  static const Jieba& shared();

  // jieba.cut(text, cut_all=False, HMM=True) as a list of UTF-8 words.
  std::vector<std::string> cut(std::string_view text) const;
  std::vector<std::u32string> cut(std::u32string_view text) const;

  // The dictionary frequency of `word` (prefix-only entries are 0), -1 when absent.
  int64_t frequency(std::u32string_view word) const;
  int64_t total() const { return total_; }

 private:
  void cut_dag(std::u32string_view block, std::vector<std::u32string>& out) const;
  void cut_unknown(std::u32string_view buf, std::vector<std::u32string>& out) const;  // finalseg.cut
  void cut_hmm(std::u32string_view han, std::vector<std::u32string>& out) const;      // finalseg.__cut
  void flush_buffer(const std::u32string& buf, std::vector<std::u32string>& out) const;

  std::unordered_map<std::u32string, int64_t> freq_;  // words and all their prefixes (gen_pfdict)
  int64_t total_ = 0;
  double log_total_ = 0.0;
  // HMM states in jieba's order B, M, E, S.
  std::array<double, 4> start_{};
  std::array<std::array<double, 4>, 4> trans_{};  // [from][to]
  std::array<std::unordered_map<char32_t, double>, 4> emit_;
};

}  // namespace drope::tasks
