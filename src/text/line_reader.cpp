// LineReader: plain files through read(2), gzip through zlib's inflate (gzip wrapper only, members
// concatenated), Zstandard through ZSTD_decompressStream (frames concatenated).
#include "drope/text/line_reader.h"

#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "drope/core/error.h"
#include "drope/core/files.h"
#include "drope/core/strings.h"

namespace drope::text {

namespace {

constexpr size_t kInputChunk = size_t{1} << 18;   // bytes read from the file at a time
constexpr size_t kOutputChunk = size_t{1} << 18;  // decoded bytes appended per decode step at most

}  // namespace

Compression compression_of(const std::string& path) {
  if (ends_with(path, ".gz")) return Compression::gzip;
  if (ends_with(path, ".zst")) return Compression::zstd;
  return Compression::none;
}

std::string without_compression_suffix(const std::string& path) {
  switch (compression_of(path)) {
    case Compression::gzip: return path.substr(0, path.size() - 3);
    case Compression::zstd: return path.substr(0, path.size() - 4);
    case Compression::none: break;
  }
  return path;
}

// The file and its decoder state.
struct LineReader::Decoder {
  Decoder(const std::string& path, Compression kind) : file(path), kind(kind), in(kInputChunk) {
    if (kind == Compression::gzip) {
      if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK) fail("{}: cannot start the gzip decoder", path);
    } else if (kind == Compression::zstd) {
      zd = ZSTD_createDStream();
      if (!zd) fail("{}: cannot start the zstd decoder", path);
    }
  }
  ~Decoder() {
    if (kind == Compression::gzip) inflateEnd(&zs);
    if (zd) ZSTD_freeDStream(zd);
  }

  // Reads more of the file when the input buffer is used up; false at the end of the file.
  bool refill(const std::string& path) {
    if (in_pos < in_len) return true;
    for (;;) {
      const ssize_t n = ::read(file.fd(), in.data(), in.size());
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) fail("{}: read error ({})", path, std::strerror(errno));
      in_pos = 0;
      in_len = static_cast<size_t>(n);
      consumed += in_len;
      return n > 0;
    }
  }

  // Appends decoded bytes to `out`; false when the data has ended (nothing appended). Corrupt or truncated
  // data: returns true with `error` set, after appending what was decoded before it.
  bool decode(std::string& out, const std::string& path, std::string& error) {
    const size_t old = out.size();
    for (;;) {
      if (!refill(path)) {
        if (kind == Compression::none || (kind == Compression::gzip && member_done) ||
            (kind == Compression::zstd && frame_done))
          return false;
        const char* codec = kind == Compression::gzip ? "gzip" : "zstd";
        if (consumed == 0) fail("{}: empty file, expected {} data", path, codec);
        error = fmt::format("truncated {} data (the file ends inside a compressed stream)", codec);
        return true;
      }
      out.resize(old + kOutputChunk);
      char* dst = out.data() + old;
      size_t produced = 0;
      if (kind == Compression::none) {
        produced = std::min(kOutputChunk, in_len - in_pos);
        std::memcpy(dst, in.data() + in_pos, produced);
        in_pos += produced;
      } else if (kind == Compression::gzip) {
        if (member_done) {  // another gzip member follows
          inflateReset(&zs);
          member_done = false;
        }
        zs.next_in = reinterpret_cast<Bytef*>(in.data() + in_pos);
        zs.avail_in = static_cast<uInt>(in_len - in_pos);
        zs.next_out = reinterpret_cast<Bytef*>(dst);
        zs.avail_out = static_cast<uInt>(kOutputChunk);
        const int rc = inflate(&zs, Z_NO_FLUSH);
        in_pos = in_len - zs.avail_in;
        produced = kOutputChunk - zs.avail_out;
        if (rc == Z_STREAM_END) member_done = true;
        else if (rc == Z_NEED_DICT || rc == Z_DATA_ERROR)
          error = fmt::format("corrupt gzip data ({})", zs.msg ? zs.msg : "invalid stream");
        else if (rc == Z_MEM_ERROR) error = "out of memory while decompressing";
        else if (rc != Z_OK && rc != Z_BUF_ERROR) error = fmt::format("gzip decoder error {}", rc);
      } else {
        ZSTD_inBuffer ib{in.data(), in_len, in_pos};
        ZSTD_outBuffer ob{dst, kOutputChunk, 0};
        const size_t rc = ZSTD_decompressStream(zd, &ob, &ib);
        in_pos = ib.pos;
        produced = ob.pos;
        if (ZSTD_isError(rc)) error = fmt::format("corrupt zstd data ({})", ZSTD_getErrorName(rc));
        frame_done = rc == 0;
      }
      out.resize(old + produced);
      if (produced > 0 || !error.empty()) return true;
    }
  }

  InputFile file;
  Compression kind;
  std::vector<char> in;
  size_t in_pos = 0, in_len = 0;
  uint64_t consumed = 0;
  z_stream zs{};
  bool member_done = false;  // gzip: the last member ended exactly here
  ZSTD_DStream* zd = nullptr;
  bool frame_done = false;   // zstd: the last frame ended exactly here
};

LineReader::LineReader(const std::string& path, uint64_t max_line_bytes)
    : path_(path), max_line_(max_line_bytes), dec_(std::make_unique<Decoder>(path, compression_of(path))) {}

LineReader::~LineReader() = default;

uint64_t LineReader::file_bytes_read() const { return dec_->consumed - (dec_->in_len - dec_->in_pos); }

bool LineReader::fill() {
  std::string error;
  const bool more = dec_->decode(buf_, path_, error);
  if (!error.empty()) {  // name the line the bad data falls in: the lines decoded before it, plus one
    const int64_t line = line_ + 1 + std::count(buf_.begin() + static_cast<std::ptrdiff_t>(start_), buf_.end(), '\n');
    fail("{}:{}: {}", path_, line, error);
  }
  return more;
}

bool LineReader::next(std::string_view& line) {
  if (start_ > 0 && start_ * 2 >= buf_.size()) {  // drop returned bytes before they dominate the buffer
    buf_.erase(0, start_);
    start_ = 0;
  }
  size_t scan = start_;
  for (;;) {
    const size_t nl = buf_.find('\n', scan);
    if (nl != std::string::npos) {
      if (nl - start_ > max_line_) break;
      line = std::string_view(buf_).substr(start_, nl - start_);
      start_ = nl + 1;
      ++line_;
      return true;
    }
    if (buf_.size() - start_ > max_line_) break;
    scan = buf_.size();
    if (eof_ || !fill()) {
      eof_ = true;
      if (start_ == buf_.size()) return false;
      line = std::string_view(buf_).substr(start_);
      start_ = buf_.size();
      ++line_;
      return true;
    }
  }
  fail("{}:{}: line longer than {} bytes", path_, line_ + 1, max_line_);
}

}  // namespace drope::text
