// HF `tokenizer.json` byte-level BPE, loading: the model (vocab, merges), normaliser, pre-tokenisers,
// added tokens and decoder sections, each validated with errors naming the file and key path, and the
// EOS/BOS ids from tokenizer_config.json.
#include <algorithm>
#include <atomic>
#include <cctype>
#include <filesystem>

#include "bpe_internal.h"
#include "drope/core/error.h"
#include "drope/core/files.h"
#include "drope/core/json.h"

namespace fs = std::filesystem;

namespace drope::text::bpe_detail {

namespace {

// The pre-tokenisation regex of GPT-2's ByteLevel (use_regex = true).
constexpr const char* kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Ids of tokenizers for the per-thread BPE caches (bpe.cpp); 0 is no tokenizer.
std::atomic<uint64_t> next_cache_owner{1};

}  // namespace

BpeTokenizer::BpeTokenizer(std::string path) : path_(std::move(path)), cache_owner_(next_cache_owner++) {
  load(read_file(path_), nullptr);
}

BpeTokenizer::BpeTokenizer(std::string label, const std::string& text, const std::string& config_text)
    : path_(std::move(label)), cache_owner_(next_cache_owner++) {
  load(text, &config_text);
}

void BpeTokenizer::load(const std::string& text, const std::string* config_text) {
  const json root = parse_json(text, path_);
  JsonIn in{path_};
  if (!root.is_object()) in.bad("(top level)", "expected an object");
  parse_model(in, in.req(root, "", "model"));
  parse_normalizer(in, in.opt(root, "normalizer"));
  parse_pre_tokenizer(in, in.opt(root, "pre_tokenizer"));
  parse_added_tokens(in, in.opt(root, "added_tokens"));
  parse_decoder(in, in.opt(root, "decoder"));
  resolve_special_ids(config_text);
}

void BpeTokenizer::parse_model(const JsonIn& in, const json& model) {
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
  if (!vocab.is_object())
    in.bad("model.vocab", fmt::format("expected an object token → id, got {}", vocab.type_name()));
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
    if (it == token_to_id_.end())
      in.bad("model.unk_token", fmt::format("\"{}\" is not in model.vocab", unk->get<std::string>()));
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
    if (merged == token_to_id_.end()) in.bad(where, fmt::format("merged token \"{}{}\" is not in model.vocab", a, b));
    merges_.insert_or_assign(pair_key(ia, ib), std::make_pair(static_cast<int32_t>(i), merged->second));
  }
}

int32_t BpeTokenizer::lookup(const JsonIn& in, const std::string& where, const std::string& tok) const {
  auto it = token_to_id_.find(tok);
  if (it == token_to_id_.end()) in.bad(where, fmt::format("token \"{}\" is not in model.vocab", tok));
  return it->second;
}

void BpeTokenizer::parse_normalizer(const JsonIn& in, const json* n, const std::string& where) {
  if (!n) return;
  const std::string type = in.str(*n, where, "type");
  if (type == "NFC") {
    nfc_ = true;
  } else if (type == "Sequence") {
    const json& list = in.req(*n, where, "normalizers");
    if (!list.is_array()) in.bad(where + ".normalizers", "expected a list");
    for (size_t i = 0; i < list.size(); ++i)
      parse_normalizer(in, &list[i], fmt::format("{}.normalizers[{}]", where, i));
  } else {
    in.bad(where + ".type", fmt::format("normalizer \"{}\" is not supported (expected null or NFC)", type));
  }
}

void BpeTokenizer::parse_pre_tokenizer(const JsonIn& in, const json* p, const std::string& where) {
  if (!p) return;
  const std::string type = in.str(*p, where, "type");
  if (type == "Sequence") {
    const json& list = in.req(*p, where, "pretokenizers");
    if (!list.is_array()) in.bad(where + ".pretokenizers", "expected a list");
    for (size_t i = 0; i < list.size(); ++i)
      parse_pre_tokenizer(in, &list[i], fmt::format("{}.pretokenizers[{}]", where, i));
  } else if (type == "ByteLevel") {
    // A second ByteLevel maps the already mapped bytes again: each one doubles the text.
    for (const auto& prev : steps_)
      if (prev.kind == PreStep::Kind::kByteLevel)
        in.bad(where + ".type", "a second ByteLevel pre-tokenizer is not supported (each maps the text's bytes again)");
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
  if (steps_.size() > kMaxPreSteps)
    in.bad(where, fmt::format("more than {} pre-tokenizer steps (each one passes over the whole text)", kMaxPreSteps));
}

void BpeTokenizer::check_dense(const JsonIn& in, const char* key, int64_t entries) const {
  if (vocab_size_ > 2 * entries + 65536)
    in.bad(key, fmt::format("token id {} is far beyond the {} vocabulary entries (ids must be nearly dense)",
                            vocab_size_ - 1, entries));
}

void BpeTokenizer::parse_added_tokens(const JsonIn& in, const json* list) {
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
  check_added_ids(in, *list);
  id_to_token_.resize(static_cast<size_t>(vocab_size_));
  // Longest first, so the first hit at a position is the longest one.
  std::stable_sort(added_.begin(), added_.end(),
                   [](const AddedToken& x, const AddedToken& y) { return x.content.size() > y.content.size(); });
  for (size_t i = 0; i < added_.size(); ++i)
    added_by_first_byte_[static_cast<unsigned char>(added_[i].content[0])].push_back(i);
}

// HF tokenizers does not take an added token's id from the file: it numbers the list itself, in order. A token
// already in model.vocab, or added before, keeps that id; a new one takes max(the vocabulary's size, the largest
// added id + 1) (tokenizers' AddedVocabulary::add_tokens). A file whose ids differ from that numbering (an id that
// collides with a vocabulary entry, two tokens sharing an id, a gap, a reordering) would give other ids than HF
// does, so it is refused naming the token, its id and HF's (tests/py/test_tokenizer_parity.py).
void BpeTokenizer::check_added_ids(const JsonIn& in, const json& list) const {
  const auto vocab_entries = static_cast<int64_t>(token_to_id_.size());
  std::unordered_map<std::string, std::pair<int32_t, size_t>> added;  // content → (id, index), as HF numbers them
  std::unordered_map<int32_t, size_t> index_of_id;
  int64_t max_added = -1;
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string raw = list[i]["content"].get<std::string>();
    const auto declared = list[i]["id"].get<int64_t>();
    int64_t hf = 0;
    std::string why;
    if (auto v = token_to_id_.find(raw); v != token_to_id_.end()) {
      hf = v->second;
      why = fmt::format("it is model.vocab's token {}", hf);
    } else if (auto a = added.find(raw); a != added.end()) {
      hf = a->second.first;
      why = fmt::format("added_tokens[{}] adds it with id {}", a->second.second, hf);
    } else {
      hf = max_added < 0 || max_added < vocab_entries ? vocab_entries : max_added + 1;
      if (declared < static_cast<int64_t>(id_to_token_.size()) && !id_to_token_[declared].empty())
        why = fmt::format("id {} is model.vocab's \"{}\"", declared, id_to_token_[declared]);
      else if (auto o = index_of_id.find(static_cast<int32_t>(declared)); o != index_of_id.end())
        why = fmt::format("id {} is also added_tokens[{}]'s", declared, o->second);
      else why = "a token not in model.vocab takes the next id after the vocabulary and the tokens added before it";
    }
    if (declared != hf)
      in.bad(
          fmt::format("added_tokens[{}]", i),
          fmt::format("\"{}\" has id {}, but HF tokenizers gives it id {} ({}); fix the id", raw, declared, hf, why));
    max_added = std::max(max_added, hf);
    added.emplace(raw, std::make_pair(static_cast<int32_t>(hf), i));
    index_of_id.emplace(static_cast<int32_t>(hf), i);
  }
}

void BpeTokenizer::parse_decoder(const JsonIn& in, const json* d) {
  if (!d) in.bad("decoder", "missing; expected a ByteLevel decoder");
  const std::string type = in.str(*d, "decoder", "type");
  if (type != "ByteLevel")
    in.bad("decoder.type", fmt::format("decoder \"{}\" is not supported (expected ByteLevel)", type));
}

void BpeTokenizer::resolve_special_ids(const std::string* config_text) {
  auto id_of = [&](const std::string& content) -> int32_t {
    for (const auto& a : added_)
      if (added_by_id_.at(a.id).raw == content) return a.id;
    auto it = token_to_id_.find(content);
    return it == token_to_id_.end() ? -1 : it->second;
  };
  const auto cfg_path =
      config_text ? path_ + " (tokenizer_config)" : (fs::path(path_).parent_path() / "tokenizer_config.json").string();
  std::error_code ec;
  if (config_text || fs::exists(cfg_path, ec)) {
    const json cfg = config_text ? parse_json(*config_text, cfg_path) : read_json_file(cfg_path, kMaxConfigBytes);
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

}  // namespace drope::text::bpe_detail
