// Hostile SentencePiece .model files: each is built here in protobuf wire format (or derived from a model
// trained on the fly) and must be refused by name before libsentencepiece sees it, never crash it.
// Torch-free.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "drope/core/files.h"
#include "drope/text/sentencepiece_model.h"
#include "drope/text/tokenizer.h"
#include "test_util.h"

namespace fs = std::filesystem;
using drope::test::expect_error;
using drope::test::tmp_dir;
using namespace drope::text;

namespace {

// --- protobuf wire format, enough to write a ModelProto ---
std::string varint(uint64_t v) {
  std::string s;
  while (v >= 0x80) {
    s += static_cast<char>((v & 0x7F) | 0x80);
    v >>= 7;
  }
  s += static_cast<char>(v);
  return s;
}
std::string key(uint32_t field, uint32_t wire) { return varint((uint64_t{field} << 3) | wire); }
std::string bytes_field(uint32_t field, const std::string& b) { return key(field, 2) + varint(b.size()) + b; }
std::string varint_field(uint32_t field, uint64_t v) { return key(field, 0) + varint(v); }
std::string float_field(uint32_t field, float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  std::string s = key(field, 5);
  for (int i = 0; i < 4; ++i) s += static_cast<char>((u >> (8 * i)) & 0xFF);
  return s;
}
std::string le32(uint32_t u) {
  std::string s;
  for (int i = 0; i < 4; ++i) s += static_cast<char>((u >> (8 * i)) & 0xFF);
  return s;
}

// ModelProto.pieces entry (SentencePiece: piece = 1, score = 2, type = 3).
std::string piece(const std::string& p, float score, uint64_t type = 1) {
  return bytes_field(1, bytes_field(1, p) + float_field(2, score) + varint_field(3, type));
}
// A small valid unigram model: <unk>, <s>, </s> and a few pieces.
std::string pieces_ok() {
  return piece("<unk>", 0, 2) + piece("<s>", 0, 3) + piece("</s>", 0, 3) + piece("\xE2\x96\x81", -1) + piece("a", -2) +
         piece("b", -3) + piece("ab", -1.5f) + piece("c", -4);
}
std::string trainer(uint64_t model_type) { return bytes_field(2, varint_field(3, model_type)); }
// A normalizer_spec holding only a precompiled charsmap (protobuf merges it into an earlier spec).
std::string normalizer(const std::string& charsmap, uint32_t field = 3) {
  return bytes_field(field, bytes_field(1, "custom") + bytes_field(2, charsmap));
}

// A darts-clone double array of 512 units mapping the byte 'A' to "a": the root's children sit in the
// second block (offset 256), 'A' at 256 ^ 0x41 with a leaf at 256 whose value 0 points at "a\0".
struct Trie {
  std::vector<uint32_t> units = std::vector<uint32_t>(512, 0);
  std::string pool = std::string("a\0", 2);
  Trie() {
    units[0] = 256u << 10;                              // root: offset 256
    units[256 ^ 0x41] = (65u << 10) | (1u << 8) | 0x41;  // 'A': has a leaf, offset 65 → 256
    units[256] = (1u << 31) | 0;                        // leaf: value 0
  }
  std::string blob(int64_t declared_bytes = -1) const {
    std::string t;
    for (uint32_t u : units) t += le32(u);
    return le32(declared_bytes < 0 ? static_cast<uint32_t>(t.size()) : static_cast<uint32_t>(declared_bytes)) + t +
           pool;
  }
};

std::string write_model(const std::string& dir, const std::string& name, const std::string& bytes) {
  const std::string p = (fs::path(dir) / name).string();
  std::ofstream(p, std::ios::binary) << bytes;
  return p;
}

// Loads `bytes` as a model and uses it; expects a clean refusal naming the file and `needle`.
void expect_refused(const std::string& dir, const std::string& name, const std::string& bytes,
                    const std::string& needle) {
  SCOPED_TRACE(name);
  const std::string p = write_model(dir, name, bytes);
  expect_error(
      [&] {
        auto tok = load_sentencepiece(p);
        tok->decode(tok->encode("AAb ab A c"));
      },
      {p, needle});
}

}  // namespace

TEST(SentencePieceModel, HandBuiltModelsLoadAndNormalise) {
  const auto dir = tmp_dir("spm_model_ok");
  const std::string plain = write_model(dir, "plain.model", pieces_ok() + trainer(1));
  auto tok = load_sentencepiece(plain);
  EXPECT_EQ(tok->vocab_size(), 8);
  EXPECT_EQ(tok->decode(tok->encode("ab c")), "ab c");
  // The hand-built charsmap maps 'A' to 'a'.
  const std::string mapped = write_model(dir, "mapped.model", pieces_ok() + trainer(1) + normalizer(Trie().blob()));
  const auto s = check_sentencepiece_model(drope::read_file(mapped), mapped);
  EXPECT_EQ(s.trie_units, 512);
  EXPECT_EQ(s.unk_id, 0);
  auto m = load_sentencepiece(mapped);
  EXPECT_EQ(m->encode("Ab"), m->encode("ab"));
}

TEST(SentencePieceModel, TrainedModelsPass) {
  const auto dir = tmp_dir("spm_model_trained");
  std::string text;
  for (int i = 0; i < 300; ++i)
    text += "The quick brown fox jumps over the lazy dog " + std::to_string(i) + " ﬁ ① Ａ\n";
  const std::string corpus = write_model(dir, "corpus.txt", text);
  for (const char* rule : {"identity", "nmt_nfkc"}) {
    SCOPED_TRACE(rule);
    SentencePieceTrainOptions o;
    o.vocab_size = 300;
    o.normalization_rule = rule;
    const std::string model = (fs::path(dir) / (std::string(rule) + ".model")).string();
    train_sentencepiece(std::vector<std::string>{corpus}, o, model);
    const auto s = check_sentencepiece_model(drope::read_file(model), model);
    EXPECT_EQ(s.num_pieces, 300);
    EXPECT_EQ(s.unk_id, 0);
    if (std::string(rule) == "nmt_nfkc") EXPECT_GT(s.trie_units, 256);
    auto tok = load_sentencepiece(model);
    EXPECT_FALSE(tok->encode("quick fox ﬁ").empty());
  }
}

TEST(SentencePieceModel, HostilePiecesAreRefused) {
  const auto dir = tmp_dir("spm_model_pieces");
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const std::string unk = piece("<unk>", 0, 2);
  expect_refused(dir, "none.model", trainer(1), "no pieces");
  expect_refused(dir, "nounk.model", piece("a", -1) + trainer(1), "UNKNOWN");
  expect_refused(dir, "twounk.model", unk + piece("<unk2>", 0, 2) + trainer(1), "both of type UNKNOWN");
  expect_refused(dir, "nan.model", unk + piece("a", nan) + trainer(1), "non-finite score");
  expect_refused(dir, "inf.model", unk + piece("a", -inf) + trainer(2), "non-finite score");
  expect_refused(dir, "type0.model", unk + piece("a", -1, 0) + trainer(1), "type 0");
  expect_refused(dir, "type99.model", unk + piece("a", -1, 99) + trainer(1), "type 99");
  expect_refused(dir, "empty.model", unk + piece("", -1) + trainer(1), "piece 1 is empty");
  expect_refused(dir, "utf8.model", unk + piece("\xC3(", -1) + trainer(1), "not valid UTF-8");
  expect_refused(dir, "dup.model", unk + piece("a", -1) + piece("a", -2) + trainer(1), "appears twice");
  expect_refused(dir, "byte.model", unk + piece("<0xZZ>", 0, 6) + trainer(1), "<0xXX>");
  expect_refused(dir, "modeltype.model", pieces_ok() + trainer(9), "model_type is 9");
}

TEST(SentencePieceModel, MalformedWireFormatIsRefused) {
  const auto dir = tmp_dir("spm_model_wire");
  const std::string ok = pieces_ok() + trainer(1);
  expect_refused(dir, "truncated.model", ok.substr(0, ok.size() - 1), "SentencePiece");
  expect_refused(dir, "longlen.model", ok + key(1, 2) + varint(1u << 30) + "x", "runs past the end");
  expect_refused(dir, "varint.model", ok + key(7, 0) + std::string(11, '\xFF'), "varint");
  expect_refused(dir, "group.model", ok + key(7, 3), "wire type 3");
  expect_refused(dir, "field0.model", ok + key(0, 0) + varint(1), "invalid field key");
  expect_refused(dir, "wrongwire.model", varint_field(1, 5) + ok, "pieces has wire type 0");
}

TEST(SentencePieceModel, HostileCharsmapsAreRefused) {
  const auto dir = tmp_dir("spm_model_trie");
  const std::string base = pieces_ok() + trainer(1);
  // Header shorter than 4 bytes; a trie size past the blob (the library checks only size < blob size,
  // so a size within 4 bytes of the end reads past it); not a multiple of 4; zero.
  expect_refused(dir, "short.model", base + normalizer("ab"), "header");
  const std::string blob = Trie().blob();
  expect_refused(dir, "oversize.model", base + normalizer(Trie().blob(static_cast<int64_t>(blob.size()) - 2)),
                 "declares a trie");
  expect_refused(dir, "odd.model", base + normalizer(Trie().blob(2046)), "declares a trie");
  expect_refused(dir, "zero.model", base + normalizer(le32(0) + "a"), "declares a trie");
  // The root's children outside the array.
  Trie t;
  t.units[0] = (1u << 21) << 10 | (1u << 9);  // offset 2^29
  expect_refused(dir, "root.model", base + normalizer(t.blob()), "trie is corrupt");
  // A child's block partly outside the array (offset → 768, the array has 512 units).
  t = Trie();
  t.units[256 ^ 0x41] = ((321u ^ 768u) << 10) | 0x41;
  expect_refused(dir, "child.model", base + normalizer(t.blob()), "trie is corrupt");
  // A leaf unit outside the array.
  t = Trie();
  t.units[256 ^ 0x41] = ((321u ^ 4096u) << 10) | (1u << 8) | 0x41;
  expect_refused(dir, "leaf.model", base + normalizer(t.blob()), "trie is corrupt");
  // A leaf value past the string pool, and a pool string without its NUL.
  t = Trie();
  t.units[256] = (1u << 31) | (1u << 30);
  expect_refused(dir, "value.model", base + normalizer(t.blob()), "string pool");
  t = Trie();
  t.pool = "a";
  expect_refused(dir, "nul.model", base + normalizer(t.blob()), "terminating NUL");
  // The denormaliser's charsmap is checked as well; a later normalizer_spec overrides an earlier one.
  t = Trie();
  t.units[0] = (1u << 21) << 10 | (1u << 9);
  expect_refused(dir, "denorm.model", base + normalizer(t.blob(), 5), "denormalizer_spec");
  expect_refused(dir, "merged.model", base + normalizer(Trie().blob()) + normalizer(t.blob()), "normalizer_spec");
}
