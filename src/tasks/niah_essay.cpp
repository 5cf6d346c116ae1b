// NIAH essay haystack: real prose split into words and sentences (abbreviations, initials, enumerators,
// closing quotes), read from a file or a directory of files, and circular excerpts.
#include "drope/tasks/niah.h"

#include <algorithm>
#include <filesystem>
#include <set>

#include "drope/core/error.h"
#include "drope/core/files.h"
#include "drope/text/tokenizer.h"
#include "niah_internal.h"

namespace drope::tasks {

namespace fs = std::filesystem;
using niah_detail::trim;

// ---- essay haystack ---------------------------------------------------------------------------------

const char* const kDefaultHaystack = "/usr/share/common-licenses";

namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

// Strips closing quotes/brackets (ASCII and the UTF-8 ” ’ ») from the end of a word.
std::string strip_closers(std::string w) {
  while (!w.empty()) {
    const char c = w.back();
    if (c == ')' || c == ']' || c == '"' || c == '\'') {
      w.pop_back();
    } else if (w.size() >= 3 &&
               (w.compare(w.size() - 3, 3, "\xe2\x80\x9d") == 0 || w.compare(w.size() - 3, 3, "\xe2\x80\x99") == 0)) {
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
  static const std::set<std::string> known = {"mr",  "mrs",    "ms",   "dr",   "prof", "sr",  "jr",  "st",   "vs",
                                              "inc", "ltd",    "co",   "corp", "no",   "nos", "fig", "figs", "al",
                                              "cf",  "approx", "dept", "vol",  "p",    "pp",  "sec", "art",  "ch",
                                              "e.g", "i.e",    "resp", "incl", "esp",  "ca",  "viz"};
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
  return std::all_of(core_with_dot.begin(), core_with_dot.end(),
                     [](char c) { return (c >= '0' && c <= '9') || c == '.'; });
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
  uint64_t total = 0;  // bytes of the files read so far and of the next one, checked before it is read
  auto add_file = [&](const std::string& file) {
    total += InputFile(file).size();
    if (total > kMaxEssayBytes)
      fail("{}: haystack {} holds more than the {} MiB of text a haystack may have ({} bytes from {})", flag, path,
           kMaxEssayBytes >> 20, total, file);
    std::string t = read_file(file, kMaxEssayBytes);
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

}  // namespace drope::tasks
