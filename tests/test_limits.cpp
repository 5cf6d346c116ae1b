// Sizes read from files are checked before anything is allocated: a header, config or tokenizer claiming
// 10^12 elements is a clear error naming the file, not an allocation. Torch-free (also part of the
// sanitizer test binary).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <future>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "drope/config/model_config.h"
#include "drope/core/files.h"
#include "drope/core/json.h"
#include "drope/formats/checkpoint_state.h"
#include "drope/formats/hf_config.h"
#include "drope/formats/safetensors_header.h"
#include "drope/text/jsonl.h"
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
    for (const auto& s : n)
      EXPECT_NE(std::string(e.what()).find(s), std::string::npos) << e.what() << "\nmissing: " << s;
  }
}

}  // namespace

TEST(Limits, SafetensorsHeaderShapesAndOffsetsAgainstTheFileSize) {
  // 10^12 elements, offsets that honestly claim 4 TB: outside the 16-byte data section.
  header_fails(
      safetensors_bytes(R"({"w":{"dtype":"F32","shape":[1000000,1000000],"data_offsets":[0,4000000000000]}})", 16),
      {"tensor 'w'", "outside the 16-byte data section"});
  // 10^12 elements whose offsets pretend 16 bytes.
  header_fails(safetensors_bytes(R"({"w":{"dtype":"F32","shape":[1000000,1000000],"data_offsets":[0,16]}})", 16),
               {"tensor 'w'", "more than the whole data section", "span 16"});
  // Products that overflow 64 bits are refused as such (as the reference implementation does), also beside a zero
  // dimension that makes the byte count 0; one of nearly 2^63 elements saturates instead of wrapping.
  header_fails(
      safetensors_bytes(
          R"({"w":{"dtype":"F64","shape":[1099511627776,1099511627776,1099511627776,1099511627776],"data_offsets":[0,0]}})",
          0),
      {"tensor 'w'", "product of the shape's dimensions overflows 64 bits"});
  header_fails(
      safetensors_bytes(
          R"({"w":{"dtype":"F32","shape":[1099511627776,1099511627776,1099511627776,0],"data_offsets":[0,0]}})", 0),
      {"tensor 'w'", "overflows 64 bits"});
  header_fails(safetensors_bytes(R"({"w":{"dtype":"F64","shape":[1099511627776,8388607],"data_offsets":[0,0]}})", 0),
               {"tensor 'w'", "more than the whole data section"});
  header_fails(safetensors_bytes(R"({"w":{"dtype":"F32","shape":[1,2,4,1,0],"data_offsets":[0,8]}})", 8),
               {"need 0 bytes but data_offsets span 8"});
  header_fails(safetensors_bytes(R"({"w":{"dtype":"F32","shape":[2000000000000],"data_offsets":[0,8]}})", 8),
               {"dimension 2000000000000 is implausibly large"});
  header_fails(
      safetensors_bytes(R"({"w":{"dtype":"U8","shape":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1],"data_offsets":[0,1]}})", 1),
      {"at most 16"});
  // A header length of 2^40 bytes, or more than the file holds.
  header_fails(safetensors_bytes("{}", 0, uint64_t{1} << 40), {"header claims 1099511627776 bytes (limit"});
  header_fails(safetensors_bytes("{}", 0, 1000), {"truncated", "header claims 1000 bytes but only 2 follow"});
  header_fails(std::string(5, '\0'), {"shorter than the 8-byte header size"});
  header_fails(safetensors_bytes(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", 8),
               {"data_offsets [8, 0]"});
  header_fails(safetensors_bytes(R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8), {"non-negative"});
  header_fails(safetensors_bytes(R"({"w":{"dtype":"Q4","shape":[2],"data_offsets":[0,8]}})", 8),
               {"unsupported dtype 'Q4'"});
  // A valid one parses.
  const auto ok =
      safetensors_bytes(R"({"__metadata__":{"a":"b"},"w":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,8]}})", 8);
  auto h = drope::io::parse_safetensors_header(ok.data(), ok.size(), "ok.safetensors");
  EXPECT_EQ(h.tensors.at("w").shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(h.metadata.at("a"), "b");
  // A null __metadata__ is no metadata, as the reference implementation reads it; a list is refused.
  const auto null_meta =
      safetensors_bytes(R"({"__metadata__":null,"w":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,8]}})", 8);
  EXPECT_TRUE(
      drope::io::parse_safetensors_header(null_meta.data(), null_meta.size(), "null.safetensors").metadata.empty());
  header_fails(
      safetensors_bytes(R"({"__metadata__":["a"],"w":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,8]}})", 8),
      {"__metadata__ must be an object of strings"});
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
      for (const auto& s : n)
        EXPECT_NE(std::string(e.what()).find(s), std::string::npos) << e.what() << "\nmissing: " << s;
    }
  };
  bad("  vocab_size: 1000000000000\n", {"model.vocab_size = 1000000000000 is implausibly large"});
  bad("  hidden_size: 1048576\n  head_dim: 64\n", {"model.hidden_size"});
  bad("  max_position: 4000000000000\n", {"model.max_position"});
  bad("  num_layers: 100000\n", {"model.num_layers"});
  bad("  hidden_size: 65536\n  intermediate_size: 262144\n  num_layers: 4096\n  head_dim: 64\n",
      {"parameters (limit 2^40"});
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
  json idx = {
      {"format", "drope-tokens"},
      {"version", drope::text::kShardVersion},
      {"dtype", "uint32"},
      {"tokenizer",
       {{"file", "tokenizer.json"}, {"kind", "hf-bpe"}, {"vocab_size", 1000000000000}, {"eos_id", -1}, {"bos_id", -1}}},
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

namespace {

// `depth` nested arrays around a 1.
std::string nested_arrays(int depth) { return std::string(depth, '[') + "1" + std::string(depth, ']'); }

}  // namespace

TEST(Limits, JsonNestingIsCappedAtParseTime) {
  // 128 levels parse (the deepest HF's readers take); one more is refused by name, as is a million.
  EXPECT_NO_THROW(drope::parse_json(nested_arrays(drope::kMaxJsonDepth), "ok.json"));
  expect_error([] { drope::parse_json(nested_arrays(drope::kMaxJsonDepth + 1), "deep.json"); },
               {"deep.json", "nested more than 128 levels deep", "nesting limit"});
  expect_error([] { drope::parse_json(std::string(1000000, '['), "huge.json"); }, {"huge.json", "nesting limit"});
  expect_error([] { drope::parse_json(R"({"a": {"b": [)" + std::string(200, '[') + "}", "obj.json"); },
               {"obj.json", "nesting limit", "'a.b[0]"});
  // Brackets inside strings are text, not nesting.
  EXPECT_NO_THROW(drope::parse_json("[\"" + std::string(1000, '[') + "\"]", "str.json"));

  // Every reader of user JSON goes through the cap: config.json (rope_scaling), the dataset index,
  // checkpoint state, tokenizer.json (normalizer sequences), JSONL lines, safetensors headers.
  const std::string deep = "{\"x\": " + nested_arrays(100000) + "}";
  const auto dir = drope::test::tmp_dir("limits_deep");
  expect_error(
      [&] {
        drope::io::parse_hf_config(R"({"model_type": "llama", "rope_scaling": )" + deep + "}", "dir/config.json");
      },
      {"dir/config.json", "nesting limit"});
  drope::write_file_atomic(dir + "/index.json", deep);
  expect_error([&] { drope::text::read_index(dir + "/index.json"); }, {dir + "/index.json", "nesting limit"});
  expect_error([&] { drope::train::parse_checkpoint_state(deep, "ckpt/state.json"); },
               {"ckpt/state.json", "nesting limit"});
  json tok = {{"model", {{"type", "BPE"}, {"vocab", {{"a", 0}}}, {"merges", json::array()}}}};
  std::string tok_text = tok.dump();
  tok_text.insert(tok_text.size() - 1, ", \"normalizer\": " + deep);
  drope::write_file_atomic(dir + "/tokenizer.json", tok_text);
  expect_error([&] { drope::text::load_hf_bpe(dir + "/tokenizer.json"); }, {dir + "/tokenizer.json", "nesting limit"});
  drope::write_file_atomic(dir + "/data.jsonl", "{\"text\": \"ok\"}\n" + deep + "\n");
  expect_error(
      [&] { drope::text::for_each_jsonl_object(dir + "/data.jsonl", [](int64_t, const json&) { return true; }); },
      {dir + "/data.jsonl:2", "nesting limit"});
  header_fails(safetensors_bytes(deep, 0), {"safetensors header", "nesting limit"});
}

TEST(Limits, JsonDuplicateKeysAndIntegerOverflowAreNamed) {
  expect_error([] { drope::parse_json(R"({"a": 1, "b": {"c": 2, "c": 3}})", "dup.json"); },
               {"dup.json", "duplicate key \"c\"", "'b'"});
  expect_error([] { drope::parse_json(R"([{"k": 1}, {"k": 1, "k": 2}])", "arr.json"); },
               {"duplicate key \"k\"", "[1]"});
  // Integers beyond int64 are "out of range", not a wrapped negative number.
  expect_error([] { drope::json_int64(drope::parse_json("9223372036854775808", "x"), "f.json: key 'n'"); },
               {"f.json: key 'n'", "9223372036854775808 is out of range"});
  expect_error([] { drope::json_int64(drope::parse_json("-99999999999999999999", "x"), "f.json: key 'n'"); },
               {"out of range"});
  EXPECT_EQ(drope::json_int64(drope::parse_json("-9223372036854775808", "x"), "w"), INT64_MIN);
  const auto dir = drope::test::tmp_dir("limits_overflow");
  json idx = {
      {"format", "drope-tokens"},
      {"version", drope::text::kShardVersion},
      {"dtype", "uint32"},
      {"tokenizer", {{"file", "t.json"}, {"kind", "hf-bpe"}, {"vocab_size", 100}, {"eos_id", -1}, {"bos_id", -1}}},
      {"splits",
       {{"train",
         {{"shards", json::array({{{"file", "a.bin"}, {"tokens", 1}}})},
          {"tokens", 9223372036854775808ull},
          {"documents", 1}}}}}};
  drope::write_file_atomic(dir + "/index.json", idx.dump());
  expect_error([&] { drope::text::read_index(dir + "/index.json"); },
               {"splits.train.tokens", "9223372036854775808 is out of range"});
  expect_error(
      [] {
        drope::io::parse_hf_config(R"({"model_type": "llama", "vocab_size": 18446744073709551615})", "c/config.json");
      },
      {"c/config.json", "vocab_size", "18446744073709551615 is out of range"});
  // YaRN needs its original length: 0 would divide by zero in every HF reader.
  expect_error(
      [] {
        drope::io::parse_hf_config(R"({"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
      "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 256,
      "rope_scaling": {"rope_type": "yarn", "factor": 4, "original_max_position_embeddings": 0}})",
                                   "y/config.json");
      },
      {"y/config.json", "original_max_position_embeddings must be > 0"});
}

TEST(Limits, SafetensorsTensorsMustTileTheDataSectionExactly) {
  const std::string f32x2 = R"("dtype":"F32","shape":[2])";
  // Duplicate names: JSON readers keep the first or the last, so two readers would load different weights.
  header_fails(safetensors_bytes(
                   "{\"w\":{" + f32x2 + ",\"data_offsets\":[0,8]},\"w\":{" + f32x2 + ",\"data_offsets\":[8,16]}}", 16),
               {"duplicate key \"w\""});
  // A hole between tensors, and one before the first.
  header_fails(safetensors_bytes(
                   "{\"a\":{" + f32x2 + ",\"data_offsets\":[0,8]},\"b\":{" + f32x2 + ",\"data_offsets\":[12,20]}}", 20),
               {"4 unused bytes before tensor 'b'", "contiguously"});
  header_fails(safetensors_bytes("{\"a\":{" + f32x2 + ",\"data_offsets\":[4,12]}}", 12),
               {"4 unused bytes before tensor 'a'"});
  // Trailing bytes after the last tensor (and a file of only data).
  header_fails(safetensors_bytes("{\"a\":{" + f32x2 + ",\"data_offsets\":[0,8]}}", 11),
               {"3 trailing bytes", "cover 8 of the 11"});
  header_fails(safetensors_bytes("{}", 4), {"4 trailing bytes"});
  // Overlap.
  header_fails(safetensors_bytes(
                   "{\"a\":{" + f32x2 + ",\"data_offsets\":[0,8]},\"b\":{" + f32x2 + ",\"data_offsets\":[4,12]}}", 12),
               {"tensor 'b'", "overlaps"});
  // Out of order in the header, zero-sized tensors anywhere, exact coverage: accepted.
  const auto ok = safetensors_bytes("{\"b\":{" + f32x2 +
                                        ",\"data_offsets\":[8,16]},\"e\":{\"dtype\":\"F32\",\"shape\":[0],"
                                        "\"data_offsets\":[8,8]},\"a\":{" +
                                        f32x2 + ",\"data_offsets\":[0,8]}}",
                                    16);
  EXPECT_EQ(drope::io::parse_safetensors_header(ok.data(), ok.size(), "ok.safetensors").tensors.size(), 3u);
}

TEST(Limits, FifosAndOtherNonRegularFilesAreRefusedWithoutBlocking) {
  const auto dir = drope::test::tmp_dir("limits_fifo");
  const std::string fifo = dir + "/pipe", sp_fifo = dir + "/tok.model";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  ASSERT_EQ(::mkfifo(sp_fifo.c_str(), 0600), 0);
  // Each reader runs on a thread; if it blocks in open() (no writer ever comes), the test opens the FIFO
  // for writing itself after a few seconds to release it, and fails.
  auto refused_quickly = [&](const char* what, const std::function<void()>& read, const std::string& path) {
    auto done = std::async(std::launch::async, [&] {
      try {
        read();
        return std::string("accepted");
      } catch (const drope::Error& e) {
        return std::string(e.what());
      }
    });
    if (done.wait_for(std::chrono::seconds(5)) != std::future_status::ready) {
      ADD_FAILURE() << what << ": blocked on the FIFO";
      const int fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK);
      if (fd >= 0) ::close(fd);
    }
    const std::string msg = done.get();
    EXPECT_NE(msg.find(path), std::string::npos) << what << ": " << msg;
    EXPECT_NE(msg.find("FIFO"), std::string::npos) << what << ": " << msg;
  };
  refused_quickly("read_file", [&] { drope::read_file(fifo); }, fifo);
  refused_quickly("yaml", [&] { drope::load_model_config_file(fifo); }, fifo);
  refused_quickly(
      "jsonl", [&] { drope::text::for_each_jsonl_object(fifo, [](int64_t, const json&) { return true; }); }, fifo);
  refused_quickly("shard", [&] { drope::text::TokenShard s(fifo); }, fifo);
  refused_quickly("tokenizer.json", [&] { drope::text::load_hf_bpe(fifo); }, fifo);
  refused_quickly("sentencepiece", [&] { drope::text::load_tokenizer(sp_fifo); }, sp_fifo);
  refused_quickly("index.json", [&] { drope::text::read_index(fifo); }, fifo);
  // Character devices too; and files read whole have a size bound.
  expect_error([] { drope::read_file("/dev/zero"); }, {"/dev/zero", "character device"});
  drope::write_file_atomic(dir + "/big.txt", std::string(100, 'x'));
  expect_error([&] { drope::read_file(dir + "/big.txt", 99); }, {"big.txt", "100 bytes", "more than the 99"});
  EXPECT_EQ(drope::read_file(dir + "/big.txt", 100).size(), 100u);
}
