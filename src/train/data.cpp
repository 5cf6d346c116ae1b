#include "drope/train/data.h"

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>

#include "drope/core/cpu_budget.h"
#include "drope/core/error.h"
#include "drope/core/files.h"
#include "drope/tasks/offset_key.h"
#include "drope/text/shards.h"

namespace fs = std::filesystem;

namespace drope::train {

ByteBlockSource::ByteBlockSource(std::shared_ptr<const std::string> bytes, size_t begin, size_t end, int64_t seq_len,
                                 std::string name)
    : bytes_(std::move(bytes)), begin_(begin), end_(end), seq_len_(seq_len), name_(std::move(name)) {
  if (int64_t(end_ - begin_) < seq_len + 1)
    fail("{}: {} tokens, fewer than one block of seq_len + 1 = {}", name_, end_ - begin_, seq_len + 1);
}

int64_t ByteBlockSource::num_blocks() const { return (int64_t(end_ - begin_) - 1) / seq_len_; }

torch::Tensor ByteBlockSource::block(int64_t b) const {
  auto t = torch::empty({seq_len_ + 1}, torch::kLong);
  auto* out = t.data_ptr<int64_t>();
  const auto* in = reinterpret_cast<const unsigned char*>(bytes_->data()) + begin_ + size_t(b * seq_len_);
  for (int64_t i = 0; i <= seq_len_; ++i) out[i] = in[i];
  return t;
}

std::vector<std::string> corpus_files(const std::string& path) {
  std::error_code ec;
  if (!fs::is_directory(path, ec)) return {path};
  std::vector<std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(path))
    if (e.is_regular_file()) files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  return files;
}

std::string read_byte_corpus(const std::string& path, const std::string& what) {
  std::error_code ec;
  if (!fs::exists(path, ec)) fail("{} {}: text corpus not found", what, path);
  const std::vector<std::string> files = corpus_files(path);
  // Sizes first: the corpus is held whole, so it must fit before the first byte is read.
  double total = 0;
  for (const auto& f : files) total += double(InputFile(f).size());
  check_memory_estimate(total, fmt::format("{} {} ({} files, read whole as byte tokens)", what, path, files.size()),
                        "use a smaller corpus, or prepare it with drope-data prepare and set data.dataset");
  std::string bytes;
  bytes.reserve(size_t(total));
  for (const auto& f : files) bytes += read_file(f);
  return bytes;
}

SplitSources byte_text_sources(const std::string& path, int64_t seq_len) {
  auto bytes = std::make_shared<const std::string>(read_byte_corpus(path));
  const size_t split = bytes->size() * 9 / 10;
  SplitSources s;
  s.train = std::make_unique<ByteBlockSource>(bytes, 0, split, seq_len, path + " (train bytes)");
  s.val = std::make_unique<ByteBlockSource>(bytes, split, bytes->size(), seq_len, path + " (validation bytes)");
  return s;
}

namespace {

// Blocks over a memory-mapped token stream.
class ShardBlockSource final : public BlockSource {
 public:
  ShardBlockSource(std::shared_ptr<text::TokenStream> s, int64_t seq_len, int64_t vocab)
      : stream_(std::move(s)), seq_len_(seq_len), vocab_(vocab) {
    if (stream_->size() < seq_len + 1)
      fail("{}: {} tokens, fewer than one block of seq_len + 1 = {}", stream_->name(), stream_->size(), seq_len + 1);
  }
  int64_t num_blocks() const override { return (stream_->size() - 1) / seq_len_; }
  int64_t seq_len() const override { return seq_len_; }
  int64_t vocab_size() const override { return vocab_; }
  torch::Tensor block(int64_t b) const override {
    auto t = torch::empty({seq_len_ + 1}, torch::kLong);
    stream_->read(b * seq_len_, seq_len_ + 1, t.data_ptr<int64_t>());
    return t;
  }
  std::string describe() const override { return stream_->name(); }

 private:
  std::shared_ptr<text::TokenStream> stream_;
  int64_t seq_len_, vocab_;
};

}  // namespace

SplitSources dataset_sources(const std::string& dataset, int64_t seq_len) {
  const std::string index_path = fs::is_directory(dataset) ? (fs::path(dataset) / "index.json").string() : dataset;
  const auto index = text::read_index(index_path);
  for (const char* split : {"train", "val"})
    if (!index.splits.count(split)) fail("{}: the dataset has no '{}' split", index_path, split);
  SplitSources s;
  s.train = std::make_unique<ShardBlockSource>(text::TokenStream::open(dataset, "train"), seq_len,
                                               index.tokenizer.vocab_size);
  s.val =
      std::make_unique<ShardBlockSource>(text::TokenStream::open(dataset, "val"), seq_len, index.tokenizer.vocab_size);
  return s;
}

OffsetKeySource::OffsetKeySource(uint64_t seed, bool heldout, int64_t seq_len)
    : seed_(seed), heldout_(heldout), seq_len_(seq_len) {
  tasks::check_offset_key_length(seq_len + 1, "data.seq_len + 1");
}

// Index space of a split: 2^62 sequences (offset_key_index).
int64_t OffsetKeySource::num_blocks() const { return int64_t{1} << 62; }

int64_t OffsetKeySource::vocab_size() const { return tasks::OffsetKeyVocab::size; }

torch::Tensor OffsetKeySource::block(int64_t b) const {
  auto t = torch::empty({seq_len_ + 1}, torch::kLong);
  const auto split = heldout_ ? tasks::OffsetKeySplit::heldout : tasks::OffsetKeySplit::train;
  tasks::fill_offset_key_batch(seed_, tasks::offset_key_index(split, uint64_t(b)), 1, seq_len_ + 1,
                               t.data_ptr<int64_t>(), nullptr);
  return t;
}

torch::Tensor OffsetKeySource::loss_mask(int64_t b) const {
  auto tokens = torch::empty({seq_len_ + 1}, torch::kLong);
  auto m = torch::empty({seq_len_ + 1}, torch::kUInt8);
  const auto split = heldout_ ? tasks::OffsetKeySplit::heldout : tasks::OffsetKeySplit::train;
  tasks::fill_offset_key_batch(seed_, tasks::offset_key_index(split, uint64_t(b)), 1, seq_len_ + 1,
                               tokens.data_ptr<int64_t>(), m.data_ptr<uint8_t>());
  return m;
}

std::string OffsetKeySource::describe() const {
  return fmt::format("offset-key task (seed {}, {} split, answers only)", seed_, heldout_ ? "held-out" : "train");
}

SplitSources task_sources(const std::string& task, uint64_t seed, int64_t seq_len) {
  if (task != "offset-key") fail("data.task: unknown task '{}' (expected offset-key)", task);
  SplitSources s;
  s.train = std::make_unique<OffsetKeySource>(seed, false, seq_len);
  s.val = std::make_unique<OffsetKeySource>(seed, true, seq_len);
  return s;
}

int64_t BlockSampler::index(int64_t pos) {
  if (src_.generated()) return pos;
  const int64_t n = src_.num_blocks();
  const int64_t epoch = pos / n, i = pos % n;
  if (!shuffle_) return i;
  if (epoch != epoch_) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(seed_ * 1000003ull + static_cast<uint64_t>(epoch));
    perm_ = torch::randperm(n, gen, torch::kLong);
    epoch_ = epoch;
  }
  return perm_[i].item<int64_t>();
}

torch::Tensor BlockSampler::batch(int64_t pos, int64_t count) {
  std::vector<torch::Tensor> rows;
  rows.reserve(count);
  for (int64_t k = 0; k < count; ++k) rows.push_back(src_.block(index(pos + k)));
  return torch::stack(rows);  // (count, T + 1)
}

torch::Tensor BlockSampler::mask(int64_t pos, int64_t count) {
  std::vector<torch::Tensor> rows;
  rows.reserve(count);
  for (int64_t k = 0; k < count; ++k) {
    auto m = src_.loss_mask(index(pos + k));
    if (!m.defined()) return {};
    rows.push_back(m);
  }
  return torch::stack(rows);  // (count, T + 1)
}

}  // namespace drope::train
