// HF `tokenizer.json` byte-level BPE, pre-tokenisation: the NFC normaliser (ICU), PCRE2 patterns,
// Split / Digits spans by HF's delimiter behaviours, and the ByteLevel step (prefix space, GPT-2
// regex, bytes → printable characters).
#include <unicode/normalizer2.h>
#include <unicode/unistr.h>

#include <algorithm>

#include "bpe_internal.h"
#include "drope/core/error.h"

namespace drope::text::bpe_detail {

Regex::Regex(const std::string& pattern, const JsonIn& in, const std::string& key) {
  int err = 0;
  PCRE2_SIZE off = 0;
  code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), PCRE2_UTF | PCRE2_UCP, &err, &off,
                        nullptr);
  if (!code_) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    in.bad(key, fmt::format("invalid regex at offset {}: {}", off, reinterpret_cast<const char*>(msg)));
  }
  pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE);
}

Regex::~Regex() { pcre2_code_free(code_); }

void Regex::find_all(std::string_view s, std::vector<std::pair<size_t, size_t>>& out) const {
  out.clear();
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(code_, nullptr);
  size_t start = 0;
  while (start <= s.size()) {
    const int rc =
        pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), start, PCRE2_NO_UTF_CHECK, md, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      pcre2_match_data_free(md);
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof msg);
      fail("pre-tokenizer regex failed: {}", reinterpret_cast<const char*>(msg));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    out.emplace_back(ov[0], ov[1]);
    if (ov[1] > ov[0]) {
      start = ov[1];
    } else {
      if (ov[1] >= s.size()) break;
      size_t i = ov[1];
      utf8_next(s, i);
      start = i;
    }
  }
  pcre2_match_data_free(md);
}

void split_pieces(std::string_view s, const Regex& re, Behavior behavior, bool invert,
                  std::vector<std::pair<size_t, size_t>>& scratch, std::vector<std::string>& out) {
  re.find_all(s, scratch);
  struct Span {
    size_t b, e;
    bool match;
  };
  std::vector<Span> spans;
  size_t prev = 0;
  for (const auto& [b, e] : scratch) {
    if (b > prev) spans.push_back({prev, b, invert});
    spans.push_back({b, e, !invert});
    prev = e;
  }
  if (prev < s.size()) spans.push_back({prev, s.size(), invert});

  std::vector<std::pair<size_t, size_t>> pieces;
  switch (behavior) {
    case Behavior::kRemoved:
      for (const auto& sp : spans)
        if (!sp.match) pieces.emplace_back(sp.b, sp.e);
      break;
    case Behavior::kIsolated:
      for (const auto& sp : spans) pieces.emplace_back(sp.b, sp.e);
      break;
    case Behavior::kMergedWithPrevious: {
      bool prev_match = false;
      for (const auto& sp : spans) {
        if (sp.match && !prev_match && !pieces.empty()) pieces.back().second = sp.e;
        else pieces.emplace_back(sp.b, sp.e);
        prev_match = sp.match;
      }
      break;
    }
    case Behavior::kMergedWithNext: {
      bool next_match = false;
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->match && !next_match && !pieces.empty()) pieces.back().first = it->b;
        else pieces.emplace_back(it->b, it->e);
        next_match = it->match;
      }
      std::reverse(pieces.begin(), pieces.end());
      break;
    }
    case Behavior::kContiguous: {
      bool prev_match = false;
      for (const auto& sp : spans) {
        if (sp.match == prev_match && !pieces.empty()) pieces.back().second = sp.e;
        else pieces.emplace_back(sp.b, sp.e);
        prev_match = sp.match;
      }
      break;
    }
  }
  for (const auto& [b, e] : pieces)
    if (e > b) out.emplace_back(s.substr(b, e - b));
}

std::string BpeTokenizer::normalize(std::string_view s) const {
  if (!nfc_ || std::all_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; }))
    return std::string(s);
  UErrorCode st = U_ZERO_ERROR;
  const icu::Normalizer2* nfc = icu::Normalizer2::getNFCInstance(st);
  if (U_FAILURE(st)) fail("{}: ICU NFC normaliser unavailable ({})", path_, u_errorName(st));
  const icu::UnicodeString u = icu::UnicodeString::fromUTF8(icu::StringPiece(s.data(), static_cast<int32_t>(s.size())));
  const icu::UnicodeString n = nfc->normalize(u, st);
  if (U_FAILURE(st)) fail("{}: NFC normalisation failed ({})", path_, u_errorName(st));
  std::string out;
  n.toUTF8String(out);
  return out;
}

void BpeTokenizer::encode_segment(std::string_view seg, Scratch& sc, std::vector<int32_t>& ids) const {
  auto& cur = sc.a;
  auto& next = sc.b;
  cur.clear();
  cur.emplace_back(seg);
  const auto& table = byte_table();
  for (const auto& step : steps_) {
    next.clear();
    for (const auto& piece : cur) {
      if (step.kind == PreStep::Kind::kSplit) {
        split_pieces(piece, *step.regex, step.behavior, step.invert, sc.matches, next);
        continue;
      }
      std::string p = step.add_prefix_space && piece[0] != ' ' ? " " + piece : piece;
      const size_t first = next.size();
      if (step.regex) split_pieces(p, *step.regex, Behavior::kIsolated, false, sc.matches, next);
      else next.push_back(std::move(p));
      for (size_t k = first; k < next.size(); ++k) {
        std::string mapped;
        for (char c : next[k]) mapped += table.to_text[static_cast<unsigned char>(c)];
        next[k] = std::move(mapped);
      }
    }
    std::swap(cur, next);
  }
  for (const auto& piece : cur) bpe(piece, ids);
}

}  // namespace drope::text::bpe_detail
