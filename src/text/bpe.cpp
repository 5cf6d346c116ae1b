// HF `tokenizer.json` byte-level BPE: added tokens, NFC normaliser (ICU), Split / Digits / ByteLevel
// pre-tokenisers (PCRE2), BPE merges by rank, ByteLevel decoder. The post-processor is not applied:
// encode() never adds BOS/EOS.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <unicode/normalizer2.h>
#include <unicode/unistr.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <filesystem>
#include <mutex>
#include <queue>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "drope/core/error.h"
#include "drope/core/files.h"
#include "drope/core/json.h"
#include "drope/text/tokenizer.h"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace drope::text {

namespace {

// The pre-tokenisation regex of GPT-2's ByteLevel (use_regex = true).
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Unicode White_Space, as Rust's char::is_whitespace (used by added tokens' lstrip/rstrip).
bool is_unicode_space(uint32_t c) {
  return (c >= 9 && c <= 13) || c == 32 || c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) ||
         c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// GPT-2's reversible byte ↔ printable-character table: bytes that are printable Latin-1 ('!'..'~',
// '¡'..'¬', '®'..'ÿ') stand for themselves, the other 68 take code points 256, 257, ... in byte order.
struct ByteTable {
  std::array<std::string, 256> to_text;  // byte → UTF-8 of its character
  std::array<int, 324> to_byte;          // code point → byte, -1 when not in the table
  ByteTable() {
    to_byte.fill(-1);
    uint32_t extra = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      const uint32_t cp = printable ? static_cast<uint32_t>(b) : extra++;
      utf8_append(to_text[b], cp);
      to_byte[cp] = b;
    }
  }
};

const ByteTable& byte_table() {
  static const ByteTable t;
  return t;
}

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
  Regex(const std::string& pattern, const JsonIn& in, const std::string& key) {
    int err = 0;
    PCRE2_SIZE off = 0;
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), PCRE2_UTF | PCRE2_UCP, &err,
                          &off, nullptr);
    if (!code_) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof msg);
      in.bad(key, fmt::format("invalid regex at offset {}: {}", off, reinterpret_cast<const char*>(msg)));
    }
    pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE);
  }
  ~Regex() { pcre2_code_free(code_); }
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Every match in `s` as [begin, end) byte ranges, left to right; an empty match moves one character on.
  void find_all(std::string_view s, std::vector<std::pair<size_t, size_t>>& out) const {
    out.clear();
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(code_, nullptr);
    size_t start = 0;
    while (start <= s.size()) {
      const int rc = pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), start, PCRE2_NO_UTF_CHECK,
                                 md, nullptr);
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

// A token from `added_tokens`: matched in the text before normalisation and pre-tokenisation.
struct AddedToken {
  std::string content;  // what is matched (NFC-normalised when `normalized` and the normaliser is NFC)
  int32_t id = 0;
  bool special = false, lstrip = false, rstrip = false, normalized = false;
};

// Byte-level BPE from an HF tokenizer.json.
class BpeTokenizer final : public Tokenizer {
 public:
  explicit BpeTokenizer(std::string path) : path_(std::move(path)) {
    const std::string text = read_file(path_);
    const json root = parse_json(text, path_);
    JsonIn in{path_};
    if (!root.is_object()) in.bad("(top level)", "expected an object");
    parse_model(in, in.req(root, "", "model"));
    parse_normalizer(in, in.opt(root, "normalizer"));
    parse_pre_tokenizer(in, in.opt(root, "pre_tokenizer"));
    parse_added_tokens(in, in.opt(root, "added_tokens"));
    parse_decoder(in, in.opt(root, "decoder"));
    resolve_special_ids();
  }

  std::vector<int32_t> encode(std::string_view text) const override {
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

  std::string decode(const std::vector<int32_t>& ids, bool skip_special) const override {
    const auto& table = byte_table();
    std::string bytes;
    for (size_t i = 0; i < ids.size(); ++i) {
      const int32_t id = ids[i];
      if (id < 0 || id >= vocab_size_ || (id_to_token_[id].empty() && !added_by_id_.count(id)))
        fail("token id {} at index {} is not in the vocabulary of {} (size {})", id, i, path_, vocab_size_);
      const auto added = added_by_id_.find(id);
      if (added != added_by_id_.end() && skip_special && added->second.special) continue;
      const std::string& tok = added != added_by_id_.end() ? added->second.raw : id_to_token_[id];
      // ByteLevel decoder: a token whose characters are all in the byte table becomes those bytes,
      // any other token is kept as its own UTF-8.
      std::string mapped;
      bool all = true;
      for (size_t k = 0; k < tok.size();) {
        const uint32_t cp = utf8_next(tok, k);
        if (cp >= table.to_byte.size() || table.to_byte[cp] < 0) {
          all = false;
          break;
        }
        mapped += static_cast<char>(table.to_byte[cp]);
      }
      bytes += all ? mapped : tok;
    }
    return utf8_lossy(bytes);
  }

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

  void parse_model(const JsonIn& in, const json& model) {
    const std::string type = in.str(model, "model", "type");
    if (type != "BPE") in.bad("model.type", fmt::format("expected \"BPE\", got \"{}\"", type));
    if (const json* d = in.opt(model, "dropout")) {
      if (!d->is_number()) in.bad("model.dropout", "expected a number or null");
      if (d->get<double>() != 0.0) in.bad("model.dropout", "BPE dropout is not supported (expected null)");
    }
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
      if (const json* v = in.opt(model, key)) {
        if (!v->is_string()) in.bad(JsonIn::join("model", key), "expected a string or null");
        if (!v->get<std::string>().empty()) in.bad(JsonIn::join("model", key), "not supported (expected null or \"\")");
      }
    }
    fuse_unk_ = in.flag(model, "model", "fuse_unk", false);
    byte_fallback_ = in.flag(model, "model", "byte_fallback", false);
    ignore_merges_ = in.flag(model, "model", "ignore_merges", false);

    const json& vocab = in.req(model, "model", "vocab");
    if (!vocab.is_object()) in.bad("model.vocab", fmt::format("expected an object token → id, got {}", vocab.type_name()));
    if (vocab.empty()) in.bad("model.vocab", "empty vocabulary");
    std::unordered_map<int32_t, const std::string*> seen;
    for (auto it = vocab.begin(); it != vocab.end(); ++it) {
      const std::string where = fmt::format("model.vocab[\"{}\"]", it.key());
      const int32_t id = in.id(it.value(), where);
      if (it.key().empty()) in.bad(where, "empty token");
      if (utf8_error_offset(it.key()) >= 0) in.bad(where, "token is not valid UTF-8");
      if (auto [pos, fresh] = seen.emplace(id, &it.key()); !fresh)
        in.bad(where, fmt::format("id {} is also used by \"{}\"", id, *pos->second));
      token_to_id_.emplace(it.key(), id);
      vocab_size_ = std::max<int64_t>(vocab_size_, int64_t{id} + 1);
    }
    check_dense(in, "model.vocab", static_cast<int64_t>(vocab.size()));
    id_to_token_.assign(static_cast<size_t>(vocab_size_), {});
    for (const auto& [tok, id] : token_to_id_) id_to_token_[id] = tok;

    if (const json* unk = in.opt(model, "unk_token")) {
      if (!unk->is_string()) in.bad("model.unk_token", "expected a string or null");
      auto it = token_to_id_.find(unk->get<std::string>());
      if (it == token_to_id_.end()) in.bad("model.unk_token", fmt::format("\"{}\" is not in model.vocab", unk->get<std::string>()));
      unk_ = it->second;
    }

    const json& merges = in.req(model, "model", "merges");
    if (!merges.is_array()) in.bad("model.merges", fmt::format("expected a list, got {}", merges.type_name()));
    merges_.reserve(merges.size());
    for (size_t i = 0; i < merges.size(); ++i) {
      const std::string where = fmt::format("model.merges[{}]", i);
      const json& m = merges[i];
      std::string a, b;
      if (m.is_string()) {
        const std::string s = m.get<std::string>();
        const size_t sp = s.find(' ');
        if (sp == std::string::npos || sp == 0 || sp + 1 >= s.size() || s.find(' ', sp + 1) != std::string::npos)
          in.bad(where, fmt::format("expected \"left right\" (two tokens, one space), got \"{}\"", s));
        a = s.substr(0, sp);
        b = s.substr(sp + 1);
      } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
        a = m[0].get<std::string>();
        b = m[1].get<std::string>();
      } else {
        in.bad(where, "expected \"left right\" or [\"left\", \"right\"]");
      }
      const int32_t ia = lookup(in, where, a), ib = lookup(in, where, b);
      auto merged = token_to_id_.find(a + b);
      if (merged == token_to_id_.end())
        in.bad(where, fmt::format("merged token \"{}{}\" is not in model.vocab", a, b));
      merges_.insert_or_assign(pair_key(ia, ib), std::make_pair(static_cast<int32_t>(i), merged->second));
    }
  }

  int32_t lookup(const JsonIn& in, const std::string& where, const std::string& tok) const {
    auto it = token_to_id_.find(tok);
    if (it == token_to_id_.end()) in.bad(where, fmt::format("token \"{}\" is not in model.vocab", tok));
    return it->second;
  }

  // Accepts null, NFC, or a Sequence of NFC normalisers.
  void parse_normalizer(const JsonIn& in, const json* n, const std::string& where = "normalizer") {
    if (!n) return;
    const std::string type = in.str(*n, where, "type");
    if (type == "NFC") {
      nfc_ = true;
    } else if (type == "Sequence") {
      const json& list = in.req(*n, where, "normalizers");
      if (!list.is_array()) in.bad(where + ".normalizers", "expected a list");
      for (size_t i = 0; i < list.size(); ++i) parse_normalizer(in, &list[i], fmt::format("{}.normalizers[{}]", where, i));
    } else {
      in.bad(where + ".type", fmt::format("normalizer \"{}\" is not supported (expected null or NFC)", type));
    }
  }

  void parse_pre_tokenizer(const JsonIn& in, const json* p, const std::string& where = "pre_tokenizer") {
    if (!p) return;
    const std::string type = in.str(*p, where, "type");
    if (type == "Sequence") {
      const json& list = in.req(*p, where, "pretokenizers");
      if (!list.is_array()) in.bad(where + ".pretokenizers", "expected a list");
      for (size_t i = 0; i < list.size(); ++i)
        parse_pre_tokenizer(in, &list[i], fmt::format("{}.pretokenizers[{}]", where, i));
    } else if (type == "ByteLevel") {
      PreStep s;
      s.kind = PreStep::Kind::kByteLevel;
      s.add_prefix_space = in.flag(*p, where, "add_prefix_space", true);
      if (in.flag(*p, where, "use_regex", true)) s.regex = std::make_shared<Regex>(kGpt2Pattern, in, where);
      steps_.push_back(std::move(s));
    } else if (type == "Split") {
      PreStep s;
      const json& pat = in.req(*p, where, "pattern");
      std::string regex;
      if (const json* r = pat.is_object() ? in.opt(pat, "Regex") : nullptr; r && r->is_string()) {
        regex = r->get<std::string>();
      } else if (const json* l = pat.is_object() ? in.opt(pat, "String") : nullptr; l && l->is_string()) {
        for (char c : l->get<std::string>()) {
          if (static_cast<unsigned char>(c) < 0x80 && !std::isalnum(static_cast<unsigned char>(c))) regex += '\\';
          regex += c;
        }
      } else {
        in.bad(where + ".pattern", "expected {\"Regex\": \"...\"} or {\"String\": \"...\"}");
      }
      s.regex = std::make_shared<Regex>(regex, in, where + ".pattern");
      const std::string b = in.str(*p, where, "behavior");
      static const std::unordered_map<std::string, Behavior> kBehaviors = {
          {"Removed", Behavior::kRemoved},
          {"Isolated", Behavior::kIsolated},
          {"MergedWithPrevious", Behavior::kMergedWithPrevious},
          {"MergedWithNext", Behavior::kMergedWithNext},
          {"Contiguous", Behavior::kContiguous}};
      auto it = kBehaviors.find(b);
      if (it == kBehaviors.end())
        in.bad(where + ".behavior",
               fmt::format("\"{}\" is not one of Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous", b));
      s.behavior = it->second;
      s.invert = in.flag(*p, where, "invert", false);
      steps_.push_back(std::move(s));
    } else if (type == "Digits") {
      PreStep s;
      s.regex = std::make_shared<Regex>(R"(\p{N})", in, where);
      s.behavior = in.flag(*p, where, "individual_digits", false) ? Behavior::kIsolated : Behavior::kContiguous;
      steps_.push_back(std::move(s));
    } else {
      in.bad(where + ".type",
             fmt::format("pre-tokenizer \"{}\" is not supported (expected ByteLevel, Split, Digits or Sequence)", type));
    }
  }

  // The id → token table is sized by the largest id: refuse ids far beyond the number of entries
  // (a file claiming id 2^31 - 1 would otherwise allocate billions of strings).
  void check_dense(const JsonIn& in, const char* key, int64_t entries) const {
    if (vocab_size_ > 2 * entries + 65536)
      in.bad(key, fmt::format("token id {} is far beyond the {} vocabulary entries (ids must be nearly dense)",
                              vocab_size_ - 1, entries));
  }

  void parse_added_tokens(const JsonIn& in, const json* list) {
    if (!list) return;
    if (!list->is_array()) in.bad("added_tokens", "expected a list");
    for (size_t i = 0; i < list->size(); ++i) {
      const std::string where = fmt::format("added_tokens[{}]", i);
      const json& t = (*list)[i];
      AddedToken a;
      a.id = in.id(in.req(t, where, "id"), where + ".id");
      const std::string raw = in.str(t, where, "content");
      if (raw.empty()) in.bad(where + ".content", "empty token");
      if (utf8_error_offset(raw) >= 0) in.bad(where + ".content", "not valid UTF-8");
      if (in.flag(t, where, "single_word", false)) in.bad(where + ".single_word", "single_word tokens are not supported");
      a.special = in.flag(t, where, "special", false);
      a.lstrip = in.flag(t, where, "lstrip", false);
      a.rstrip = in.flag(t, where, "rstrip", false);
      a.normalized = in.flag(t, where, "normalized", !a.special);
      a.content = a.normalized ? normalize(raw) : raw;
      vocab_size_ = std::max<int64_t>(vocab_size_, int64_t{a.id} + 1);
      added_by_id_[a.id] = {raw, a.special};
      added_.push_back(std::move(a));
    }
    check_dense(in, "added_tokens", static_cast<int64_t>(token_to_id_.size() + added_.size()));
    id_to_token_.resize(static_cast<size_t>(vocab_size_));
    // Longest first, so the first hit at a position is the longest one.
    std::stable_sort(added_.begin(), added_.end(),
                     [](const AddedToken& x, const AddedToken& y) { return x.content.size() > y.content.size(); });
    for (size_t i = 0; i < added_.size(); ++i)
      added_by_first_byte_[static_cast<unsigned char>(added_[i].content[0])].push_back(i);
  }

  void parse_decoder(const JsonIn& in, const json* d) {
    if (!d) in.bad("decoder", "missing; expected a ByteLevel decoder");
    const std::string type = in.str(*d, "decoder", "type");
    if (type != "ByteLevel") in.bad("decoder.type", fmt::format("decoder \"{}\" is not supported (expected ByteLevel)", type));
  }

  // EOS/BOS from tokenizer_config.json beside the file, else from well-known special tokens.
  void resolve_special_ids() {
    auto id_of = [&](const std::string& content) -> int32_t {
      for (const auto& a : added_)
        if (added_by_id_.at(a.id).raw == content) return a.id;
      auto it = token_to_id_.find(content);
      return it == token_to_id_.end() ? -1 : it->second;
    };
    const auto cfg_path = (fs::path(path_).parent_path() / "tokenizer_config.json").string();
    std::error_code ec;
    if (fs::exists(cfg_path, ec)) {
      const json cfg = read_json_file(cfg_path, kMaxConfigBytes);
      if (!cfg.is_object()) fail("{}: expected an object", cfg_path);
      auto from_cfg = [&](const char* key, int32_t& out) {
        const json* v = cfg.contains(key) && !cfg[key].is_null() ? &cfg[key] : nullptr;
        if (!v) return;
        if (v->is_object() && v->contains("content")) v = &(*v)["content"];
        if (!v->is_string()) fail("{}: {}: expected a string or {{\"content\": ...}}", cfg_path, key);
        out = id_of(v->get<std::string>());
        if (out < 0) fail("{}: {}: \"{}\" is not a token of {}", cfg_path, key, v->get<std::string>(), path_);
      };
      from_cfg("eos_token", eos_);
      from_cfg("bos_token", bos_);
    }
    if (eos_ < 0)
      for (const char* t : {"<|endoftext|>", "</s>", "<|end_of_text|>", "<eos>"})
        if ((eos_ = id_of(t)) >= 0) break;
    if (bos_ < 0)
      for (const char* t : {"<s>", "<|begin_of_text|>", "<bos>"})
        if ((bos_ = id_of(t)) >= 0) break;
  }

  std::string normalize(std::string_view s) const {
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

  // Splits `s` at the added tokens of the given group (leftmost, then longest match); calls
  // emit(segment, -1) for text between them and emit("", id) for each token.
  template <typename Emit>
  void split_added(std::string_view s, bool normalized, Emit&& emit) const {
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
  static size_t strip_left(std::string_view s, size_t floor, size_t b) {
    size_t run = floor;
    for (size_t i = floor; i < b;)
      if (!is_unicode_space(utf8_next(s, i))) run = i;
    return run;
  }

  // End of the whitespace run starting at `e`.
  static size_t strip_right(std::string_view s, size_t e) {
    while (e < s.size()) {
      size_t i = e;
      if (!is_unicode_space(utf8_next(s, i))) break;
      e = i;
    }
    return e;
  }

  // Pre-tokenises one normalised segment and appends the BPE ids of its pieces.
  void encode_segment(std::string_view seg, Scratch& sc, std::vector<int32_t>& ids) const {
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

  static uint64_t pair_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }

  // BPE of one pre-tokenised piece: its characters, then merges applied lowest rank first (leftmost
  // on ties) until none applies. Results are cached per piece.
  void bpe(const std::string& piece, std::vector<int32_t>& ids) const {
    if (ignore_merges_) {
      auto it = token_to_id_.find(piece);
      if (it != token_to_id_.end()) return ids.push_back(it->second);
    }
    {
      std::lock_guard<std::mutex> lock(cache_mu_);
      auto it = cache_.find(piece);
      if (it != cache_.end()) {
        ids.insert(ids.end(), it->second.begin(), it->second.end());
        return;
      }
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
    std::lock_guard<std::mutex> lock(cache_mu_);
    if (cache_.size() >= kCacheEntries) cache_.clear();
    if (piece.size() < 256) cache_.emplace(piece, std::move(out));
  }

  static constexpr size_t kCacheEntries = 1 << 16;

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
  mutable std::mutex cache_mu_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

}  // namespace

std::unique_ptr<Tokenizer> load_hf_bpe(const std::string& tokenizer_json) {
  return std::make_unique<BpeTokenizer>(tokenizer_json);
}

}  // namespace drope::text
