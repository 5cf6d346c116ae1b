// SentencePiece models through Debian's libsentencepiece, reached only through libdrope_sentencepiece.so
// (sentencepiece_module/bridge.h says why): loading, encoding, decoding and training. A model file is
// checked by check_sentencepiece_model before the library sees it.
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "drope/core/error.h"
#include "drope/core/files.h"
#include "drope/text/gguf_tokenizer.h"
#include "drope/text/sentencepiece_model.h"
#include "drope/text/tokenizer.h"
#include "module_loader.h"
#include "sentencepiece_module/bridge.h"

namespace drope::text {

namespace {

// Opens the module and resolves its functions (module_loader.h says how and why RTLD_LOCAL | RTLD_DEEPBIND).
drope_spm_api open_module() {
  constexpr const char* kFile = "libdrope_sentencepiece.so";
  void* h = detail::open_module(kFile, DROPE_SENTENCEPIECE_MODULE, "SentencePiece support");
  drope_spm_api api{};
  auto sym = [&](auto& fn, const char* name) { detail::resolve(h, fn, name, kFile); };
  sym(api.load, "drope_spm_load");
  sym(api.free, "drope_spm_free");
  sym(api.info, "drope_spm_info");
  sym(api.encode, "drope_spm_encode");
  sym(api.decode, "drope_spm_decode");
  sym(api.train, "drope_spm_train");
  return api;  // never dlclose()d: models stay usable until exit
}

// The module's functions, loaded on first use.
const drope_spm_api& spm() {
  static std::mutex mu;
  static std::unique_ptr<drope_spm_api> api;
  std::lock_guard<std::mutex> lock(mu);
  if (!api) api = std::make_unique<drope_spm_api>(open_module());
  return *api;
}

// Callbacks of the module's interface: append what they receive to a std::string / id vector.
void append_bytes(void* ctx, const char* data, size_t size) { static_cast<std::string*>(ctx)->append(data, size); }
void append_ids(void* ctx, const int32_t* ids, size_t n) {
  auto* v = static_cast<std::vector<int32_t>*>(ctx);
  v->insert(v->end(), ids, ids + n);
}

// A loaded SentencePiece model.
class SentencePieceTokenizer final : public Tokenizer {
 public:
  explicit SentencePieceTokenizer(std::string path) : SentencePieceTokenizer(path, read_file(path)) {}
  SentencePieceTokenizer(std::string label, const std::string& bytes) : path_(std::move(label)) {
    check_sentencepiece_model(bytes, path_);
    std::string err;
    drope_spm* m = nullptr;
    if (spm().load(bytes.data(), bytes.size(), &m, append_bytes, &err) != 0)
      fail("{}: not a valid SentencePiece model ({})", path_, err);
    model_.reset(m);
    spm().info(m, &pieces_, &bos_, &eos_);
    if (pieces_ <= 0) fail("{}: SentencePiece model has an empty vocabulary", path_);
  }

  std::vector<int32_t> encode(std::string_view text) const override {
    if (const int64_t bad = utf8_error_offset(text); bad >= 0) fail("text is not valid UTF-8 at byte {}", bad);
    std::vector<int32_t> ids;
    std::string err;
    if (spm().encode(model_.get(), text.data(), text.size(), append_ids, &ids, append_bytes, &err) != 0)
      fail("{}: SentencePiece encode failed ({})", path_, err);
    return ids;
  }

  std::string decode(const std::vector<int32_t>& ids, bool /*skip_special*/) const override {
    for (size_t i = 0; i < ids.size(); ++i)
      if (ids[i] < 0 || ids[i] >= pieces_)
        fail("token id {} at index {} is outside the vocabulary [0, {}) of {}", ids[i], i, pieces_, path_);
    std::string out, err;
    if (spm().decode(model_.get(), ids.data(), ids.size(), append_bytes, &out, append_bytes, &err) != 0)
      fail("{}: SentencePiece decode failed ({})", path_, err);
    return utf8_lossy(out);
  }

  int64_t vocab_size() const override { return pieces_; }
  int32_t eos_id() const override { return eos_; }
  int32_t bos_id() const override { return bos_; }
  std::string kind() const override { return "sentencepiece"; }
  const std::string& path() const override { return path_; }

 private:
  struct Free {
    void operator()(drope_spm* m) const { spm().free(m); }
  };
  std::string path_;
  std::unique_ptr<drope_spm, Free> model_;
  int32_t pieces_ = 0, bos_ = -1, eos_ = -1;
};

// Training text held in memory: SentencePiece loads every sentence anyway. Past this many bytes the
// remaining lines are not used.
constexpr int64_t kMaxTrainingBytes = int64_t{1} << 30;

}  // namespace

std::unique_ptr<Tokenizer> load_sentencepiece(const std::string& model_path) {
  return std::make_unique<SentencePieceTokenizer>(model_path);
}

std::unique_ptr<Tokenizer> load_sentencepiece_bytes(const std::string& label, const std::string& model_bytes) {
  return std::make_unique<SentencePieceTokenizer>(label, model_bytes);
}

void train_sentencepiece(const TextSource& source, const SentencePieceTrainOptions& options,
                         const std::string& out_model) {
  if (options.model_type != "bpe" && options.model_type != "unigram")
    fail("SentencePiece model type must be bpe or unigram, got '{}'", options.model_type);
  if (options.vocab_size < 260 || options.vocab_size > (int64_t{1} << 24))
    fail("SentencePiece vocab size must be in [260, 16777216] (256 byte pieces + unk/bos/eos + more), got {}",
         options.vocab_size);
  if (options.normalization_rule != "identity" && options.normalization_rule != "nmt_nfkc")
    fail("SentencePiece normalization rule must be identity or nmt_nfkc, got '{}'", options.normalization_rule);
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

  const std::vector<std::pair<std::string, std::string>> kwargs = {
      {"model_type", options.model_type},
      {"vocab_size", std::to_string(options.vocab_size)},
      {"byte_fallback", "true"},
      {"normalization_rule_name", options.normalization_rule},
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
  std::vector<const char*> keys, values, line_ptrs;
  std::vector<size_t> sizes;
  for (const auto& [k, v] : kwargs) {
    keys.push_back(k.c_str());
    values.push_back(v.c_str());
  }
  for (const auto& l : lines) {
    line_ptrs.push_back(l.data());
    sizes.push_back(l.size());
  }
  std::string proto, err;
  if (spm().train(keys.data(), values.data(), keys.size(), line_ptrs.data(), sizes.data(), lines.size(), append_bytes,
                  &proto, append_bytes, &err) != 0)
    fail("{}: SentencePiece training failed ({})", out_model, err);
  write_file_atomic(out_model, proto);
}

void train_sentencepiece(const std::vector<std::string>& corpus_files, const SentencePieceTrainOptions& options,
                         const std::string& out_model) {
  std::vector<std::string> texts;
  for (const auto& f : corpus_files) {
    texts.push_back(read_file(f));
    if (const int64_t bad = utf8_error_offset(texts.back()); bad >= 0) fail("{}: not valid UTF-8 at byte {}", f, bad);
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
