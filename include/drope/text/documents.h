// The documents of a corpus, read from the files users have: plain text, JSON Lines (plain, .gz, .zst)
// and parquet, given as files or whole directories. Streamed: a text file, one line or one parquet row
// group is in memory at a time. Torch-free.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace drope::text {

// How a file's documents are read, from its name:
//   *.jsonl, *.jsonl.gz, *.jsonl.zst  one document per non-blank line, an object with a string field;
//   *.parquet                          one document per row of a string column (nulls skipped);
//   any other file                     plain UTF-8 text: the whole file, or one document per paragraph.
// Other .gz / .zst files are refused.
enum class InputFormat { text, jsonl, parquet };
InputFormat input_format(const std::string& file);

// What to read from each file.
struct DocumentOptions {
  bool paragraphs = false;         // text files: one document per blank-line-separated paragraph
  std::string text_field = "text";  // JSON Lines field / parquet column holding the text
};

// Where a document starts, for messages: "file:line" (text, JSON Lines) or "file: row group G, row R"
// (parquet, both 0-based).
struct DocumentSource {
  const std::string* file = nullptr;
  int64_t line = 0;        // 1-based; 0 for parquet rows
  int64_t row_group = -1;  // parquet only
  int64_t row = -1;        // parquet only: row within the row group
  std::string describe() const;
};

// Called for each non-blank document with its text (valid during the call only) and origin.
using DocumentFn = std::function<void(std::string_view text, const DocumentSource& where)>;

// The input files in order: files as given, directories walked recursively (symlinks followed, hidden
// entries skipped) in sorted byte order, so the order never depends on the file system.
std::vector<std::string> expand_inputs(const std::vector<std::string>& inputs);

// Calls fn for every non-blank document of `files` in order. Every document is checked (UTF-8, JSON,
// field/column type); errors name the file and the line or row group and row.
void for_each_document(const std::vector<std::string>& files, const DocumentOptions& options, const DocumentFn& fn);

}  // namespace drope::text
