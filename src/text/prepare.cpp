// prepare_dataset: documents from text/jsonl files → tokenizer (loaded or trained) → token shards.
#include "drope/text/prepare.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>

#include "drope/core/error.h"
#include "drope/core/files.h"
#include "drope/text/jsonl.h"
#include "drope/text/tokenizer.h"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace drope::text {

namespace {

// Called for each non-empty document with its text, file and 1-based starting line.
using DocFn = std::function<void(std::string_view text, const std::string& file, int64_t line)>;

bool blank(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; });
}

bool is_jsonl(const std::string& f) { return fs::path(f).extension() == ".jsonl"; }

// The input files in order: files as given, directories walked recursively in sorted order.
std::vector<std::string> expand_inputs(const std::vector<std::string>& inputs) {
  if (inputs.empty()) fail("no inputs: give at least one text/jsonl file or directory");
  std::vector<std::string> files;
  for (const auto& in : inputs) {
    std::error_code ec;
    if (!fs::exists(in, ec)) fail("{}: input not found", in);
    if (!fs::is_directory(in, ec)) {
      files.push_back(in);
      continue;
    }
    std::vector<std::string> found;
    for (auto it = fs::recursive_directory_iterator(in, fs::directory_options::follow_directory_symlink, ec);
         !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
      const std::string name = it->path().filename().string();
      if (!name.empty() && name[0] == '.') {
        if (it->is_directory()) it.disable_recursion_pending();
        continue;
      }
      if (it->is_regular_file()) found.push_back(it->path().string());
    }
    if (ec) fail("{}: cannot list directory ({})", in, ec.message());
    if (found.empty()) fail("{}: directory holds no files", in);
    std::sort(found.begin(), found.end());
    files.insert(files.end(), found.begin(), found.end());
  }
  return files;
}

// 1-based line of byte `offset` in `text`.
int64_t line_of(std::string_view text, size_t offset) {
  return 1 + std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(std::min(offset, text.size())), '\n');
}

void text_documents(const std::string& file, bool paragraphs, const DocFn& fn) {
  const std::string text = read_file(file);
  if (const int64_t bad = utf8_error_offset(text); bad >= 0)
    fail("{}:{}: not valid UTF-8 (byte offset {})", file, line_of(text, static_cast<size_t>(bad)), bad);
  if (!paragraphs) {
    if (!blank(text)) fn(text, file, 1);
    return;
  }
  std::string_view rest(text);
  int64_t line = 1, start_line = 1;
  size_t start = 0, pos = 0;
  bool in_par = false;
  while (pos <= rest.size()) {
    const size_t nl = rest.find('\n', pos);
    const size_t end = nl == std::string_view::npos ? rest.size() : nl;
    const bool empty_line = blank(rest.substr(pos, end - pos));
    if (!empty_line && !in_par) {
      in_par = true;
      start = pos;
      start_line = line;
    } else if (empty_line && in_par) {
      in_par = false;
      fn(rest.substr(start, pos - 1 - start), file, start_line);
    }
    if (nl == std::string_view::npos) break;
    pos = nl + 1;
    ++line;
  }
  if (in_par) {
    std::string_view par = rest.substr(start);
    while (!par.empty() && (par.back() == '\n' || par.back() == '\r')) par.remove_suffix(1);
    fn(par, file, start_line);
  }
}

void jsonl_documents(const std::string& file, const DocFn& fn) {
  for_each_jsonl_object(file, [&](int64_t n, const json& j) {
    const auto& s = jsonl_string(j, "text", file, n);
    if (!blank(s)) fn(s, file, n);
    return true;
  });
}

void for_each_document(const std::vector<std::string>& files, bool paragraphs, const DocFn& fn) {
  for (const auto& f : files) {
    if (is_jsonl(f)) jsonl_documents(f, fn);
    else text_documents(f, paragraphs, fn);
  }
}

// Copies an existing tokenizer into `dir` (with the tokenizer_config.json beside an HF tokenizer.json)
// and returns its file name there.
std::string copy_tokenizer(const Tokenizer& tok, const std::string& dir) {
  const bool sp = tok.kind() == "sentencepiece";
  const std::string name = sp ? "tokenizer.model" : "tokenizer.json";
  write_file_atomic((fs::path(dir) / name).string(), read_file(tok.path()));
  const auto cfg = fs::path(tok.path()).parent_path() / "tokenizer_config.json";
  std::error_code ec;
  if (!sp && fs::exists(cfg, ec)) write_file_atomic((fs::path(dir) / "tokenizer_config.json").string(), read_file(cfg.string()));
  return name;
}

}  // namespace

DatasetIndex prepare_dataset(const PrepareOptions& o) {
  if (o.out_dir.empty()) fail("no output directory given");
  if (!(o.val_fraction >= 0.0 && o.val_fraction < 1.0)) fail("validation fraction must be in [0, 1), got {}", o.val_fraction);
  if (o.shard_tokens < 1) fail("shard size must be at least 1 token, got {}", o.shard_tokens);
  const bool train_tok = o.train_vocab_size > 0;
  if (train_tok == !o.tokenizer.empty())
    fail("give either an existing tokenizer or a vocabulary size to train a SentencePiece model (exactly one)");
  check_replaceable_dir(o.out_dir, "index.json", "prepared dataset", "");
  const std::vector<std::string> files = expand_inputs(o.inputs);

  // Pass 1: validate every document and count them.
  int64_t n_docs = 0;
  for_each_document(files, o.paragraphs, [&](std::string_view, const std::string&, int64_t) { ++n_docs; });
  if (n_docs == 0) fail("{}: no non-empty documents in the inputs", files.front());
  int64_t n_val = 0;
  if (o.val_fraction > 0) n_val = std::max<int64_t>(1, std::llround(o.val_fraction * static_cast<double>(n_docs)));
  if (n_val >= n_docs)
    fail("{} documents are too few for a validation fraction of {} (no training documents would remain)", n_docs,
         o.val_fraction);
  const Permutation perm(static_cast<uint64_t>(n_docs), o.seed);
  auto is_val = [&](int64_t k) { return static_cast<int64_t>(perm(static_cast<uint64_t>(k))) < n_val; };

  DatasetIndex index;
  write_dir_atomic(o.out_dir, [&](const std::string& tmp) {
    std::unique_ptr<Tokenizer> tok;
    if (train_tok) {
      const std::string model = (fs::path(tmp) / "tokenizer.model").string();
      SentencePieceTrainOptions so;
      so.vocab_size = o.train_vocab_size;
      so.model_type = o.train_model_type;
      train_sentencepiece(
          [&](const std::function<void(std::string_view)>& emit) {
            int64_t k = 0;
            for_each_document(files, o.paragraphs, [&](std::string_view text, const std::string&, int64_t) {
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
      index.tokenizer.file = copy_tokenizer(*src, tmp);
      tok = load_tokenizer((fs::path(tmp) / index.tokenizer.file).string());
    }
    if (tok->eos_id() < 0)
      fail("{}: the tokenizer has no end-of-sequence token, which separates documents in the token stream",
           o.tokenizer.empty() ? index.tokenizer.file : o.tokenizer);
    index.tokenizer.kind = tok->kind();
    index.tokenizer.vocab_size = tok->vocab_size();
    index.tokenizer.eos_id = tok->eos_id();
    index.tokenizer.bos_id = tok->bos_id();
    index.token_bytes = token_bytes_for_vocab(tok->vocab_size());

    // Pass 2 (3 when a tokenizer was trained): tokenise into the two splits.
    ShardWriter train((fs::path(tmp) / "train").string(), "shard", index.token_bytes, tok->eos_id(), o.shard_tokens);
    ShardWriter val((fs::path(tmp) / "val").string(), "shard", index.token_bytes, tok->eos_id(), o.shard_tokens);
    fs::create_directories(fs::path(tmp) / "train");
    fs::create_directories(fs::path(tmp) / "val");
    int64_t k = 0;
    for_each_document(files, o.paragraphs, [&](std::string_view text, const std::string& file, int64_t line) {
      std::vector<int32_t> ids;
      try {
        ids = tok->encode(text);
      } catch (const Error& e) {
        fail("{}:{}: {}", file, line, e.what());
      }
      (is_val(k++) ? val : train).add_document(ids);
    });
    for (auto* w : {&train, &val}) {
      const std::string split = w == &train ? "train" : "val";
      SplitInfo s;
      for (auto sh : w->finish()) s.shards.push_back({split + "/" + sh.file, sh.tokens});
      s.tokens = w->tokens();
      s.documents = w->documents();
      index.splits[split] = std::move(s);
    }
    json sources = json::array();
    for (const auto& f : o.inputs) sources.push_back(f);
    index.meta = {{"tool", "drope-data prepare"},
                  {"sources", sources},
                  {"documents", n_docs},
                  {"document_unit", o.paragraphs ? "paragraph" : "file"},
                  {"val_fraction", o.val_fraction},
                  {"seed", o.seed},
                  {"shard_tokens", o.shard_tokens},
                  {"tokenizer_source", train_tok ? json(fmt::format("trained: sentencepiece {} vocab {}",
                                                                    o.train_model_type, o.train_vocab_size))
                                                 : json(o.tokenizer)}};
    write_file_atomic((fs::path(tmp) / "index.json").string(), index_to_json(index).dump(2) + "\n");
  });
  return index;
}

}  // namespace drope::text
