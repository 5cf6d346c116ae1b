// HF `tokenizer.json` byte-level BPE: added tokens, NFC normaliser (ICU), Split / Digits / ByteLevel
// pre-tokenisers (PCRE2), BPE merges by rank, ByteLevel decoder. The post-processor is not applied:
// encode() never adds BOS/EOS.
// This file: encoding (added tokens, then normalise, then pre-tokenise, then BPE merges by rank) and
// the factory; loading is in bpe_json.cpp, pre-tokenisation in bpe_pretok.cpp, decoding in
// bpe_decode.cpp, the shared declarations in bpe_internal.h.
#include <queue>

#include "bpe_internal.h"
#include "drope/core/error.h"
#include "drope/text/gguf_tokenizer.h"

namespace drope::text::bpe_detail {

namespace {

// Unicode White_Space, as Rust's char::is_whitespace (used by added tokens' lstrip/rstrip).
bool is_unicode_space(uint32_t c) {
  return (c >= 9 && c <= 13) || c == 32 || c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) ||
         c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

}  // namespace

// Splits `s` at the added tokens of the given group (leftmost, then longest match); calls
// emit(segment, -1) for text between them and emit("", id) for each token.
template <typename Emit>
void BpeTokenizer::split_added(std::string_view s, bool normalized, Emit&& emit) const {
  size_t seg = 0, i = 0;
  while (i < s.size()) {
    const AddedToken* hit = nullptr;
    for (size_t k : added_by_first_byte_[static_cast<unsigned char>(s[i])]) {
      const AddedToken& a = added_[k];
      if (a.normalized == normalized && s.compare(i, a.content.size(), a.content) == 0) {
        hit = &a;
        break;
      }
    }
    if (!hit) {
      ++i;
      continue;
    }
    size_t b = i, e = i + hit->content.size();
    if (hit->lstrip) b = strip_left(s, seg, b);
    if (hit->rstrip) e = strip_right(s, e);
    if (b > seg) emit(s.substr(seg, b - seg), -1);
    emit(std::string_view(), hit->id);
    seg = i = e;
  }
  if (seg < s.size()) emit(s.substr(seg), -1);
}

// Start of the whitespace run ending at `b` (not before `floor`).
size_t BpeTokenizer::strip_left(std::string_view s, size_t floor, size_t b) {
  size_t run = floor;
  for (size_t i = floor; i < b;)
    if (!is_unicode_space(utf8_next(s, i))) run = i;
  return run;
}

// End of the whitespace run starting at `e`.
size_t BpeTokenizer::strip_right(std::string_view s, size_t e) {
  while (e < s.size()) {
    size_t i = e;
    if (!is_unicode_space(utf8_next(s, i))) break;
    e = i;
  }
  return e;
}

std::vector<int32_t> BpeTokenizer::encode(std::string_view text) const {
  if (const int64_t bad = utf8_error_offset(text); bad >= 0) fail("text is not valid UTF-8 at byte {}", bad);
  std::vector<int32_t> ids;
  Scratch scratch;
  // Raw-matched added tokens first, then normalise, then normalised-matched added tokens.
  split_added(text, /*normalized=*/false, [&](std::string_view seg, int32_t added) {
    if (added >= 0) return ids.push_back(added);
    const std::string norm = normalize(seg);
    split_added(norm, /*normalized=*/true, [&](std::string_view part, int32_t added2) {
      if (added2 >= 0) return ids.push_back(added2);
      encode_segment(part, scratch, ids);
    });
  });
  return ids;
}

void BpeTokenizer::bpe(const std::string& piece, std::vector<int32_t>& ids) const {
  if (ignore_merges_) {
    auto it = token_to_id_.find(piece);
    if (it != token_to_id_.end()) return ids.push_back(it->second);
  }
  // This thread's cache, emptied when the thread switches to another tokenizer.
  thread_local struct {
    uint64_t owner = 0;
    std::unordered_map<std::string, std::vector<int32_t>> map;
  } cache;
  if (cache.owner != cache_owner_) {
    cache.map.clear();
    cache.owner = cache_owner_;
  }
  if (auto it = cache.map.find(piece); it != cache.map.end()) {
    ids.insert(ids.end(), it->second.begin(), it->second.end());
    return;
  }
  struct Sym {
    int32_t id;
    int prev, next;
    bool alive;
  };
  std::vector<Sym> syms;
  std::string ch;
  for (size_t i = 0; i < piece.size();) {
    const size_t at = i;
    utf8_next(piece, i);
    ch.assign(piece, at, i - at);
    auto it = token_to_id_.find(ch);
    if (it != token_to_id_.end()) {
      syms.push_back({it->second, 0, 0, true});
      continue;
    }
    bool done = false;
    if (byte_fallback_) {
      std::vector<int32_t> bytes;
      for (char c : ch) {
        auto b = token_to_id_.find(fmt::format("<0x{:02X}>", static_cast<unsigned char>(c)));
        if (b == token_to_id_.end()) break;
        bytes.push_back(b->second);
      }
      if (bytes.size() == ch.size()) {
        for (int32_t b : bytes) syms.push_back({b, 0, 0, true});
        done = true;
      }
    }
    if (!done && unk_ >= 0) {
      if (!(fuse_unk_ && !syms.empty() && syms.back().id == unk_)) syms.push_back({unk_, 0, 0, true});
    }
  }
  const int n = static_cast<int>(syms.size());
  for (int i = 0; i < n; ++i) {
    syms[i].prev = i - 1;
    syms[i].next = i + 1 < n ? i + 1 : -1;
  }
  // (rank, position of the left symbol, merged id)
  using Cand = std::tuple<int32_t, int, int32_t>;
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap;
  auto push = [&](int left) {
    if (left < 0 || syms[left].next < 0) return;
    auto it = merges_.find(pair_key(syms[left].id, syms[syms[left].next].id));
    if (it != merges_.end()) heap.emplace(it->second.first, left, it->second.second);
  };
  for (int i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    const auto [rank, left, merged] = heap.top();
    heap.pop();
    if (!syms[left].alive || syms[left].next < 0) continue;
    const int right = syms[left].next;
    auto it = merges_.find(pair_key(syms[left].id, syms[right].id));
    if (it == merges_.end() || it->second.first != rank || it->second.second != merged) continue;
    syms[left].id = merged;
    syms[right].alive = false;
    syms[left].next = syms[right].next;
    if (syms[right].next >= 0) syms[syms[right].next].prev = left;
    push(syms[left].prev);
    push(left);
  }
  std::vector<int32_t> out;
  for (int i = n ? 0 : -1; i >= 0; i = syms[i].next) out.push_back(syms[i].id);
  ids.insert(ids.end(), out.begin(), out.end());
  if (cache.map.size() >= kCacheEntries) cache.map.clear();
  if (piece.size() < 256) cache.map.emplace(piece, std::move(out));
}

}  // namespace drope::text::bpe_detail

namespace drope::text {

std::unique_ptr<Tokenizer> load_hf_bpe(const std::string& tokenizer_json) {
  return std::make_unique<bpe_detail::BpeTokenizer>(tokenizer_json);
}

std::unique_ptr<Tokenizer> load_hf_bpe_text(const std::string& label, const std::string& tokenizer_json,
                                            const std::string& tokenizer_config_json) {
  return std::make_unique<bpe_detail::BpeTokenizer>(label, tokenizer_json, tokenizer_config_json);
}

}  // namespace drope::text
