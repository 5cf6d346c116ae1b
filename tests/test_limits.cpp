// Sizes read from files are checked before anything is allocated: a header, config or tokenizer claiming
// 10^12 elements is a clear error naming the file, not an allocation. Torch-free (also part of the
// sanitizer test binary).
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "drope/config/model_config.h"
#include "drope/core/files.h"
#include "drope/io/hf_config.h"
#include "drope/io/safetensors_header.h"
#include "drope/text/shards.h"
#include "drope/text/tokenizer.h"
#include "test_util.h"

namespace fs = std::filesystem;
using drope::test::expect_error;
using nlohmann::json;

namespace {

// A safetensors file image: 8-byte size, the JSON header, then `data_bytes` zero bytes.
std::string safetensors_bytes(const std::string& header, uint64_t data_bytes, uint64_t claimed_size = UINT64_MAX) {
  const uint64_t n = claimed_size == UINT64_MAX ? header.size() : claimed_size;
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + header + std::string(data_bytes, '\0');
}

void header_fails(const std::string& bytes, std::initializer_list<std::string> needles) {
  std::vector<std::string> n(needles);
  n.push_back("bad.safetensors");
  try {
    drope::io::parse_safetensors_header(bytes.data(), bytes.size(), "bad.safetensors");
    ADD_FAILURE() << "expected an error";
  } catch (const drope::Error& e) {
    for (const auto& s : n) EXPECT_NE(std::string(e.what()).find(s), std::string::npos) << e.what() << "\nmissing: " << s;
  }
}

}  // namespace

TEST(Limits, SafetensorsHeaderShapesAndOffsetsAgainstTheFileSize) {
  // 10^12 elements, offsets that honestly claim 4 TB: outside the 16-byte data section.
  header_fails(safetensors_bytes(R"({"w":{"dtype":"F32","shape":[1000000,1000000],"data_offsets":[0,4000000000000]}})", 16),
               {"tensor 'w'", "outside the 16-byte data section"});
  // 10^12 elements whose offsets pretend 16 bytes.
  header_fails(safetensors_bytes(R"({"w":{"dtype":"F32","shape":[1000000,1000000],"data_offsets":[0,16]}})", 16),
               {"tensor 'w'", "more than the whole data section", "span 16"});
  // Products that overflow 64 and 128 bits saturate instead of wrapping to a small size.
  header_fails(safetensors_bytes(R"({"w":{"dtype":"F64","shape":[1099511627776,1099511627776,1099511627776,1099511627776],"data_offsets":[0,0]}})", 0),
               {"tensor 'w'", "more than the whole data section"});
  header_fails(safetensors_bytes(R"({"w":{"dtype":"F32","shape":[1,2,4,1,0],"data_offsets":[0,8]}})", 8),
               {"need 0 bytes but data_offsets span 8"});
  header_fails(safetensors_bytes(R"({"w":{"dtype":"F32","shape":[2000000000000],"data_offsets":[0,8]}})", 8),
               {"dimension 2000000000000 is implausibly large"});
  header_fails(safetensors_bytes(R"({"w":{"dtype":"U8","shape":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1],"data_offsets":[0,1]}})", 1),
               {"at most 16"});
  // A header length of 2^40 bytes, or more than the file holds.
  header_fails(safetensors_bytes("{}", 0, uint64_t{1} << 40), {"header claims 1099511627776 bytes (limit"});
  header_fails(safetensors_bytes("{}", 0, 1000), {"truncated", "header claims 1000 bytes but only 2 follow"});
  header_fails(std::string(5, '\0'), {"shorter than the 8-byte header size"});
  header_fails(safetensors_bytes(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", 8), {"data_offsets [8, 0]"});
  header_fails(safetensors_bytes(R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8), {"non-negative"});
  header_fails(safetensors_bytes(R"({"w":{"dtype":"Q4","shape":[2],"data_offsets":[0,8]}})", 8), {"unsupported dtype 'Q4'"});
  // A valid one parses.
  const auto ok = safetensors_bytes(R"({"__metadata__":{"a":"b"},"w":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,8]}})", 8);
  auto h = drope::io::parse_safetensors_header(ok.data(), ok.size(), "ok.safetensors");
  EXPECT_EQ(h.tensors.at("w").shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(h.metadata.at("a"), "b");
}

TEST(Limits, ModelConfigSizes) {
  const auto dir = drope::test::tmp_dir("limits_model");
  auto bad = [&](const std::string& extra, std::initializer_list<std::string> needles) {
    const std::string p = dir + "/m.yaml";
    drope::write_file_atomic(p, "model:\n  preset: micro\n" + extra);
    std::vector<std::string> n(needles);
    n.push_back(p);
    try {
      drope::load_model_config_file(p);
      ADD_FAILURE() << "expected an error for " << extra;
    } catch (const drope::Error& e) {
      for (const auto& s : n) EXPECT_NE(std::string(e.what()).find(s), std::string::npos) << e.what() << "\nmissing: " << s;
    }
  };
  bad("  vocab_size: 1000000000000\n", {"model.vocab_size = 1000000000000 is implausibly large"});
  bad("  hidden_size: 1048576\n  head_dim: 64\n", {"model.hidden_size"});
  bad("  max_position: 4000000000000\n", {"model.max_position"});
  bad("  num_layers: 100000\n", {"model.num_layers"});
  bad("  hidden_size: 65536\n  intermediate_size: 262144\n  num_layers: 4096\n  head_dim: 64\n", {"parameters (limit 2^40"});
  // HF config.json: the same limits, naming the file.
  const std::string cfg = R"({"model_type":"llama","vocab_size":1000000000000,"hidden_size":64,"intermediate_size":128,
    "num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":4})";
  expect_error([&] { drope::io::parse_hf_config(cfg, "dir/config.json"); },
               {"dir/config.json", "model.vocab_size = 1000000000000 is implausibly large"});
}

TEST(Limits, TokenizerIdsFarBeyondTheVocabulary) {
  const auto dir = drope::test::tmp_dir("limits_tok");
  json vocab = json::object();
  for (int b = 0; b < 26; ++b) vocab[std::string(1, char('a' + b))] = b;
  json tok = {{"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array()}}},
              {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
              {"decoder", {{"type", "ByteLevel"}}},
              {"added_tokens", json::array({{{"id", 2147483647}, {"content", "<big>"}, {"special", true}}})}};
  const std::string p = dir + "/tokenizer.json";
  drope::write_file_atomic(p, tok.dump());
  expect_error([&] { drope::text::load_hf_bpe(p); }, {p, "added_tokens", "token id 2147483647 is far beyond"});
  tok["added_tokens"] = json::array();
  tok["model"]["vocab"]["zz"] = 1 << 30;
  drope::write_file_atomic(p, tok.dump());
  expect_error([&] { drope::text::load_hf_bpe(p); }, {p, "model.vocab", "token id 1073741824 is far beyond the 27"});
}

TEST(Limits, DatasetIndexVocabularyAndTokenCounts) {
  const auto dir = drope::test::tmp_dir("limits_index");
  json idx = {{"format", "drope-tokens"},
              {"version", drope::text::kShardVersion},
              {"dtype", "uint32"},
              {"tokenizer", {{"file", "tokenizer.json"}, {"kind", "hf-bpe"}, {"vocab_size", 1000000000000}, {"eos_id", -1}, {"bos_id", -1}}},
              {"splits", json::object()}};
  const std::string p = dir + "/index.json";
  drope::write_file_atomic(p, idx.dump());
  expect_error([&] { drope::text::read_index(p); }, {p, "tokenizer.vocab_size", "1000000000000 is outside"});
  idx["tokenizer"]["vocab_size"] = 100;
  idx["splits"]["train"] = {{"shards", json::array({{{"file", "a.bin"}, {"tokens", 4000000000000000000}}})},
                            {"tokens", 4000000000000000000},
                            {"documents", 1}};
  drope::write_file_atomic(p, idx.dump());
  expect_error([&] { drope::text::read_index(p); }, {p, "splits.train.shards[0].tokens", "is outside"});
}
