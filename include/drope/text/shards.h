// Token shards on disk, the dataset index that lists them, and the loader that cuts the token stream
// into fixed-length training blocks. Torch-free.
//
// Shard file (little-endian): a 32-byte header, then `count` tokens of `token_bytes` each.
//   0  char[8]  magic "DRPTOK01"
//   8  u32      version (1)
//   12 u32      header bytes (32)
//   16 u32      token bytes (2 = uint16, 4 = uint32)
//   20 i32      EOS id appended after every document (-1: none)
//   24 u64      token count
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace drope::text {

inline constexpr char kShardMagic[8] = {'D', 'R', 'P', 'T', 'O', 'K', '0', '1'};
inline constexpr uint32_t kShardVersion = 1;
inline constexpr size_t kShardHeaderBytes = 32;

// 2 when every id of a vocabulary this size fits in uint16, else 4.
int token_bytes_for_vocab(int64_t vocab_size);

// One shard as listed in the index: path relative to the dataset directory, and its token count.
struct ShardInfo {
  std::string file;
  int64_t tokens = 0;
};

// One split (train / val): its shards in stream order.
struct SplitInfo {
  std::vector<ShardInfo> shards;
  int64_t tokens = 0;
  int64_t documents = 0;
};

// The tokenizer a dataset was made with; `file` is relative to the dataset directory.
struct TokenizerInfo {
  std::string file;
  std::string kind;  // sentencepiece | hf-bpe
  int64_t vocab_size = 0;
  int32_t eos_id = -1;
  int32_t bos_id = -1;
};

// index.json of a prepared dataset.
struct DatasetIndex {
  int token_bytes = 2;
  TokenizerInfo tokenizer;
  std::map<std::string, SplitInfo> splits;  // "train", "val"
  nlohmann::json meta = nlohmann::json::object();  // how it was made (sources, seed, ...), informational
};

nlohmann::json index_to_json(const DatasetIndex& index);
// Reads and validates an index.json (format, version, dtype, every shard entry); errors name the file
// and the key.
DatasetIndex read_index(const std::string& index_path);

// Streams documents of one split into shard files `<dir>/<prefix>_NNNNN.bin` of at most `max_tokens`
// tokens each (a document may continue in the next shard); each shard is written atomically.
class ShardWriter {
 public:
  ShardWriter(std::string dir, std::string prefix, int token_bytes, int32_t eos_id, int64_t max_tokens);
  // Appends `ids` and then the EOS id.
  void add_document(const std::vector<int32_t>& ids);
  // Writes the last partial shard; returns every shard written (file names relative to `dir`).
  std::vector<ShardInfo> finish();
  int64_t tokens() const { return tokens_; }
  int64_t documents() const { return documents_; }

 private:
  void flush();

  std::string dir_, prefix_;
  int token_bytes_;
  int32_t eos_id_;
  int64_t max_tokens_;
  std::string buffer_;  // encoded tokens of the current shard
  int64_t buffered_ = 0, tokens_ = 0, documents_ = 0;
  std::vector<ShardInfo> written_;
};

// A memory-mapped shard. The header is read and checked against the file size before anything is
// mapped, so a hostile header cannot cause a large allocation.
class TokenShard {
 public:
  explicit TokenShard(const std::string& path);
  ~TokenShard();
  TokenShard(const TokenShard&) = delete;
  TokenShard& operator=(const TokenShard&) = delete;

  int64_t size() const { return count_; }
  int token_bytes() const { return token_bytes_; }
  int32_t eos_id() const { return eos_id_; }
  const std::string& path() const { return path_; }
  // Token i (no bounds check: callers stay inside size()).
  uint32_t operator[](int64_t i) const;

 private:
  std::string path_;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  const unsigned char* data_ = nullptr;
  int64_t count_ = 0;
  int token_bytes_ = 2;
  int32_t eos_id_ = -1;
};

// The token stream of one split: its shards concatenated.
class TokenStream {
 public:
  // Opens `split` of the dataset at `dataset` (a directory holding index.json, or the index file).
  // Each shard must agree with the index (count, dtype, EOS); errors name the file.
  static std::shared_ptr<TokenStream> open(const std::string& dataset, const std::string& split);
  // Opens shard files directly; ids are checked against `vocab_size` when it is > 0.
  static std::shared_ptr<TokenStream> from_shards(const std::vector<std::string>& paths, int64_t vocab_size = 0);

  int64_t size() const { return total_; }
  // A name for messages (the index file and split, or the first shard).
  const std::string& name() const { return name_; }
  // Copies tokens [begin, begin + n) to `out`; fails naming the shard if an id is outside the vocabulary.
  void read(int64_t begin, int64_t n, int64_t* out) const;

 private:
  std::vector<std::unique_ptr<TokenShard>> shards_;
  std::vector<int64_t> starts_;  // stream offset of each shard
  int64_t total_ = 0;
  int64_t vocab_size_ = 0;
  std::string name_;
};

// How a loader walks the stream.
struct LoaderOptions {
  int64_t seq_len = 0;   // tokens per training sequence; each block holds seq_len + 1 (inputs + shifted labels)
  int rank = 0;          // this process's rank
  int world_size = 1;    // number of ranks; rank r takes blocks r, r + W, r + 2W, ...
  bool shuffle = false;  // a fresh block order per epoch, a deterministic function of (seed, epoch)
  uint64_t seed = 0;
};

// Exact position of a loader: the next block is the `index`-th of this rank in epoch `epoch`. The
// other fields record the loader's configuration so that a mismatched restore fails.
struct LoaderState {
  int64_t epoch = 0;
  int64_t index = 0;
  int64_t seq_len = 0;
  int rank = 0;
  int world_size = 1;
  bool shuffle = false;
  uint64_t seed = 0;
  int64_t stream_tokens = 0;

  nlohmann::json to_json() const;
  // Validates types and values; `where` names the source in errors (e.g. a checkpoint file).
  static LoaderState from_json(const nlohmann::json& j, const std::string& where);
};

// Yields blocks of seq_len + 1 consecutive tokens from a token stream: block k covers tokens
// [k·seq_len, k·seq_len + seq_len], so labels are inputs shifted by one. Every rank gets the same
// number of blocks per epoch (the remainder is left out); after the last one the next epoch starts.
class TokenLoader {
 public:
  TokenLoader(std::shared_ptr<const TokenStream> stream, LoaderOptions options);

  int64_t block_tokens() const { return opts_.seq_len + 1; }
  // Blocks this rank reads per epoch.
  int64_t blocks_per_epoch() const { return per_rank_; }
  // Global index of this rank's i-th block in `epoch` (in [0, total blocks)).
  int64_t block_id(int64_t epoch, int64_t i) const;
  // Writes the next block (seq_len + 1 tokens) to `out`.
  void next(int64_t* out);
  // `batch` blocks back to back: (batch, seq_len + 1), row-major.
  std::vector<int64_t> next_batch(int64_t batch);

  LoaderState state() const;
  // Continues exactly where `s` was taken; fails when `s` came from a differently configured loader.
  void restore(const LoaderState& s);

 private:
  std::shared_ptr<const TokenStream> stream_;
  LoaderOptions opts_;
  int64_t blocks_ = 0;    // blocks in the whole stream
  int64_t per_rank_ = 0;  // blocks per rank per epoch
  int64_t epoch_ = 0, index_ = 0;
};

// A bijection of [0, n) keyed by `key` (a small Feistel network with cycle walking): random access,
// no memory. Used for the shuffled block order and the validation split.
class Permutation {
 public:
  Permutation(uint64_t n, uint64_t key);
  uint64_t operator()(uint64_t i) const;

 private:
  uint64_t n_, key_;
  int half_bits_ = 0;
};

}  // namespace drope::text
