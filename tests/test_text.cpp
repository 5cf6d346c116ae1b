// Token shards, the block loader, tokenizers and dataset preparation (torch-free drope_text).
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "drope/core/files.h"
#include "drope/text/line_reader.h"
#include "drope/text/prepare.h"
#include "drope/text/shards.h"
#include "drope/text/tokenizer.h"
#include "test_util.h"

namespace fs = std::filesystem;
using json = nlohmann::json;
using drope::test::expect_error;
using drope::test::tmp_dir;
using namespace drope::text;

namespace {

void write(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out << bytes;
}

template <typename T>
void put(std::string& s, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  s.append(b, sizeof(T));
}

// A shard header with the given fields, followed by `data_bytes` zero bytes.
std::string shard_bytes(const char* magic, uint32_t version, uint32_t header, uint32_t tb, int32_t eos, uint64_t count,
                        size_t data_bytes) {
  std::string s(magic, 8);
  put(s, version);
  put(s, header);
  put(s, tb);
  put(s, eos);
  put(s, count);
  s.append(data_bytes, '\0');
  return s;
}

// A stream whose token at position p is p (uint32 shards of `per_shard` tokens).
std::shared_ptr<TokenStream> position_stream(const std::string& dir, int64_t n, int64_t per_shard) {
  ShardWriter w(dir, "shard", 4, -1, per_shard);
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) ids[i] = static_cast<int32_t>(i);
  w.add_document(ids);
  std::vector<std::string> paths;
  for (const auto& s : w.finish()) paths.push_back((fs::path(dir) / s.file).string());
  return TokenStream::from_shards(paths);
}

// GPT-2's byte → character table, written from its definition (printable Latin-1 bytes stand for
// themselves, the rest take 256, 257, ... in order).
std::vector<std::string> byte_chars() {
  std::vector<std::string> out(256);
  int extra = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
    const int cp = printable ? b : extra++;
    std::string s;
    if (cp < 0x80) s += static_cast<char>(cp);
    else {
      s += static_cast<char>(0xC0 | (cp >> 6));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    }
    out[b] = s;
  }
  return out;
}

// A byte-level BPE tokenizer.json: the 256 byte tokens, a few merges, and <|endoftext|> (id 256 + merges).
json byte_bpe_json() {
  const auto bc = byte_chars();
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[bc[b]] = b;
  const std::string sp = bc[' '];
  const std::vector<std::pair<std::string, std::string>> merges = {
      {"t", "h"}, {"th", "e"}, {sp, "the"}, {"a", "n"}, {sp, "an"}};
  json m = json::array();
  int next = 256;
  for (const auto& [a, b] : merges) {
    vocab[a + b] = next++;
    m.push_back(json::array({a, b}));
  }
  return {{"version", "1.0"},
          {"added_tokens", json::array({{{"id", next},
                                         {"content", "<|endoftext|>"},
                                         {"single_word", false},
                                         {"lstrip", false},
                                         {"rstrip", false},
                                         {"normalized", false},
                                         {"special", true}}})},
          {"normalizer", nullptr},
          {"pre_tokenizer",
           {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}}},
          {"post_processor", nullptr},
          {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
          {"model",
           {{"type", "BPE"},
            {"dropout", nullptr},
            {"unk_token", nullptr},
            {"fuse_unk", false},
            {"byte_fallback", false},
            {"vocab", vocab},
            {"merges", m}}}};
}

std::string write_tokenizer(const std::string& dir, const json& j) {
  const std::string p = (fs::path(dir) / "tokenizer.json").string();
  write(p, j.dump());
  return p;
}

// Some real prose: the first `max_bytes` of a few licence texts, or "" when the machine has none.
std::string license_text(size_t max_bytes) {
  std::string out;
  for (const char* f : {"/usr/share/common-licenses/Apache-2.0", "/usr/share/common-licenses/GPL-3",
                        "/usr/share/common-licenses/MPL-2.0"}) {
    std::error_code ec;
    if (fs::exists(f, ec)) out += drope::read_file(f).substr(0, max_bytes / 3);
  }
  return out;
}

}  // namespace

// ---------------------------------------------------------------------------------------------------
// Shards

TEST(Shard, RoundTripUint16AndUint32) {
  const auto dir = tmp_dir("shard_round_trip");
  for (int tb : {2, 4}) {
    const std::string sub = (fs::path(dir) / std::to_string(tb)).string();
    ShardWriter w(sub, "shard", tb, 7, 4);
    const std::vector<std::vector<int32_t>> docs = {{1, 2, 3}, {}, {4, 5}, {6, 60000, 8, 9, 10}};
    std::vector<int64_t> expect;
    for (auto d : docs) {
      if (tb == 4 && !d.empty()) d[0] += 100000;
      w.add_document(d);
      expect.insert(expect.end(), d.begin(), d.end());
      expect.push_back(7);
    }
    const auto shards = w.finish();
    EXPECT_EQ(w.documents(), 4);
    EXPECT_EQ(w.tokens(), static_cast<int64_t>(expect.size()));
    ASSERT_EQ(shards.size(), 4u);  // 14 tokens in shards of 4
    EXPECT_EQ(shards[0].file, "shard_00000.bin");
    EXPECT_EQ(shards[3].tokens, 2);
    std::vector<std::string> paths;
    for (const auto& s : shards) paths.push_back((fs::path(sub) / s.file).string());
    EXPECT_EQ(fs::file_size(paths[0]), kShardHeaderBytes + 4u * tb);
    const auto stream = TokenStream::from_shards(paths);
    ASSERT_EQ(stream->size(), static_cast<int64_t>(expect.size()));
    std::vector<int64_t> got(expect.size());
    stream->read(0, stream->size(), got.data());
    EXPECT_EQ(got, expect);
    std::vector<int64_t> mid(5);
    stream->read(3, 5, mid.data());  // crosses a shard boundary
    EXPECT_EQ(mid, std::vector<int64_t>(expect.begin() + 3, expect.begin() + 8));
    TokenShard one(paths[0]);
    EXPECT_EQ(one.eos_id(), 7);
    EXPECT_EQ(one.token_bytes(), tb);
  }
  EXPECT_THROW(ShardWriter(dir, "x", 2, -1, 10).add_document({70000}), drope::Error);
}

TEST(Shard, RejectsHostileHeaders) {
  const auto dir = tmp_dir("shard_hostile");
  struct Case {
    std::string name, bytes, needle;
  };
  const std::vector<Case> cases = {
      {"magic.bin", shard_bytes("NOTASHRD", 1, 32, 2, -1, 4, 8), "bad magic"},
      {"short.bin", std::string("DRPTOK01\x01", 9), "smaller than the 32-byte header"},
      {"empty.bin", "", "smaller than the 32-byte header"},
      {"truncated.bin", shard_bytes("DRPTOK01", 1, 32, 2, -1, 100, 100), "truncated"},
      {"absurd.bin", shard_bytes("DRPTOK01", 1, 32, 2, -1, 1000000000000ull, 16), "1000000000000 tokens"},
      {"overflow.bin", shard_bytes("DRPTOK01", 1, 32, 4, -1, ~0ull, 16), "truncated"},
      {"version.bin", shard_bytes("DRPTOK01", 2, 32, 2, -1, 4, 8), "unsupported shard version 2"},
      {"header.bin", shard_bytes("DRPTOK01", 1, 64, 2, -1, 4, 8), "header size 64"},
      {"dtype.bin", shard_bytes("DRPTOK01", 1, 32, 3, -1, 4, 12), "unsupported token size 3"},
      {"eos.bin", shard_bytes("DRPTOK01", 1, 32, 2, -5, 4, 8), "invalid EOS id"},
      {"trailing.bin", shard_bytes("DRPTOK01", 1, 32, 2, -1, 4, 9), "trailing bytes"},
  };
  for (const auto& c : cases) {
    const std::string p = (fs::path(dir) / c.name).string();
    write(p, c.bytes);
    expect_error([&] { TokenShard s(p); }, {p, c.needle});
  }
  expect_error([&] { TokenShard s((fs::path(dir) / "missing.bin").string()); }, {"missing.bin", "not found"});
  expect_error([&] { TokenShard s(dir); }, {dir});
}

TEST(Shard, IndexIsValidatedAndMatchedAgainstShards) {
  const auto dir = tmp_dir("shard_index");
  ShardWriter w((fs::path(dir) / "train").string(), "shard", 2, 3, 100);
  w.add_document({1, 2});
  DatasetIndex idx;
  idx.tokenizer = {"tokenizer.json", "hf-bpe", 10, 3, -1};
  idx.splits["train"] = {{{"train/shard_00000.bin", 3}}, 3, 1};
  w.finish();
  const std::string index_path = (fs::path(dir) / "index.json").string();
  write(index_path, index_to_json(idx).dump());
  const auto stream = TokenStream::open(dir, "train");
  EXPECT_EQ(stream->size(), 3);
  expect_error([&] { TokenStream::open(dir, "val"); }, {index_path, "no split \"val\""});

  auto bad = [&](const std::function<void(json&)>& edit, std::initializer_list<std::string> needles) {
    json j = index_to_json(idx);
    edit(j);
    write(index_path, j.dump());
    expect_error([&] { TokenStream::open(dir, "train"); }, needles);
  };
  bad([](json& j) { j["format"] = "other"; }, {index_path, "format"});
  bad([](json& j) { j["version"] = 9; }, {index_path, "unsupported version 9"});
  bad([](json& j) { j["dtype"] = "int8"; }, {index_path, "dtype", "uint16 or uint32"});
  bad([](json& j) { j["splits"]["train"]["shards"][0]["tokens"] = "3"; },
      {index_path, "splits.train.shards[0].tokens", "integer"});
  bad([](json& j) { j["splits"]["train"]["shards"][0]["file"] = "../x.bin"; },
      {index_path, "splits.train.shards[0].file"});
  bad([](json& j) { j["splits"]["train"]["tokens"] = 4; }, {index_path, "does not match"});
  bad([](json& j) { j["tokenizer"].erase("vocab_size"); }, {index_path, "tokenizer.vocab_size", "missing"});
  bad(
      [](json& j) {
        j["splits"]["train"]["shards"][0]["tokens"] = 2;
        j["splits"]["train"]["tokens"] = 2;
      },
      {"shard_00000.bin", "holds 3 tokens", "lists 2"});
  bad([](json& j) { j["tokenizer"]["eos_id"] = 4; }, {"shard_00000.bin", "EOS id 3"});
  bad(
      [](json& j) {
        j["tokenizer"]["vocab_size"] = 2;
        j["tokenizer"]["eos_id"] = -1;
      },
      {"shard_00000.bin", "EOS id 3"});
  write(index_path, "{ not json");
  expect_error([&] { TokenStream::open(dir, "train"); }, {index_path, "invalid JSON"});
}

// ---------------------------------------------------------------------------------------------------
// Loader

TEST(Loader, BlocksAreShiftedWindowsAndRanksDoNotOverlap) {
  const auto dir = tmp_dir("loader_ranks");
  const int64_t seq = 8, n = 1000;
  const auto stream = position_stream(dir, n, 77);
  for (bool shuffle : {false, true}) {
    std::set<int64_t> seen;
    int64_t per_rank = 0;
    for (int rank = 0; rank < 2; ++rank) {
      TokenLoader loader(stream, {seq, rank, 2, shuffle, 5});
      per_rank = loader.blocks_per_epoch();
      EXPECT_EQ(per_rank, (n - 1) / seq / 2);
      for (int64_t i = 0; i < per_rank; ++i) {
        std::vector<int64_t> b(seq + 1);
        loader.next(b.data());
        EXPECT_EQ(b[0] % seq, 0);
        for (int64_t t = 0; t <= seq; ++t) ASSERT_EQ(b[t], b[0] + t);
        EXPECT_TRUE(seen.insert(b[0] / seq).second) << "block " << b[0] / seq << " read twice";
        if (!shuffle) {
          EXPECT_EQ(b[0] / seq, i * 2 + rank);
        }
      }
    }
    EXPECT_EQ(static_cast<int64_t>(seen.size()), 2 * per_rank);
    if (!shuffle) {
      EXPECT_EQ(*seen.rbegin(), 2 * per_rank - 1);
    }
    EXPECT_LT(*seen.rbegin(), (n - 1) / seq);
  }
  expect_error([&] { TokenLoader l(stream, {seq, 2, 2, false, 0}); }, {"rank 2"});
  expect_error([&] { TokenLoader l(stream, {600, 0, 2, false, 0}); }, {"too few"});
}

TEST(Loader, ShuffleIsAFreshPermutationPerEpoch) {
  const auto dir = tmp_dir("loader_shuffle");
  const auto stream = position_stream(dir, 4001, 1000);
  TokenLoader a(stream, {4, 0, 1, true, 11}), b(stream, {4, 0, 1, true, 11}), c(stream, {4, 0, 1, true, 12});
  const int64_t n = a.blocks_per_epoch();
  ASSERT_EQ(n, 1000);
  std::vector<int64_t> e0, e1;
  for (int64_t i = 0; i < n; ++i) {
    e0.push_back(a.block_id(0, i));
    e1.push_back(a.block_id(1, i));
    EXPECT_EQ(a.block_id(0, i), b.block_id(0, i));
  }
  auto sorted = e0;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(sorted[i], i);
  EXPECT_NE(e0, e1);
  int same = 0;
  for (int64_t i = 0; i < n; ++i) same += c.block_id(0, i) == e0[i];
  EXPECT_LT(same, 20);
}

TEST(Loader, ResumesAtTheExactPosition) {
  const auto dir = tmp_dir("loader_resume");
  const auto stream = position_stream(dir, 500, 64);
  for (bool shuffle : {false, true}) {
    const LoaderOptions opts{7, 1, 3, shuffle, 42};
    TokenLoader a(stream, opts);
    const int64_t k = a.blocks_per_epoch() + 5;  // past an epoch boundary
    for (int64_t i = 0; i < k; ++i) a.next_batch(1);
    const json saved = a.state().to_json();
    EXPECT_EQ(saved["epoch"], 1);
    EXPECT_EQ(saved["index"], 5);
    TokenLoader b(stream, opts);
    b.restore(LoaderState::from_json(json::parse(saved.dump()), "ckpt.json"));
    for (int i = 0; i < 3; ++i) EXPECT_EQ(a.next_batch(17), b.next_batch(17));
    EXPECT_EQ(a.state().to_json(), b.state().to_json());

    TokenLoader other(stream, {8, 1, 3, shuffle, 42});
    expect_error([&] { other.restore(LoaderState::from_json(saved, "ckpt.json")); }, {"seq_len 7", "8"});
    json broken = saved;
    broken["index"] = "5";
    expect_error([&] { LoaderState::from_json(broken, "ckpt.json"); }, {"ckpt.json", "loader.index"});
    broken = saved;
    broken["index"] = 100000;
    expect_error([&] { b.restore(LoaderState::from_json(broken, "ckpt.json")); }, {"block index 100000"});
  }
}

// ---------------------------------------------------------------------------------------------------
// Tokenizers

TEST(Tokenizer, SentencePieceTrainsAndRoundTripsUnicode) {
  const std::string corpus = license_text(60000);
  if (corpus.empty()) GTEST_SKIP() << "no /usr/share/common-licenses";
  const auto dir = tmp_dir("tok_sp");
  const std::string corpus_path = (fs::path(dir) / "corpus.txt").string();
  write(corpus_path, corpus + "\nnaïve café — Größe 東京 🚀\n");
  const std::string model = (fs::path(dir) / "sp.model").string();
  SentencePieceTrainOptions o;
  o.vocab_size = 600;
  train_sentencepiece(std::vector<std::string>{corpus_path}, o, model);
  const auto tok = load_tokenizer(model);
  EXPECT_EQ(tok->kind(), "sentencepiece");
  EXPECT_EQ(tok->vocab_size(), 600);
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
  for (const std::string text :
       {"The Licensor grants You a worldwide, royalty-free licence.", "naïve café — Größe 東京 🚀 ½ \u00a0x",
        "  two  spaces,\ttab\nnew line\n\n 12345 67", "unseen: Ελληνικά, עברית, 한국어, 𝔘𝔫𝔦𝔠𝔬𝔡𝔢"}) {
    const auto ids = tok->encode(text);
    for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < 600);
    EXPECT_EQ(tok->decode(ids), text);
  }
  EXPECT_LT(tok->encode("the License").size(), 6u);
  expect_error([&] { tok->encode(std::string("bad \xff byte")); }, {"not valid UTF-8 at byte 4"});
  expect_error([&] { tok->decode({5, 600}); }, {"token id 600", "index 1", model});

  o.model_type = "unigram";
  const std::string uni = (fs::path(dir) / "uni.model").string();
  train_sentencepiece(std::vector<std::string>{corpus_path}, o, uni);
  const auto u = load_tokenizer(uni);
  EXPECT_EQ(u->decode(u->encode("Größe 東京 🚀 licence")), "Größe 東京 🚀 licence");
  o.model_type = "wordpiece";
  expect_error([&] { train_sentencepiece(std::vector<std::string>{corpus_path}, o, uni); }, {"bpe or unigram"});
}

TEST(Tokenizer, SentencePieceRejectsBadModelFiles) {
  const auto dir = tmp_dir("tok_sp_bad");
  const std::string garbage = (fs::path(dir) / "garbage.model").string();
  write(garbage, std::string("\x0a\xff\xff\xff\xff\x0fnot a model at all", 24));
  expect_error([&] { load_tokenizer(garbage); }, {garbage, "SentencePiece"});
  const std::string empty = (fs::path(dir) / "empty.model").string();
  write(empty, "");
  expect_error([&] { load_tokenizer(empty); }, {empty});
  expect_error([&] { load_tokenizer((fs::path(dir) / "none.model").string()); }, {"none.model", "not found"});
  const std::string other = (fs::path(dir) / "vocab.txt").string();
  write(other, "x");
  expect_error([&] { load_tokenizer(other); }, {other, "unknown tokenizer file"});
  expect_error([&] { load_tokenizer(dir); }, {dir, "neither tokenizer.json nor tokenizer.model"});
}

TEST(Tokenizer, ByteLevelBpeEncodesMergesAndSpecialTokens) {
  const auto dir = tmp_dir("tok_bpe");
  const auto tok = load_tokenizer(write_tokenizer(dir, byte_bpe_json()));
  EXPECT_EQ(tok->kind(), "hf-bpe");
  EXPECT_EQ(tok->vocab_size(), 262);
  EXPECT_EQ(tok->eos_id(), 261);
  EXPECT_EQ(tok->bos_id(), -1);
  // "the" → 257, " the" → 258, " an" → 260; "<|endoftext|>" is matched before pre-tokenisation.
  EXPECT_EQ(tok->encode("the the an"), (std::vector<int32_t>{257, 258, 260}));
  EXPECT_EQ(tok->encode("a<|endoftext|>the"), (std::vector<int32_t>{'a', 261, 257}));
  for (const std::string text : {"the the an", "x<|endoftext|>y", "é東🚀\n\t  \x01", ""})
    EXPECT_EQ(tok->decode(tok->encode(text)), text);
  EXPECT_EQ(tok->decode({'a', 261, 'b'}, /*skip_special=*/true), "ab");
  // A lone UTF-8 lead byte decodes to U+FFFD.
  EXPECT_EQ(tok->decode({0xC3, 'a'}), "\xEF\xBF\xBD"
                                      "a");
  expect_error([&] { tok->decode({1, 262}); }, {"token id 262", "tokenizer.json"});
}

TEST(Tokenizer, BpeJsonIsValidatedWhereItEnters) {
  const auto dir = tmp_dir("tok_bpe_bad");
  auto bad = [&](const std::function<void(json&)>& edit, std::initializer_list<std::string> needles) {
    json j = byte_bpe_json();
    edit(j);
    const std::string p = write_tokenizer(dir, j);
    std::vector<std::string> n(needles);
    n.push_back(p);
    try {
      load_hf_bpe(p);
      ADD_FAILURE() << "expected an error for " << j.dump().substr(0, 80);
    } catch (const drope::Error& e) {
      for (const auto& s : n)
        EXPECT_NE(std::string(e.what()).find(s), std::string::npos) << e.what() << "\nmissing: " << s;
    }
  };
  bad([](json& j) { j.erase("model"); }, {"model: missing"});
  bad([](json& j) { j["model"]["type"] = "WordPiece"; }, {"model.type", "BPE"});
  bad([](json& j) { j["model"]["vocab"] = json::array(); }, {"model.vocab", "expected an object"});
  bad([](json& j) { j["model"]["vocab"]["Ġthe"] = "x"; }, {"model.vocab[\"Ġthe\"]", "integer"});
  bad([](json& j) { j["model"]["vocab"]["zz"] = 3; }, {"id 3 is also used"});
  bad([](json& j) { j["model"]["merges"][1] = json::array({"th", "qq"}); },
      {"model.merges[1]", "\"qq\" is not in model.vocab"});
  bad([](json& j) { j["model"]["merges"][2] = "t e"; }, {"model.merges[2]", "\"te\" is not in model.vocab"});
  bad([](json& j) { j["model"]["merges"][0] = "the"; }, {"model.merges[0]", "two tokens"});
  bad([](json& j) { j["model"]["merges"][0] = 5; }, {"model.merges[0]"});
  bad([](json& j) { j["model"]["dropout"] = 0.1; }, {"model.dropout"});
  bad([](json& j) { j["model"]["unk_token"] = "<unk>"; }, {"model.unk_token", "not in model.vocab"});
  bad([](json& j) { j["normalizer"] = {{"type", "NFKC"}}; }, {"normalizer.type", "NFKC"});
  bad([](json& j) { j["pre_tokenizer"] = {{"type", "Whitespace"}}; }, {"pre_tokenizer.type", "Whitespace"});
  bad(
      [](json& j) {
        j["pre_tokenizer"] = {{"type", "Sequence"},
                              {"pretokenizers", json::array({{{"type", "Split"},
                                                              {"pattern", {{"Regex", "(unclosed"}}},
                                                              {"behavior", "Isolated"},
                                                              {"invert", false}}})}};
      },
      {"pre_tokenizer.pretokenizers[0].pattern", "invalid regex"});
  bad(
      [](json& j) {
        j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "a"}}}, {"behavior", "Sideways"}};
      },
      {"pre_tokenizer.behavior", "Sideways"});
  // Step limits: ByteLevel steps double the text each; any step passes over the whole text.
  bad(
      [](json& j) {
        j["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", json::array()}};
        for (int i = 0; i < 40; ++i)
          j["pre_tokenizer"]["pretokenizers"].push_back({{"type", "ByteLevel"}, {"use_regex", false}});
      },
      {"pre_tokenizer.pretokenizers[1].type", "second ByteLevel"});
  bad(
      [](json& j) {
        j["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", json::array()}};
        for (int i = 0; i < 1000; ++i) j["pre_tokenizer"]["pretokenizers"].push_back({{"type", "Digits"}});
      },
      {"pre_tokenizer.pretokenizers[32]", "more than 32 pre-tokenizer steps"});
  bad([](json& j) { j["added_tokens"][0].erase("content"); }, {"added_tokens[0].content", "missing"});
  bad([](json& j) { j["added_tokens"][0]["id"] = -2; }, {"added_tokens[0].id"});
  bad([](json& j) { j["decoder"] = nullptr; }, {"decoder", "ByteLevel"});
  const std::string p = (fs::path(dir) / "tokenizer.json").string();
  write(p, "{\"model\": ");
  expect_error([&] { load_hf_bpe(p); }, {p, "invalid JSON"});
}

TEST(Tokenizer, BpeSpecialIdsComeFromTokenizerConfig) {
  const auto dir = tmp_dir("tok_bpe_cfg");
  json j = byte_bpe_json();
  j["added_tokens"].push_back({{"id", 262}, {"content", "<s>"}, {"special", true}, {"normalized", false}});
  const std::string p = write_tokenizer(dir, j);
  EXPECT_EQ(load_tokenizer(dir)->bos_id(), 262);
  write((fs::path(dir) / "tokenizer_config.json").string(), R"({"eos_token": {"content": "<s>"}, "bos_token": null})");
  EXPECT_EQ(load_tokenizer(p)->eos_id(), 262);
  write((fs::path(dir) / "tokenizer_config.json").string(), R"({"eos_token": "<nope>"})");
  expect_error([&] { load_tokenizer(p); }, {"tokenizer_config.json", "eos_token", "<nope>"});
}

TEST(Tokenizer, Utf8Helpers) {
  EXPECT_EQ(utf8_error_offset("abc é 東 🚀"), -1);
  EXPECT_EQ(utf8_error_offset(std::string("ab\xc3", 3)), 2);
  EXPECT_EQ(utf8_error_offset("\xed\xa0\x80"), 0);  // surrogate
  EXPECT_EQ(utf8_error_offset("\xc0\xaf"), 0);      // overlong
  EXPECT_EQ(utf8_lossy("a\xf0\x9f\x9a"
                       "b"),
            "a\xEF\xBF\xBD"
            "b");  // one U+FFFD per maximal prefix
  EXPECT_EQ(utf8_lossy("\x80\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD");
}

// ---------------------------------------------------------------------------------------------------
// prepare_dataset

namespace {

// Five text documents and a jsonl with three more (one blank line, one empty text).
std::vector<std::string> write_corpus(const std::string& dir) {
  fs::create_directories(fs::path(dir) / "texts");
  for (int i = 0; i < 5; ++i)
    write((fs::path(dir) / "texts" / fmt::format("doc{}.txt", i)).string(),
          fmt::format("Document {} says the answer is {} — café 東京.\n\nSecond paragraph {}.\n", i, 40 + i, i));
  const std::string jl = (fs::path(dir) / "more.jsonl").string();
  write(
      jl,
      "{\"text\": \"json one\", \"id\": 1}\n\n{\"text\": \"json two 🚀\"}\n{\"text\": \"\"}\n{\"text\": \"json three\"}\n");
  return {(fs::path(dir) / "texts").string(), jl};
}

// The documents of one split, cut at EOS and decoded.
std::vector<std::string> split_docs(const std::string& out, const std::string& split, const Tokenizer& tok) {
  const auto s = TokenStream::open(out, split);
  std::vector<int64_t> all(static_cast<size_t>(s->size()));
  s->read(0, s->size(), all.data());
  std::vector<std::string> docs;
  std::vector<int32_t> cur;
  for (int64_t t : all) {
    if (t == tok.eos_id()) {
      docs.push_back(tok.decode(cur));
      cur.clear();
    } else {
      cur.push_back(static_cast<int32_t>(t));
    }
  }
  EXPECT_TRUE(cur.empty()) << "stream does not end with EOS";
  return docs;
}

}  // namespace

TEST(Prepare, WritesSplitsShardsIndexAndTokenizer) {
  const auto dir = tmp_dir("prepare_ok");
  const auto tokdir = (fs::path(dir) / "tok").string();
  fs::create_directories(tokdir);
  write_tokenizer(tokdir, byte_bpe_json());
  PrepareOptions o;
  o.inputs = write_corpus(dir);
  o.out_dir = (fs::path(dir) / "data").string();
  o.tokenizer = tokdir;
  o.val_fraction = 0.25;
  o.seed = 3;
  o.shard_tokens = 50;
  const DatasetIndex idx = prepare_dataset(o);
  EXPECT_EQ(idx.splits.at("train").documents + idx.splits.at("val").documents, 8);
  EXPECT_EQ(idx.splits.at("val").documents, 2);
  EXPECT_GT(idx.splits.at("train").shards.size(), 2u);
  EXPECT_EQ(idx.token_bytes, 2);
  EXPECT_TRUE(fs::exists(fs::path(o.out_dir) / "tokenizer.json"));
  EXPECT_TRUE(fs::exists(fs::path(o.out_dir) / "train" / "shard_00000.bin"));
  const DatasetIndex back = read_index((fs::path(o.out_dir) / "index.json").string());
  EXPECT_EQ(back.splits.at("train").tokens, idx.splits.at("train").tokens);

  const auto tok = load_tokenizer(o.out_dir);
  auto docs = split_docs(o.out_dir, "train", *tok);
  const auto val = split_docs(o.out_dir, "val", *tok);
  EXPECT_EQ(val.size(), 2u);
  docs.insert(docs.end(), val.begin(), val.end());
  std::sort(docs.begin(), docs.end());
  std::vector<std::string> expect = {"json one", "json two 🚀", "json three"};
  for (int i = 0; i < 5; ++i)
    expect.push_back(
        fmt::format("Document {} says the answer is {} — café 東京.\n\nSecond paragraph {}.\n", i, 40 + i, i));
  std::sort(expect.begin(), expect.end());
  EXPECT_EQ(docs, expect);

  // Same seed → same split, and the same bytes on 3 threads (batches written in document order);
  // paragraphs mode → one document per paragraph.
  o.out_dir = (fs::path(dir) / "data2").string();
  o.threads = 3;
  EXPECT_EQ(prepare_dataset(o).splits.at("val").tokens, idx.splits.at("val").tokens);
  for (const char* f : {"index.json", "train/shard_00000.bin", "train/shard_00002.bin", "val/shard_00000.bin"})
    EXPECT_EQ(drope::read_file((fs::path(dir) / "data2" / f).string()),
              drope::read_file((fs::path(dir) / "data" / f).string()))
        << f;
  o.paragraphs = true;
  EXPECT_EQ(prepare_dataset(o).meta["documents"], 13);
}

TEST(Prepare, TrainsASentencePieceTokenizer) {
  const std::string corpus = license_text(30000);
  if (corpus.empty()) GTEST_SKIP() << "no /usr/share/common-licenses";
  const auto dir = tmp_dir("prepare_sp");
  const std::string c = (fs::path(dir) / "corpus.txt").string();
  write(c, corpus);
  PrepareOptions o;
  o.inputs = {c, (fs::path(dir) / "c2.txt").string()};
  write(o.inputs[1], "Größe 東京 🚀 a second document.\n");
  o.out_dir = (fs::path(dir) / "data").string();
  o.train_vocab_size = 400;
  o.val_fraction = 0.5;
  const auto idx = prepare_dataset(o);
  EXPECT_EQ(idx.tokenizer.kind, "sentencepiece");
  EXPECT_EQ(idx.tokenizer.vocab_size, 400);
  EXPECT_EQ(idx.tokenizer.eos_id, 2);
  const auto tok = load_tokenizer((fs::path(o.out_dir) / "tokenizer.model").string());
  const auto docs = split_docs(o.out_dir, "train", *tok);
  ASSERT_EQ(docs.size(), 1u);
  const auto val = split_docs(o.out_dir, "val", *tok);
  ASSERT_EQ(val.size(), 1u);
  EXPECT_TRUE(docs[0] == corpus || val[0] == corpus);
}

TEST(Prepare, ErrorsNameTheFileAndLeaveNoOutput) {
  const auto dir = tmp_dir("prepare_bad");
  const auto tokdir = (fs::path(dir) / "tok").string();
  fs::create_directories(tokdir);
  write_tokenizer(tokdir, byte_bpe_json());
  PrepareOptions o;
  o.inputs = write_corpus(dir);
  o.out_dir = (fs::path(dir) / "data").string();
  o.tokenizer = tokdir;
  o.val_fraction = 0.2;
  const auto good = prepare_dataset(o);
  const std::string index_before = drope::read_file((fs::path(o.out_dir) / "index.json").string());

  const std::string jl = (fs::path(dir) / "bad.jsonl").string();
  auto expect_fail = [&](const std::string& content, std::initializer_list<std::string> needles) {
    write(jl, content);
    PrepareOptions b = o;
    b.inputs.push_back(jl);
    expect_error([&] { prepare_dataset(b); }, needles);
    EXPECT_EQ(drope::read_file((fs::path(o.out_dir) / "index.json").string()), index_before);
  };
  expect_fail("{\"text\": \"ok\"}\n\n{\"text\": \"broken\n", {"bad.jsonl:3", "invalid JSON"});
  expect_fail("{\"text\": \"ok\"}\n{\"body\": \"x\"}\n", {"bad.jsonl:2", "missing field \"text\""});
  expect_fail("{\"text\": 5}\n", {"bad.jsonl:1", "must be a string"});
  expect_fail("[1, 2]\n", {"bad.jsonl:1", "expected a JSON object"});
  const std::string bin = (fs::path(dir) / "bad.txt").string();
  write(bin, "line one\nline \xff two\n");
  PrepareOptions b = o;
  b.inputs = {bin};
  expect_error([&] { prepare_dataset(b); }, {"bad.txt:2", "not valid UTF-8"});
  b = o;
  b.inputs = {(fs::path(dir) / "nope.txt").string()};
  expect_error([&] { prepare_dataset(b); }, {"nope.txt", "not found"});
  b = o;
  b.val_fraction = 1.0;
  expect_error([&] { prepare_dataset(b); }, {"validation fraction"});
  b = o;
  b.tokenizer.clear();
  expect_error([&] { prepare_dataset(b); }, {"tokenizer"});
  b = o;
  b.out_dir = tokdir;  // the tokenizer's own directory: an input
  expect_error([&] { prepare_dataset(b); }, {tokdir, "is the input --tokenizer"});
  b = o;
  b.tokenizer = (fs::path(dir) / "noeos").string();
  fs::create_directories(b.tokenizer);
  json j = byte_bpe_json();
  j["added_tokens"] = json::array();
  write_tokenizer(b.tokenizer, j);
  expect_error([&] { prepare_dataset(b); }, {"noeos", "no end-of-sequence token"});
  EXPECT_EQ(drope::read_file((fs::path(o.out_dir) / "index.json").string()), index_before);
  for (const auto& e : fs::directory_iterator(dir))
    EXPECT_EQ(e.path().filename().string().find(".drope-tmp-"), std::string::npos) << e.path();
  (void)good;
}

// ---------------------------------------------------------------------------------------------------------
// LineReader (compressed files: tests/py/test_prepare_inputs.py, fixtures written by Python's gzip / zstandard)

TEST(LineReader, SplitsLinesAndBoundsTheirLength) {
  const auto dir = tmp_dir("line_reader");
  const std::string path = dir + "/a.txt";
  write(path, "one\r\n\nthree" + std::string(100, 'x') + "\nlast");
  LineReader r(path);
  std::vector<std::string> lines;
  for (std::string_view line; r.next(line);) lines.emplace_back(line);
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[0], "one\r");
  EXPECT_EQ(lines[1], "");
  EXPECT_EQ(lines[3], "last");
  EXPECT_EQ(r.line_number(), 4);
  EXPECT_EQ(r.file_bytes_read(), drope::read_file(path).size());

  LineReader small(path, 50);
  std::string_view line;
  EXPECT_TRUE(small.next(line));
  EXPECT_TRUE(small.next(line));
  expect_error([&] { small.next(line); }, {path + ":3", "longer than 50 bytes"});

  write(dir + "/empty.jsonl.gz", "");
  expect_error([&] { LineReader(dir + "/empty.jsonl.gz").next(line); },
               {"empty.jsonl.gz", "empty file, expected gzip"});
  write(dir + "/empty.txt", "");
  EXPECT_FALSE(LineReader(dir + "/empty.txt").next(line));
  EXPECT_EQ(compression_of("x.jsonl.zst"), Compression::zstd);
  EXPECT_EQ(without_compression_suffix("x.jsonl.gz"), "x.jsonl");
}
