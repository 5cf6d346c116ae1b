// prepare_dataset: documents (text/documents.h) → tokenizer (loaded or trained) → token shards, tokenised
// on several threads and written in document order.
#include "drope/text/prepare.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <exception>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "drope/core/error.h"
#include "drope/core/files.h"
#include "drope/formats/gguf.h"
#include "drope/text/documents.h"
#include "drope/text/gguf_tokenizer.h"
#include "drope/text/tokenizer.h"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace drope::text {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Documents per batch and text bytes per batch at most (a batch is the unit of work of one thread).
constexpr size_t kBatchDocuments = 64;
constexpr uint64_t kBatchBytes = uint64_t{1} << 18;

// A run of consecutive documents: texts and origins in; ids, or the first error, out.
struct Batch {
  std::vector<std::string> texts;
  std::vector<DocumentSource> where;
  std::vector<std::vector<int32_t>> ids;
  uint64_t bytes = 0;
  std::exception_ptr error;
  bool done = false;  // guarded by OrderedEncoder::mu_
};

void encode_batch(const Tokenizer& tok, Batch& b) {
  b.ids.resize(b.texts.size());
  for (size_t i = 0; i < b.texts.size(); ++i) {
    try {
      b.ids[i] = tok.encode(b.texts[i]);
    } catch (const std::exception& e) {
      b.error = std::make_exception_ptr(Error(fmt::format("{}: {}", b.where[i].describe(), e.what())));
      break;
    }
  }
  b.texts = {};  // the ids are all that is left to write
}

// Tokenises batches on `threads` worker threads (none for 1: inline) and hands each to `sink` on the
// calling thread in submission order, so what is written never depends on the thread count. At most
// 2 · threads batches are in flight.
class OrderedEncoder {
 public:
  OrderedEncoder(const Tokenizer& tok, int threads, std::function<void(Batch&)> sink)
      : tok_(tok), sink_(std::move(sink)), max_in_flight_(2 * static_cast<size_t>(threads)) {
    if (threads > 1)
      for (int i = 0; i < threads; ++i) workers_.emplace_back([this] { work(); });
  }
  ~OrderedEncoder() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    work_cv_.notify_all();
    for (auto& t : workers_) t.join();
  }
  OrderedEncoder(const OrderedEncoder&) = delete;
  OrderedEncoder& operator=(const OrderedEncoder&) = delete;

  void submit(std::unique_ptr<Batch> b) {
    if (workers_.empty()) {
      encode_batch(tok_, *b);
      return sink_(*b);
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      todo_.push_back(b.get());
      in_flight_.push_back(std::move(b));
    }
    work_cv_.notify_one();
    while (in_flight_.size() >= max_in_flight_) sink_oldest();
  }

  // Sinks every batch still in flight.
  void finish() {
    while (!in_flight_.empty()) sink_oldest();
  }

 private:
  void work() {
    for (;;) {
      Batch* b = nullptr;
      {
        std::unique_lock<std::mutex> lock(mu_);
        work_cv_.wait(lock, [&] { return stop_ || !todo_.empty(); });
        if (stop_) return;
        b = todo_.front();
        todo_.pop_front();
      }
      encode_batch(tok_, *b);
      {
        std::lock_guard<std::mutex> lock(mu_);
        b->done = true;
      }
      done_cv_.notify_all();
    }
  }

  void sink_oldest() {
    std::unique_ptr<Batch> b;
    {
      std::unique_lock<std::mutex> lock(mu_);
      done_cv_.wait(lock, [&] { return in_flight_.front()->done; });
      b = std::move(in_flight_.front());
      in_flight_.pop_front();
    }
    sink_(*b);
  }

  const Tokenizer& tok_;
  std::function<void(Batch&)> sink_;
  size_t max_in_flight_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  std::deque<Batch*> todo_;                       // submitted, not yet claimed by a worker
  std::deque<std::unique_ptr<Batch>> in_flight_;  // submitted, not yet sunk, in submission order
  bool stop_ = false;
};

// Writes the tokenizer `tok` was loaded from into `dir` as a model directory holds it and returns the main file's
// name there: a tokenizer.model or tokenizer.json is copied (with the tokenizer_config.json beside an HF
// tokenizer.json); a GGUF model's tokenizer is written from its metadata, as `drope-model convert` writes it.
std::string write_dataset_tokenizer(const Tokenizer& tok, const std::string& dir) {
  if (gguf::is_gguf_path(tok.path())) {
    const GgufTokenizerFiles files = gguf_tokenizer_files(gguf::File(tok.path()));
    for (const auto& [name, bytes] : files.files()) write_file_atomic((fs::path(dir) / name).string(), bytes);
    return files.main_file();
  }
  const bool sp = tok.kind() == "sentencepiece";
  const std::string name = sp ? "tokenizer.model" : "tokenizer.json";
  write_file_atomic((fs::path(dir) / name).string(), read_file(tok.path()));
  const auto cfg = fs::path(tok.path()).parent_path() / "tokenizer_config.json";
  std::error_code ec;
  if (!sp && fs::exists(cfg, ec))
    write_file_atomic((fs::path(dir) / "tokenizer_config.json").string(), read_file(cfg.string()));
  return name;
}

// Text the dataset's tokenizer must encode as its source does: the start of the corpus and a fixed mix of
// scripts, digits, whitespace runs and symbols.
constexpr const char* kTokenizerProbe =
    "Hello, World! 12345 67.89  tabs\tand\nnewlines   \u00e9t\u00e9 na\u00efve \u4e2d\u6587 "
    "\u0440\u0443\u0441\u0441\u043a\u0438\u0439 \U0001F600 <|endoftext|> </s> x=y+1; {\"k\": [1,2]}";

// Fails unless `copy` (loaded back from the dataset) encodes `sample` and the probe text exactly as `src` does
// and has the same vocabulary size and special ids.
void check_tokenizer_copy(const Tokenizer& src, const Tokenizer& copy, const std::string& source_path,
                          const std::string& sample) {
  const auto what = [&](const std::string& detail) {
    fail("{}: the tokenizer written into the dataset ({}) does not match its source: {}", source_path, copy.path(),
         detail);
  };
  if (copy.kind() != src.kind()) what(fmt::format("kind {} vs {}", copy.kind(), src.kind()));
  if (copy.vocab_size() != src.vocab_size())
    what(fmt::format("vocabulary size {} vs {}", copy.vocab_size(), src.vocab_size()));
  if (copy.eos_id() != src.eos_id() || copy.bos_id() != src.bos_id())
    what(fmt::format("eos/bos ids {}/{} vs {}/{}", copy.eos_id(), copy.bos_id(), src.eos_id(), src.bos_id()));
  for (const std::string& text : {sample, std::string(kTokenizerProbe)}) {
    const auto a = src.encode(text), b = copy.encode(text);
    if (a == b) continue;
    size_t i = 0;
    while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
    what(fmt::format("token {} of a {}-byte sample differs ({} vs {} tokens)", i, text.size(), b.size(), a.size()));
  }
}

void check_prepare_options(const PrepareOptions& o) {
  if (o.out_dir.empty()) fail("no output directory given");
  if (!(o.val_fraction >= 0.0 && o.val_fraction < 1.0))
    fail("validation fraction must be in [0, 1), got {}", o.val_fraction);
  if (o.shard_tokens < 1) fail("shard size must be at least 1 token, got {}", o.shard_tokens);
  const bool train_tok = o.train_vocab_size > 0;
  if (train_tok == !o.tokenizer.empty())
    fail("give either an existing tokenizer or a vocabulary size to train a SentencePiece model (exactly one)");
  if (o.threads < 1) fail("thread count must be at least 1, got {}", o.threads);
  if (o.text_field.empty()) fail("the text field / column name must not be empty");
}

using Report = std::function<void(PrepareProgress)>;
using IsVal = std::function<bool(int64_t)>;  // whether document k (in input order) is a validation document

// Pass 1: validate every document and count them.
// `sample` gets the start of the corpus (up to kSampleBytes, whole documents' prefixes).
constexpr size_t kSampleBytes = 16384;
PrepareProgress scan_documents(const std::vector<std::string>& files, const DocumentOptions& doc_opts,
                               const Report& report, std::string& sample) {
  PrepareProgress scan;
  const auto scan_start = Clock::now();
  for_each_document(files, doc_opts, [&](std::string_view text, const DocumentSource&) {
    if (sample.size() < kSampleBytes) {
      std::string_view head = text.substr(0, kSampleBytes - sample.size());
      while (!head.empty() && utf8_error_offset(head) >= 0) head.remove_suffix(1);  // whole code points only
      sample.append(head);
      sample.push_back('\n');
    }
    ++scan.documents;
    scan.text_bytes += text.size();
    if (scan.documents % 256 == 0) {
      scan.seconds = seconds_since(scan_start);
      report(scan);
    }
  });
  scan.seconds = seconds_since(scan_start);
  scan.done = true;
  report(scan);
  return scan;
}

// The tokenizer in the dataset directory `tmp`: a SentencePiece model trained on the training documents'
// lines, or a copy of the given one. Fills index.tokenizer and index.token_bytes.
std::unique_ptr<Tokenizer> dataset_tokenizer(const PrepareOptions& o, const std::vector<std::string>& files,
                                             const DocumentOptions& doc_opts, const IsVal& is_val,
                                             const std::string& sample, const std::string& tmp, DatasetIndex& index) {
  std::unique_ptr<Tokenizer> tok;
  if (o.train_vocab_size > 0) {
    const std::string model = (fs::path(tmp) / "tokenizer.model").string();
    SentencePieceTrainOptions so;
    so.vocab_size = o.train_vocab_size;
    so.model_type = o.train_model_type;
    train_sentencepiece(
        [&](const std::function<void(std::string_view)>& emit) {
          int64_t k = 0;
          for_each_document(files, doc_opts, [&](std::string_view text, const DocumentSource&) {
            if (is_val(k++)) return;
            while (!text.empty()) {
              const size_t nl = text.find('\n');
              const auto line = text.substr(0, nl);
              if (!line.empty()) emit(line);
              if (nl == std::string_view::npos) break;
              text.remove_prefix(nl + 1);
            }
          });
        },
        so, model);
    tok = load_sentencepiece(model);
    index.tokenizer.file = "tokenizer.model";
  } else {
    const auto src = load_tokenizer(o.tokenizer);
    index.tokenizer.file = write_dataset_tokenizer(*src, tmp);
    tok = load_tokenizer((fs::path(tmp) / index.tokenizer.file).string());
    check_tokenizer_copy(*src, *tok, o.tokenizer, sample);
  }
  if (tok->eos_id() < 0)
    fail("{}: the tokenizer has no end-of-sequence token, which separates documents in the token stream",
         o.tokenizer.empty() ? index.tokenizer.file : o.tokenizer);
  index.tokenizer.kind = tok->kind();
  index.tokenizer.vocab_size = tok->vocab_size();
  index.tokenizer.eos_id = tok->eos_id();
  index.tokenizer.bos_id = tok->bos_id();
  index.token_bytes = token_bytes_for_vocab(tok->vocab_size());
  return tok;
}

// Pass 2 (3 when a tokenizer was trained): tokenise into the two splits under `tmp`; fills index.splits.
void tokenize_splits(const PrepareOptions& o, const std::vector<std::string>& files, const DocumentOptions& doc_opts,
                     const IsVal& is_val, const PrepareProgress& scan, const Tokenizer& tok, const std::string& tmp,
                     const Report& report, DatasetIndex& index) {
  const int64_t n_docs = scan.documents;
  ShardWriter train((fs::path(tmp) / "train").string(), "shard", index.token_bytes, tok.eos_id(), o.shard_tokens);
  ShardWriter val((fs::path(tmp) / "val").string(), "shard", index.token_bytes, tok.eos_id(), o.shard_tokens);
  fs::create_directories(fs::path(tmp) / "train");
  fs::create_directories(fs::path(tmp) / "val");
  // Batches of documents are read here, tokenised on the workers, and written here in order.
  PrepareProgress prog;
  prog.phase = "tokenize";
  prog.documents_total = n_docs;
  prog.text_bytes_total = scan.text_bytes;
  const auto start = Clock::now();
  int64_t k = 0;
  OrderedEncoder encoder(tok, o.threads, [&](Batch& b) {
    if (b.error) std::rethrow_exception(b.error);
    for (const auto& ids : b.ids) {
      (is_val(k++) ? val : train).add_document(ids);
      prog.tokens += static_cast<int64_t>(ids.size()) + 1;
    }
    prog.documents = k;
    prog.text_bytes += b.bytes;
    prog.seconds = seconds_since(start);
    report(prog);
  });
  auto batch = std::make_unique<Batch>();
  int64_t read = 0;
  for_each_document(files, doc_opts, [&](std::string_view text, const DocumentSource& where) {
    if (++read > n_docs)
      fail("{}: the inputs changed while being read (more documents than counted)", where.describe());
    batch->texts.emplace_back(text);
    batch->where.push_back(where);
    batch->bytes += text.size();
    if (batch->texts.size() >= kBatchDocuments || batch->bytes >= kBatchBytes) {
      encoder.submit(std::move(batch));
      batch = std::make_unique<Batch>();
    }
  });
  if (!batch->texts.empty()) encoder.submit(std::move(batch));
  encoder.finish();
  if (read != n_docs)
    fail("{}: the inputs changed while being read ({} documents, {} counted)", files.front(), read, n_docs);
  prog.done = true;
  report(prog);
  for (auto* w : {&train, &val}) {
    const std::string split = w == &train ? "train" : "val";
    SplitInfo s;
    for (auto sh : w->finish()) s.shards.push_back({split + "/" + sh.file, sh.tokens});
    s.tokens = w->tokens();
    s.documents = w->documents();
    index.splits[split] = std::move(s);
  }
}

// index.json's record of how the dataset was made.
json dataset_meta(const PrepareOptions& o, int64_t n_docs) {
  json sources = json::array();
  for (const auto& f : o.inputs) sources.push_back(f);
  return {{"tool", "drope-data prepare"},
          {"sources", sources},
          {"documents", n_docs},
          {"document_unit", o.paragraphs ? "paragraph" : "file"},
          {"text_field", o.text_field},
          {"val_fraction", o.val_fraction},
          {"seed", o.seed},
          {"shard_tokens", o.shard_tokens},
          {"tokenizer_source", o.train_vocab_size > 0 ? json(fmt::format("trained: sentencepiece {} vocab {}",
                                                                         o.train_model_type, o.train_vocab_size))
                                                      : json(o.tokenizer)}};
}

}  // namespace

DatasetIndex prepare_dataset(const PrepareOptions& o) {
  check_prepare_options(o);
  OutputDirRule rule{"--out", "prepared dataset", {"index.json"}, {{"--tokenizer", o.tokenizer}}, false, ""};
  for (const auto& in : o.inputs) rule.inputs.emplace_back("path", in);
  check_output_dir(o.out_dir, rule);
  const DirLock lock(o.out_dir, DirLock::Where::kBeside);
  check_output_dir(o.out_dir, rule);  // again under the lock: another process may have written it meanwhile
  const std::vector<std::string> files = expand_inputs(o.inputs);
  const DocumentOptions doc_opts{o.paragraphs, o.text_field};
  const Report report = [&](PrepareProgress p) {
    if (o.progress) o.progress(p);
  };

  std::string sample;
  const PrepareProgress scan = scan_documents(files, doc_opts, report, sample);
  const int64_t n_docs = scan.documents;
  if (n_docs == 0) fail("{}: no non-empty documents in the inputs", files.front());
  int64_t n_val = 0;
  if (o.val_fraction > 0) n_val = std::max<int64_t>(1, std::llround(o.val_fraction * static_cast<double>(n_docs)));
  if (n_val >= n_docs)
    fail("{} documents are too few for a validation fraction of {} (no training documents would remain)", n_docs,
         o.val_fraction);
  const Permutation perm(static_cast<uint64_t>(n_docs), o.seed);
  const IsVal is_val = [&](int64_t k) { return static_cast<int64_t>(perm(static_cast<uint64_t>(k))) < n_val; };

  DatasetIndex index;
  write_dir_atomic(o.out_dir, [&](const std::string& tmp) {
    const auto tok = dataset_tokenizer(o, files, doc_opts, is_val, sample, tmp, index);
    tokenize_splits(o, files, doc_opts, is_val, scan, *tok, tmp, report, index);
    index.meta = dataset_meta(o, n_docs);
    write_file_atomic((fs::path(tmp) / "index.json").string(), index_to_json(index).dump(2) + "\n");
  });
  return index;
}

}  // namespace drope::text
