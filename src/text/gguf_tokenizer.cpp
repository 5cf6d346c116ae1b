// A GGUF file's tokenizer metadata → the files of an HF / SentencePiece tokenizer (docs/gguf.md).
#include "drope/text/gguf_tokenizer.h"

#include <cmath>
#include <cstring>
#include <map>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "drope/core/error.h"
#include "drope/core/utf8.h"

namespace drope::text {

using nlohmann::json;

namespace {

constexpr int64_t kMaxVocab = int64_t{1} << 24;

// Token types as GGUF stores them (the SentencePiece piece-type numbering).
enum TokenType { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };

// tokenizer.ggml.pre → the pre-tokenizer of the byte-level BPE, as the model's own tokenizer.json has it.
const char* kGpt2Split = nullptr;  // ByteLevel with GPT-2's regex
const char* kLlama3Split =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* kQwen2Split =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

struct PreTokenizer {
  const char* split;     // a Split regex before a regex-free ByteLevel, or nullptr: ByteLevel with GPT-2's regex
  bool digits;           // individual digits first (SmolLM)
  bool ignore_merges;    // whole-word vocabulary hits skip the merges (Llama 3)
};

const std::map<std::string, PreTokenizer>& pre_tokenizers() {
  static const std::map<std::string, PreTokenizer> kMap = {
      {"default", {kGpt2Split, false, false}},    {"gpt-2", {kGpt2Split, false, false}},
      {"gpt2", {kGpt2Split, false, false}},       {"smollm", {kGpt2Split, true, false}},
      {"llama-bpe", {kLlama3Split, false, true}}, {"llama3", {kLlama3Split, false, true}},
      {"llama-v3", {kLlama3Split, false, true}},  {"smaug-bpe", {kLlama3Split, false, true}},
      {"qwen2", {kQwen2Split, false, false}},     {"deepseek-r1-qwen", {kQwen2Split, false, false}},
  };
  return kMap;
}

json pre_tokenizer_json(const PreTokenizer& p) {
  json steps = json::array();
  if (p.digits) steps.push_back({{"type", "Digits"}, {"individual_digits", true}});
  if (p.split) {
    steps.push_back(
        {{"type", "Split"}, {"pattern", {{"Regex", p.split}}}, {"behavior", "Isolated"}, {"invert", false}});
  }
  steps.push_back(
      {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", p.split == nullptr}});
  if (steps.size() == 1) return steps[0];
  return {{"type", "Sequence"}, {"pretokenizers", steps}};
}

// The vocabulary (tokens and types) with every entry checked.
struct Vocab {
  std::vector<std::string> tokens;
  std::vector<int> types;  // empty when the file has no token_type
};

Vocab read_vocab(const gguf::File& f) {
  Vocab v;
  const json& tokens = f.get_array("tokenizer.ggml.tokens", gguf::ValueType::kString);
  if (tokens.empty() || static_cast<int64_t>(tokens.size()) > kMaxVocab)
    fail("{}: tokenizer.ggml.tokens has {} entries (expected 1 to {})", f.path(), tokens.size(), kMaxVocab);
  v.tokens.reserve(tokens.size());
  std::unordered_map<std::string, size_t> seen;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const auto& t = tokens[i].get_ref<const std::string&>();
    if (t.empty()) fail("{}: tokenizer.ggml.tokens[{}] is empty", f.path(), i);
    if (utf8_error_offset(t) >= 0) fail("{}: tokenizer.ggml.tokens[{}] is not valid UTF-8", f.path(), i);
    if (auto [it, fresh] = seen.emplace(t, i); !fresh)
      fail("{}: tokenizer.ggml.tokens[{}] \"{}\" repeats tokens[{}]", f.path(), i, t, it->second);
    v.tokens.push_back(t);
  }
  if (f.has("tokenizer.ggml.token_type")) {
    const json& types = f.get_array("tokenizer.ggml.token_type", gguf::ValueType::kInt32);
    if (types.size() != tokens.size())
      fail("{}: tokenizer.ggml.token_type has {} entries but tokenizer.ggml.tokens has {}", f.path(), types.size(),
           tokens.size());
    for (size_t i = 0; i < types.size(); ++i) {
      const int64_t t = types[i].get<int64_t>();
      if (t < kNormal || t > kByte)
        fail("{}: tokenizer.ggml.token_type[{}] is {} (expected 1 normal .. 6 byte)", f.path(), i, t);
      v.types.push_back(static_cast<int>(t));
    }
  }
  return v;
}

// A special-token id key: absent → -1; present → in [0, vocab).
int64_t special_id(const gguf::File& f, const char* key, size_t vocab) {
  if (!f.has(key)) return -1;
  const int64_t id = f.get_int(key);
  if (id < 0 || id >= static_cast<int64_t>(vocab))
    fail("{}: {} = {} is outside the vocabulary [0, {})", f.path(), key, id, vocab);
  return id;
}

std::string config_json(const gguf::File& f, const Vocab& v, bool default_add_bos) {
  json cfg = json::object();
  const std::pair<const char*, const char*> specials[] = {{"bos_token", "tokenizer.ggml.bos_token_id"},
                                                          {"eos_token", "tokenizer.ggml.eos_token_id"},
                                                          {"unk_token", "tokenizer.ggml.unknown_token_id"},
                                                          {"pad_token", "tokenizer.ggml.padding_token_id"}};
  for (const auto& [name, key] : specials) {
    const int64_t id = special_id(f, key, v.tokens.size());
    cfg[name] = id >= 0 ? json(v.tokens[static_cast<size_t>(id)]) : json(nullptr);
  }
  cfg["add_bos_token"] = f.get_bool("tokenizer.ggml.add_bos_token", default_add_bos);
  cfg["add_eos_token"] = f.get_bool("tokenizer.ggml.add_eos_token", false);
  if (f.has("tokenizer.chat_template")) cfg["chat_template"] = f.get_string("tokenizer.chat_template");
  return cfg.dump(2);
}

std::string bpe_json(const gguf::File& f, const Vocab& v) {
  const std::string pre = f.get_string("tokenizer.ggml.pre", "default");
  auto it = pre_tokenizers().find(pre);
  if (it == pre_tokenizers().end())
    fail("{}: tokenizer.ggml.pre \"{}\" is not a pre-tokenizer drope knows (expected one of: {})", f.path(), pre,
         gguf_pre_tokenizer_names());
  json vocab = json::object();
  json added = json::array();
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    vocab[v.tokens[i]] = i;
    const int type = v.types.empty() ? kNormal : v.types[i];
    if (type == kControl || type == kUserDefined)
      added.push_back({{"id", i},
                       {"content", v.tokens[i]},
                       {"single_word", false},
                       {"lstrip", false},
                       {"rstrip", false},
                       {"normalized", false},
                       {"special", type == kControl}});
  }
  json merges = json::array();
  if (f.has("tokenizer.ggml.merges")) {
    const json& m = f.get_array("tokenizer.ggml.merges", gguf::ValueType::kString);
    for (size_t i = 0; i < m.size(); ++i) {
      const auto& s = m[i].get_ref<const std::string&>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || sp == 0 || sp + 1 == s.size() || s.find(' ', sp + 1) != std::string::npos)
        fail("{}: tokenizer.ggml.merges[{}] \"{}\" is not two tokens separated by one space", f.path(), i, s);
      merges.push_back(s);
    }
  }
  const int64_t unk = special_id(f, "tokenizer.ggml.unknown_token_id", v.tokens.size());
  json root = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added},
      {"normalizer", nullptr},
      {"pre_tokenizer", pre_tokenizer_json(it->second)},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", unk >= 0 && !v.types.empty() && v.types[static_cast<size_t>(unk)] == kUnknown
                          ? json(v.tokens[static_cast<size_t>(unk)])
                          : json(nullptr)},
        {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr},
        {"fuse_unk", false},
        {"byte_fallback", false},
        {"ignore_merges", it->second.ignore_merges},
        {"vocab", vocab},
        {"merges", merges}}}};
  return root.dump();
}

// ---- a SentencePiece ModelProto in protobuf wire format (fields of sentencepiece_model.proto)
void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}
void put_tag(std::string& out, int field, int wire) { put_varint(out, static_cast<uint64_t>(field) << 3 | wire); }
void put_bytes(std::string& out, int field, const std::string& s) {
  put_tag(out, field, 2);
  put_varint(out, s.size());
  out += s;
}
void put_uint(std::string& out, int field, uint64_t v) {
  put_tag(out, field, 0);
  put_varint(out, v);
}
void put_int(std::string& out, int field, int64_t v) { put_uint(out, field, static_cast<uint64_t>(v)); }
void put_float(std::string& out, int field, float v) {
  put_tag(out, field, 5);
  char b[4];
  std::memcpy(b, &v, 4);
  out.append(b, 4);
}

std::string sentencepiece_model(const gguf::File& f, const Vocab& v) {
  const json& scores = f.get_array("tokenizer.ggml.scores", gguf::ValueType::kFloat32);
  if (scores.size() != v.tokens.size())
    fail("{}: tokenizer.ggml.scores has {} entries but tokenizer.ggml.tokens has {}", f.path(), scores.size(),
         v.tokens.size());
  if (v.types.empty())
    fail("{}: metadata 'tokenizer.ggml.token_type' is missing (a SentencePiece vocabulary needs it)", f.path());
  std::string proto;
  bool has_bytes = false;
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    const double s = scores[i].get<double>();
    if (!std::isfinite(s)) fail("{}: tokenizer.ggml.scores[{}] is not finite", f.path(), i);
    std::string piece;
    put_bytes(piece, 1, v.tokens[i]);
    put_float(piece, 2, static_cast<float>(s));
    put_uint(piece, 3, static_cast<uint64_t>(v.types[i]));
    put_bytes(proto, 1, piece);
    has_bytes |= v.types[i] == kByte;
  }
  std::string trainer;
  put_uint(trainer, 3, 2);  // model_type BPE (llama.cpp's "llama" vocabulary is a BPE SentencePiece model)
  put_uint(trainer, 35, has_bytes ? 1 : 0);  // byte_fallback
  put_int(trainer, 40, special_id(f, "tokenizer.ggml.unknown_token_id", v.tokens.size()));
  put_int(trainer, 41, special_id(f, "tokenizer.ggml.bos_token_id", v.tokens.size()));
  put_int(trainer, 42, special_id(f, "tokenizer.ggml.eos_token_id", v.tokens.size()));
  put_int(trainer, 43, special_id(f, "tokenizer.ggml.padding_token_id", v.tokens.size()));
  put_bytes(proto, 2, trainer);
  std::string norm;
  put_bytes(norm, 1, "identity");
  put_uint(norm, 3, f.get_bool("tokenizer.ggml.add_space_prefix", true) ? 1 : 0);  // add_dummy_prefix
  put_uint(norm, 4, 0);  // remove_extra_whitespaces
  put_uint(norm, 5, 1);  // escape_whitespaces
  put_bytes(proto, 3, norm);
  return proto;
}

}  // namespace

std::string gguf_pre_tokenizer_names() {
  std::string out;
  for (const auto& kv : pre_tokenizers()) out += (out.empty() ? "" : ", ") + kv.first;
  return out;
}

std::string GgufTokenizerFiles::main_file() const { return kind == "hf-bpe" ? "tokenizer.json" : "tokenizer.model"; }

std::vector<std::pair<std::string, std::string>> GgufTokenizerFiles::files() const {
  return {{main_file(), kind == "hf-bpe" ? tokenizer_json : tokenizer_model},
          {"tokenizer_config.json", tokenizer_config_json}};
}

namespace {

// The files from the metadata, as read (the loaders below check what they describe).
GgufTokenizerFiles build_files(const gguf::File& f) {
  const std::string model = f.get_string("tokenizer.ggml.model");
  GgufTokenizerFiles out;
  const Vocab v = read_vocab(f);
  if (model == "gpt2") {
    out.kind = "hf-bpe";
    out.tokenizer_json = bpe_json(f, v);
    out.tokenizer_config_json = config_json(f, v, false);
  } else if (model == "llama") {
    out.kind = "sentencepiece";
    out.tokenizer_model = sentencepiece_model(f, v);
    out.tokenizer_config_json = config_json(f, v, true);
  } else {
    fail("{}: tokenizer.ggml.model \"{}\" is not supported (expected gpt2 or llama)", f.path(), model);
  }
  return out;
}

// The files loaded as every tool loads a model directory's tokenizer; `label` names them in errors.
std::unique_ptr<Tokenizer> load_files(const std::string& label, const GgufTokenizerFiles& files) {
  if (files.kind == "hf-bpe") return load_hf_bpe_text(label, files.tokenizer_json, files.tokenizer_config_json);
  return load_sentencepiece_bytes(label, files.tokenizer_model);
}

}  // namespace

GgufTokenizerFiles gguf_tokenizer_files(const gguf::File& f) {
  GgufTokenizerFiles out = build_files(f);
  load_files(fmt::format("{} (its tokenizer as {})", f.path(), out.main_file()), out);  // as every tool loads it
  return out;
}

std::unique_ptr<Tokenizer> load_gguf_tokenizer(const std::string& path) {
  const gguf::File f(path);
  return load_files(path, build_files(f));
}

}  // namespace drope::text
