// Corpus files (text, JSON Lines plain / .gz / .zst, parquet) → tokenizer → train/val token shards +
// index.json, written atomically. Torch-free.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "drope/text/shards.h"

namespace drope::text {

// Where prepare_dataset is: `phase` "scan" (pass 1: reading and checking every document; totals unknown)
// or "tokenize" (the last pass; totals from the scan). Reported from the calling thread.
struct PrepareProgress {
  const char* phase = "scan";
  int64_t documents = 0, documents_total = 0;
  int64_t tokens = 0;                            // tokenize: tokens written so far (EOS included)
  uint64_t text_bytes = 0, text_bytes_total = 0;  // UTF-8 bytes of the documents done / of all
  double seconds = 0;                            // since the phase started
  bool done = false;                             // the phase's last report
};

// What prepare_dataset reads and how it splits.
//
// Documents (text/documents.h): a `.jsonl`, `.jsonl.gz` or `.jsonl.zst` file gives one document per
// non-blank line (an object with a string field `text_field`); a `.parquet` file one per row of the
// string column `text_field` (row groups streamed; nulls skipped); any other file is one document, or
// with `paragraphs` one document per blank-line-separated paragraph. Directories are walked recursively
// (sorted, hidden entries skipped). Empty documents are skipped. All text must be UTF-8.
struct PrepareOptions {
  std::vector<std::string> inputs;    // files and/or directories
  std::string out_dir;                // the dataset directory (replaced atomically if it is one already)
  std::string tokenizer;              // an existing .model / tokenizer.json / directory ...
  int64_t train_vocab_size = 0;       // ... or > 0: train a SentencePiece model of this size on the train split
  std::string train_model_type = "bpe";  // bpe | unigram (SentencePiece)
  double val_fraction = 0.01;         // share of documents held out for validation, in [0, 1)
  uint64_t seed = 0;                  // picks the validation documents
  int64_t shard_tokens = int64_t{1} << 26;  // tokens per shard file at most
  bool paragraphs = false;            // text files: one document per paragraph instead of per file
  std::string text_field = "text";    // JSON Lines field / parquet column holding the text
  int threads = 1;                    // tokenisation threads (>= 1); the shards are the same for any count
  std::function<void(const PrepareProgress&)> progress;  // optional, called often (cheap calls only)
};

// Prepares a dataset: counts and validates every document (errors name file:line, or file, row group and
// row), holds out round(val_fraction · documents) of them (at least one when the fraction is > 0) chosen
// by a seeded permutation, tokenises each without BOS and appends EOS (batches of documents on `threads`
// threads, written in document order), and writes `out_dir/{train,val}/shard_NNNNN.bin`,
// `out_dir/index.json` and the tokenizer file. Nothing is left behind on error. Returns the index written.
DatasetIndex prepare_dataset(const PrepareOptions& options);

}  // namespace drope::text
