// Documents of text, JSON Lines (plain / gzip / zstd) and parquet files.
#include "drope/text/documents.h"

#include <algorithm>
#include <filesystem>

#include "drope/core/error.h"
#include "drope/core/files.h"
#include "drope/core/strings.h"
#include "drope/core/utf8.h"
#include "drope/text/jsonl.h"
#include "drope/text/line_reader.h"
#include "drope/text/parquet.h"

namespace fs = std::filesystem;

namespace drope::text {

namespace {

bool blank(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; });
}

// 1-based line of byte `offset` in `text`.
int64_t line_of(std::string_view text, size_t offset) {
  return 1 + std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(std::min(offset, text.size())), '\n');
}

void text_documents(const std::string& file, bool paragraphs, const DocumentFn& fn) {
  const std::string text = read_file(file);
  if (const int64_t bad = utf8_error_offset(text); bad >= 0)
    fail("{}:{}: not valid UTF-8 (byte offset {})", file, line_of(text, static_cast<size_t>(bad)), bad);
  DocumentSource where{&file, 1};
  if (!paragraphs) {
    if (!blank(text)) fn(text, where);
    return;
  }
  std::string_view rest(text);
  int64_t line = 1;
  size_t start = 0, pos = 0;
  bool in_par = false;
  while (pos <= rest.size()) {
    const size_t nl = rest.find('\n', pos);
    const size_t end = nl == std::string_view::npos ? rest.size() : nl;
    const bool empty_line = blank(rest.substr(pos, end - pos));
    if (!empty_line && !in_par) {
      in_par = true;
      start = pos;
      where.line = line;
    } else if (empty_line && in_par) {
      in_par = false;
      fn(rest.substr(start, pos - 1 - start), where);
    }
    if (nl == std::string_view::npos) break;
    pos = nl + 1;
    ++line;
  }
  if (in_par) {
    std::string_view par = rest.substr(start);
    while (!par.empty() && (par.back() == '\n' || par.back() == '\r')) par.remove_suffix(1);
    fn(par, where);
  }
}

void jsonl_documents(const std::string& file, const std::string& field, const DocumentFn& fn) {
  for_each_jsonl_object(file, [&](int64_t n, const nlohmann::json& j) {
    const auto& s = jsonl_string(j, field, file, n);
    if (!blank(s)) fn(s, DocumentSource{&file, n});
    return true;
  });
}

void parquet_documents(const std::string& file, const std::string& column, const DocumentFn& fn) {
  for_each_parquet_text(file, column, [&](int64_t group, int64_t row, const std::string_view* text) {
    if (!text || blank(*text)) return;
    const DocumentSource where{&file, 0, group, row};
    if (const int64_t bad = utf8_error_offset(*text); bad >= 0)
      fail("{}: column \"{}\" is not valid UTF-8 (byte offset {})", where.describe(), column, bad);
    fn(*text, where);
  });
}

}  // namespace

InputFormat input_format(const std::string& file) {
  const std::string plain = without_compression_suffix(file);
  if (ends_with(plain, ".jsonl")) return InputFormat::jsonl;
  if (plain != file) fail("{}: compressed input is read as JSON Lines only (name it *.jsonl.gz or *.jsonl.zst)", file);
  if (ends_with(file, ".parquet")) return InputFormat::parquet;
  return InputFormat::text;
}

std::string DocumentSource::describe() const {
  if (row_group >= 0) return fmt::format("{}: row group {}, row {}", *file, row_group, row);
  return fmt::format("{}:{}", *file, line);
}

std::vector<std::string> expand_inputs(const std::vector<std::string>& inputs) {
  if (inputs.empty()) fail("no inputs: give at least one file or directory");
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
  for (const auto& f : files) input_format(f);  // unreadable kinds fail before any work
  return files;
}

void for_each_document(const std::vector<std::string>& files, const DocumentOptions& o, const DocumentFn& fn) {
  for (const auto& f : files) {
    switch (input_format(f)) {
      case InputFormat::jsonl: jsonl_documents(f, o.text_field, fn); break;
      case InputFormat::parquet: parquet_documents(f, o.text_field, fn); break;
      case InputFormat::text: text_documents(f, o.paragraphs, fn); break;
    }
  }
}

}  // namespace drope::text
