// Internal to the HF `tokenizer.json` byte-level BPE (bpe.cpp, bpe_json.cpp, bpe_pretok.cpp,
// bpe_decode.cpp): the JSON reader, the PCRE2 pattern wrapper, pre-tokenisation steps, the byte table
// and the tokenizer class itself.
#pragma once

#ifndef PCRE2_CODE_UNIT_WIDTH
#define PCRE2_CODE_UNIT_WIDTH 8
#endif
#include <pcre2.h>

#include <array>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "drope/core/error.h"
#include "drope/core/json.h"
#include "drope/text/tokenizer.h"

namespace drope::text::bpe_detail {

using json = nlohmann::json;

// GPT-2's reversible byte ↔ printable-character table: bytes that are printable Latin-1 ('!'..'~',
// '¡'..'¬', '®'..'ÿ') stand for themselves, the other 68 take code points 256, 257, ... in byte order.
struct ByteTable {
  std::array<std::string, 256> to_text;  // byte → UTF-8 of its character
  std::array<int, 324> to_byte;          // code point → byte, -1 when not in the table
  ByteTable();
};

const ByteTable& byte_table();

// Reads typed values from the tokenizer JSON; every error names the file and the key path.
struct JsonIn {
  const std::string& file;

  [[noreturn]] void bad(const std::string& key, const std::string& what) const { fail("{}: {}: {}", file, key, what); }
  // obj[key], which must exist and not be null.
  const json& req(const json& obj, const std::string& where, const char* key) const {
    if (!obj.is_object()) bad(where, "expected an object");
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) bad(join(where, key), "missing");
    return *it;
  }
  // obj[key], or nullptr when absent or null.
  const json* opt(const json& obj, const char* key) const {
    auto it = obj.find(key);
    return it == obj.end() || it->is_null() ? nullptr : &*it;
  }
  std::string str(const json& obj, const std::string& where, const char* key) const {
    const json& v = req(obj, where, key);
    if (!v.is_string()) bad(join(where, key), fmt::format("expected a string, got {}", v.type_name()));
    return v.get<std::string>();
  }
  bool flag(const json& obj, const std::string& where, const char* key, bool dflt) const {
    const json* v = opt(obj, key);
    if (!v) return dflt;
    if (!v->is_boolean()) bad(join(where, key), fmt::format("expected true or false, got {}", v->type_name()));
    return v->get<bool>();
  }
  int32_t id(const json& v, const std::string& where) const {
    const int64_t x = json_int64(v, fmt::format("{}: {}", file, where));
    if (x < 0 || x >= (int64_t{1} << 31)) bad(where, fmt::format("token id {} is outside [0, 2^31)", x));
    return static_cast<int32_t>(x);
  }
  static std::string join(const std::string& where, const std::string& key) {
    return where.empty() ? key : where + "." + key;
  }
};

// A compiled PCRE2 pattern (UTF + Unicode properties), JIT-compiled where available.
class Regex {
 public:
  Regex(const std::string& pattern, const JsonIn& in, const std::string& key);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Every match in `s` as [begin, end) byte ranges, left to right; an empty match moves one character on.
  void find_all(std::string_view s, std::vector<std::pair<size_t, size_t>>& out) const;

 private:
  pcre2_code* code_ = nullptr;
};

// How Split treats the matched spans (HF SplitDelimiterBehavior).
enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// One pre-tokenisation step: Split(regex), Digits, or ByteLevel (optional prefix space, optional
// GPT-2 regex split, then bytes → printable characters).
struct PreStep {
  enum class Kind { kSplit, kByteLevel } kind = Kind::kSplit;
  std::shared_ptr<Regex> regex;
  Behavior behavior = Behavior::kIsolated;
  bool invert = false;
  bool add_prefix_space = false;
};

// Splits `s` by the spans of `re` following `behavior`; non-empty pieces are appended to `out`.
void split_pieces(std::string_view s, const Regex& re, Behavior behavior, bool invert,
                  std::vector<std::pair<size_t, size_t>>& scratch, std::vector<std::string>& out);

// A token from `added_tokens`: matched in the text before normalisation and pre-tokenisation.
struct AddedToken {
  std::string content;  // what is matched (NFC-normalised when `normalized` and the normaliser is NFC)
  int32_t id = 0;
  bool special = false, lstrip = false, rstrip = false, normalized = false;
};

// Byte-level BPE from an HF tokenizer.json.
class BpeTokenizer final : public Tokenizer {
 public:
  explicit BpeTokenizer(std::string path);  // bpe_json.cpp
  // From tokenizer.json and tokenizer_config.json texts held in memory; `label` names them in errors.
  BpeTokenizer(std::string label, const std::string& text, const std::string& config_text);

  std::vector<int32_t> encode(std::string_view text) const override;                 // bpe.cpp
  std::string decode(const std::vector<int32_t>& ids, bool skip_special) const override;  // bpe_decode.cpp

  int64_t vocab_size() const override { return vocab_size_; }
  int32_t eos_id() const override { return eos_; }
  int32_t bos_id() const override { return bos_; }
  std::string kind() const override { return "hf-bpe"; }
  const std::string& path() const override { return path_; }

 private:
  // Per-call buffers reused across pieces.
  struct Scratch {
    std::vector<std::string> a, b;
    std::vector<std::pair<size_t, size_t>> matches;
  };
  // An added token as stored (decode renders `raw`, the unnormalised content).
  struct AddedInfo {
    std::string raw;
    bool special = false;
  };

  // ---- loading (bpe_json.cpp)
  void load(const std::string& text, const std::string* config_text);
  void parse_model(const JsonIn& in, const json& model);
  int32_t lookup(const JsonIn& in, const std::string& where, const std::string& tok) const;
  // Accepts null, NFC, or a Sequence of NFC normalisers.
  void parse_normalizer(const JsonIn& in, const json* n, const std::string& where = "normalizer");
  // ByteLevel, Split, Digits or a Sequence of them: at most kMaxPreSteps steps, one of them ByteLevel.
  void parse_pre_tokenizer(const JsonIn& in, const json* p, const std::string& where = "pre_tokenizer");
  static constexpr size_t kMaxPreSteps = 32;
  // The id → token table is sized by the largest id: refuse ids far beyond the number of entries
  // (a file claiming id 2^31 - 1 would otherwise allocate billions of strings).
  void check_dense(const JsonIn& in, const char* key, int64_t entries) const;
  void parse_added_tokens(const JsonIn& in, const json* list);
  void check_added_ids(const JsonIn& in, const json& list) const;
  void parse_decoder(const JsonIn& in, const json* d);
  // EOS/BOS from tokenizer_config.json beside the file, else from well-known special tokens.
  void resolve_special_ids(const std::string* config_text);

  // ---- pre-tokenisation (bpe_pretok.cpp)
  std::string normalize(std::string_view s) const;
  // Pre-tokenises one normalised segment and appends the BPE ids of its pieces.
  void encode_segment(std::string_view seg, Scratch& sc, std::vector<int32_t>& ids) const;

  // ---- encoding (bpe.cpp)
  template <typename Emit>
  void split_added(std::string_view s, bool normalized, Emit&& emit) const;
  static size_t strip_left(std::string_view s, size_t floor, size_t b);
  static size_t strip_right(std::string_view s, size_t e);
  static uint64_t pair_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }

  // BPE of one pre-tokenised piece: its characters, then merges applied lowest rank first (leftmost
  // on ties) until none applies. Results are cached per piece, in a cache of the calling thread (no
  // lock on the hot path: one shared cache behind a mutex made two threads no faster than one).
  void bpe(const std::string& piece, std::vector<int32_t>& ids) const;

  static constexpr size_t kCacheEntries = 1 << 16;  // per thread

  std::string path_;
  std::unordered_map<std::string, int32_t> token_to_id_;
  std::vector<std::string> id_to_token_;
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges_;  // (left, right) → (rank, merged id)
  std::vector<AddedToken> added_;                                     // longest content first
  std::array<std::vector<size_t>, 256> added_by_first_byte_;
  std::unordered_map<int32_t, AddedInfo> added_by_id_;
  std::vector<PreStep> steps_;
  int64_t vocab_size_ = 0;
  int32_t unk_ = -1, eos_ = -1, bos_ = -1;
  bool nfc_ = false, fuse_unk_ = false, byte_fallback_ = false, ignore_merges_ = false;
  uint64_t cache_owner_;  // a process-unique id of this tokenizer: what the thread caches are keyed by
};

}  // namespace drope::text::bpe_detail
