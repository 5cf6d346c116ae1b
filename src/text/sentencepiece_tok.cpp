// SentencePiece models through Debian's libsentencepiece: loading, encoding, decoding and training.
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <filesystem>
#include <fstream>
#include <unordered_map>

#include "drope/core/error.h"
#include "drope/core/files.h"
#include "drope/text/tokenizer.h"

namespace fs = std::filesystem;

namespace drope::text {

namespace {

// A loaded SentencePiece model.
class SentencePieceTokenizer final : public Tokenizer {
 public:
  explicit SentencePieceTokenizer(std::string path) : path_(std::move(path)) {
    const std::string bytes = read_file(path_);
    if (bytes.empty()) fail("{}: empty file; expected a SentencePiece model", path_);
    const auto st = sp_.LoadFromSerializedProto(bytes);
    if (!st.ok()) fail("{}: not a valid SentencePiece model ({})", path_, st.ToString());
    if (sp_.GetPieceSize() <= 0) fail("{}: SentencePiece model has an empty vocabulary", path_);
  }

  std::vector<int32_t> encode(std::string_view text) const override {
    if (const int64_t bad = utf8_error_offset(text); bad >= 0) fail("text is not valid UTF-8 at byte {}", bad);
    std::vector<int> ids;
    const auto st = sp_.Encode(text, &ids);
    if (!st.ok()) fail("{}: SentencePiece encode failed ({})", path_, st.ToString());
    return {ids.begin(), ids.end()};
  }

  std::string decode(const std::vector<int32_t>& ids, bool /*skip_special*/) const override {
    const int n = sp_.GetPieceSize();
    std::vector<int> v;
    v.reserve(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) {
      if (ids[i] < 0 || ids[i] >= n) fail("token id {} at index {} is outside the vocabulary [0, {}) of {}", ids[i], i, n, path_);
      v.push_back(ids[i]);
    }
    std::string out;
    const auto st = sp_.Decode(v, &out);
    if (!st.ok()) fail("{}: SentencePiece decode failed ({})", path_, st.ToString());
    return utf8_lossy(out);
  }

  int64_t vocab_size() const override { return sp_.GetPieceSize(); }
  int32_t eos_id() const override { return sp_.eos_id(); }
  int32_t bos_id() const override { return sp_.bos_id(); }
  std::string kind() const override { return "sentencepiece"; }
  const std::string& path() const override { return path_; }

 private:
  std::string path_;
  sentencepiece::SentencePieceProcessor sp_;
};

// Feeds collected lines to the SentencePiece trainer.
class LineIterator final : public sentencepiece::SentenceIterator {
 public:
  explicit LineIterator(const std::vector<std::string>& lines) : lines_(lines) {}
  bool done() const override { return i_ >= lines_.size(); }
  void Next() override { ++i_; }
  const std::string& value() const override { return lines_[i_]; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  const std::vector<std::string>& lines_;
  size_t i_ = 0;
};

// Largest prefix length <= max of `s` that ends on a UTF-8 character boundary.
size_t utf8_cut(std::string_view s, size_t max) {
  if (s.size() <= max) return s.size();
  size_t n = max;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  return n == 0 ? max : n;
}

// Training text held in memory: SentencePiece loads every sentence anyway. Past this many bytes the
// remaining lines are not used.
constexpr int64_t kMaxTrainingBytes = int64_t{1} << 30;

}  // namespace

std::unique_ptr<Tokenizer> load_sentencepiece(const std::string& model_path) {
  return std::make_unique<SentencePieceTokenizer>(model_path);
}

void train_sentencepiece(const TextSource& source, const SentencePieceTrainOptions& options,
                         const std::string& out_model) {
  if (options.model_type != "bpe" && options.model_type != "unigram")
    fail("SentencePiece model type must be bpe or unigram, got '{}'", options.model_type);
  if (options.vocab_size < 260 || options.vocab_size > (int64_t{1} << 24))
    fail("SentencePiece vocab size must be in [260, 16777216] (256 byte pieces + unk/bos/eos + more), got {}",
         options.vocab_size);
  std::vector<std::string> lines;
  int64_t bytes = 0;
  const size_t max_len = static_cast<size_t>(std::max<int64_t>(options.max_sentence_bytes, 16));
  source([&](std::string_view line) {
    while (!line.empty() && bytes < kMaxTrainingBytes) {
      const size_t n = utf8_cut(line, max_len);
      lines.emplace_back(line.substr(0, n));
      bytes += static_cast<int64_t>(n);
      line.remove_prefix(n);
    }
  });
  if (lines.empty()) fail("{}: no training text for the SentencePiece model", out_model);

  const std::unordered_map<std::string, std::string> kwargs = {
      {"model_type", options.model_type},
      {"vocab_size", std::to_string(options.vocab_size)},
      {"byte_fallback", "true"},
      {"normalization_rule_name", "identity"},
      {"remove_extra_whitespaces", "false"},
      {"allow_whitespace_only_pieces", "true"},
      {"split_digits", "true"},
      {"max_sentence_length", std::to_string(max_len)},
      {"num_threads", std::to_string(std::max(1, options.num_threads))},
      {"unk_id", "0"},
      {"bos_id", "1"},
      {"eos_id", "2"},
      {"pad_id", "-1"},
      {"minloglevel", "2"},
  };
  LineIterator it(lines);
  std::string proto;
  const auto st = sentencepiece::SentencePieceTrainer::Train(kwargs, &it, &proto);
  if (!st.ok()) fail("{}: SentencePiece training failed ({})", out_model, st.ToString());
  write_file_atomic(out_model, proto);
}

void train_sentencepiece(const std::vector<std::string>& corpus_files, const SentencePieceTrainOptions& options,
                         const std::string& out_model) {
  std::vector<std::string> texts;
  for (const auto& f : corpus_files) {
    texts.push_back(read_file(f));
    if (const int64_t bad = utf8_error_offset(texts.back()); bad >= 0)
      fail("{}: not valid UTF-8 at byte {}", f, bad);
  }
  train_sentencepiece(
      [&](const std::function<void(std::string_view)>& emit) {
        for (const auto& t : texts) {
          std::string_view rest(t);
          while (!rest.empty()) {
            const size_t nl = rest.find('\n');
            const auto line = rest.substr(0, nl);
            if (!line.empty()) emit(line);
            if (nl == std::string_view::npos) break;
            rest.remove_prefix(nl + 1);
          }
        }
      },
      options, out_model);
}

}  // namespace drope::text
