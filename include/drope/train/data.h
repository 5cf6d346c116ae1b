// Training data as fixed-length blocks: block b holds tokens [b·T, b·T + T + 1) of a token stream
// (inputs + labels shifted by one). Batches are taken at global positions of a per-epoch order, so a
// run's data position is a function of its step: exact resume and rank sharding need no extra state.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

namespace drope::train {

class BlockSource {
 public:
  virtual ~BlockSource() = default;
  virtual int64_t num_blocks() const = 0;
  virtual int64_t seq_len() const = 0;
  virtual int64_t vocab_size() const = 0;
  // (T + 1) int64 tokens of block `b` in storage order.
  virtual torch::Tensor block(int64_t b) const = 0;
  virtual std::string describe() const = 0;
  // Sources whose loss covers only some targets (a task's answers): a (T + 1) uint8 mask parallel to
  // block(b), mask[t] = 1 iff token t carries loss (as a label, t ≥ 1). Undefined = every target counts.
  virtual torch::Tensor loss_mask(int64_t /*b*/) const { return {}; }
  // Generated sources (a synthetic task) have a block for every index and no epoch order to shuffle:
  // position p of a run is block p.
  virtual bool generated() const { return false; }
};

// Blocks over bytes held in memory as byte tokens (vocab 256), one byte per token: a block is widened to
// int64 only when it is taken. Sources over parts of one corpus share its bytes.
class ByteBlockSource final : public BlockSource {
 public:
  // Tokens [begin, end) of `bytes`.
  ByteBlockSource(std::shared_ptr<const std::string> bytes, size_t begin, size_t end, int64_t seq_len,
                  std::string name);
  int64_t num_blocks() const override;
  int64_t seq_len() const override { return seq_len_; }
  int64_t vocab_size() const override { return 256; }
  torch::Tensor block(int64_t b) const override;
  std::string describe() const override { return name_; }

 private:
  std::shared_ptr<const std::string> bytes_;
  size_t begin_, end_;
  int64_t seq_len_;
  std::string name_;
};

// The files a byte corpus reads, in order: every regular file under directory `path` (sorted), or `path` itself.
std::vector<std::string> corpus_files(const std::string& path);

// All regular files under `path` (sorted; or the file itself) concatenated. The total size is known before
// anything is read: a corpus larger than the memory available (check_memory_estimate) is refused, naming
// `what` (how the user named the path).
std::string read_byte_corpus(const std::string& path, const std::string& what = "data.text");

// A text file or a directory of files read as bytes (vocab 256); the last 10% forms the validation split.
struct SplitSources {
  std::unique_ptr<BlockSource> train, val;
};
SplitSources byte_text_sources(const std::string& path, int64_t seq_len);

// The train and val splits of a dataset prepared by `drope-data prepare` (memory-mapped token shards).
SplitSources dataset_sources(const std::string& dataset, int64_t seq_len);

// Generated offset-key sequences (tasks/offset_key.h) of length T + 1 for data.task: offset-key. Block b of
// split `split` is sequence offset_key_index(split, b) of `seed`; the loss mask keeps only the answers.
class OffsetKeySource final : public BlockSource {
 public:
  OffsetKeySource(uint64_t seed, bool heldout, int64_t seq_len);
  int64_t num_blocks() const override;
  int64_t seq_len() const override { return seq_len_; }
  int64_t vocab_size() const override;
  torch::Tensor block(int64_t b) const override;
  torch::Tensor loss_mask(int64_t b) const override;
  bool generated() const override { return true; }
  std::string describe() const override;

 private:
  uint64_t seed_;
  bool heldout_;
  int64_t seq_len_;
};

// The train and held-out splits of a synthetic task (data.task); `seed` is the run's seed.
SplitSources task_sources(const std::string& task, uint64_t seed, int64_t seq_len);

// Blocks at global positions [pos, pos + count) of the epoch order (a seeded permutation per epoch
// when `shuffle`): (count, T + 1) int64.
class BlockSampler {
 public:
  BlockSampler(const BlockSource& src, uint64_t seed, bool shuffle) : src_(src), seed_(seed), shuffle_(shuffle) {}
  torch::Tensor batch(int64_t pos, int64_t count);
  // The loss masks of the same blocks, (count, T + 1) uint8; undefined when the source has none.
  torch::Tensor mask(int64_t pos, int64_t count);

 private:
  int64_t index(int64_t pos);
  const BlockSource& src_;
  uint64_t seed_;
  bool shuffle_;
  int64_t epoch_ = -1;
  torch::Tensor perm_;  // (num_blocks) int64
};

}  // namespace drope::train
