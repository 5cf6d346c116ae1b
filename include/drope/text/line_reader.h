// Lines of a plain, gzip (.gz, zlib) or Zstandard (.zst, libzstd) file, streamed: one decompression
// buffer and the current line in memory, whatever the file size. Torch-free.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace drope::text {

// How a file is compressed, from its last extension: ".gz" → gzip, ".zst" → zstd, anything else → none.
enum class Compression { none, gzip, zstd };
Compression compression_of(const std::string& path);
// The path without a ".gz" / ".zst" suffix ("a.jsonl.gz" → "a.jsonl").
std::string without_compression_suffix(const std::string& path);

// Longest line a LineReader returns; a longer one fails naming the file and line (a decompression bomb
// without newlines cannot exhaust memory).
inline constexpr uint64_t kMaxLineBytes = uint64_t{1} << 30;

// Reads the lines of `path` in order. Only regular files are opened. Corrupt or truncated compressed
// data fails naming the file, the line the bad data falls in (one more than the lines decoded before it)
// and the decoder's message; a concatenation of gzip members or zstd frames reads as one stream.
class LineReader {
 public:
  explicit LineReader(const std::string& path, uint64_t max_line_bytes = kMaxLineBytes);
  ~LineReader();
  LineReader(const LineReader&) = delete;
  LineReader& operator=(const LineReader&) = delete;

  // The next line without its '\n' (valid until the next call); false at the end of the file.
  bool next(std::string_view& line);
  // 1-based number of the line next() returned last.
  int64_t line_number() const { return line_; }
  // Bytes of the file consumed so far (compressed bytes for .gz / .zst).
  uint64_t file_bytes_read() const;
  const std::string& path() const { return path_; }

 private:
  struct Decoder;
  // Appends decoded bytes to buf_; false at the end of the data.
  bool fill();

  std::string path_;
  uint64_t max_line_;
  std::unique_ptr<Decoder> dec_;
  std::string buf_;     // decoded bytes not yet returned
  size_t start_ = 0;    // where the unreturned bytes begin in buf_
  int64_t line_ = 0;
  bool eof_ = false;
};

}  // namespace drope::text
