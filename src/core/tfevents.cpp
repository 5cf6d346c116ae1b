#include "drope/core/tfevents.h"

#include <fcntl.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "drope/core/crc32c.h"
#include "drope/core/error.h"
#include "drope/core/fd_write.h"

namespace fs = std::filesystem;

namespace drope {

namespace {

// Field numbers and wire types, from tensorflow/core/util/event.proto and
// tensorflow/core/framework/summary.proto (tensorflow/tensorflow):
//   Event      { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5;
//                SessionLog session_log = 7; }
//   SessionLog { SessionStatus status = 1; }  with START = 1
//   Summary    { repeated Value value = 1; }
//   Value      { string tag = 1; float simple_value = 2; }
// Wire types (protobuf encoding): 0 varint, 1 fixed64, 2 length-delimited, 5 fixed32.
enum Wire : uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

void put_key(std::string& out, uint32_t field, Wire wire) { put_varint(out, (uint64_t{field} << 3) | wire); }

void put_bytes(std::string& out, uint32_t field, std::string_view bytes) {
  put_key(out, field, kLengthDelimited);
  put_varint(out, bytes.size());
  out.append(bytes);
}

// Event.wall_time and Event.step, the fields every event carries.
std::string event_head(double wall_time, int64_t step) {
  std::string e;
  uint64_t bits = 0;
  std::memcpy(&bits, &wall_time, sizeof bits);
  put_key(e, 1, kFixed64);
  put_le(e, bits, 8);
  put_key(e, 2, kVarint);
  put_varint(e, static_cast<uint64_t>(step));  // int64: two's complement as a 10-byte varint when negative
  return e;
}

// A name part without path separators or odd characters.
std::string safe_name_part(std::string s) {
  for (char& c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_')) c = '_';
  return s.empty() ? "host" : s;
}

constexpr std::string_view kPrefix = "events.out.tfevents.";

// The <seconds> of an events file name, or -1.
int64_t name_seconds(std::string_view name) {
  int64_t s = -1;  // from_chars leaves it as is unless digits follow the prefix
  if (name.substr(0, kPrefix.size()) == kPrefix)
    std::from_chars(name.data() + kPrefix.size(), name.data() + name.size(), s);
  return s;
}

}  // namespace

std::string tfrecord(std::string_view data) {
  std::string len;
  put_le(len, data.size(), 8);
  std::string r = len;
  put_le(r, mask_crc32c(crc32c(len)), 4);
  r.append(data);
  put_le(r, mask_crc32c(crc32c(data)), 4);
  return r;
}

std::string event_file_version(double wall_time) {
  std::string e = event_head(wall_time, 0);
  put_bytes(e, 3, "brain.Event:2");
  return e;
}

std::string event_session_start(double wall_time, int64_t step) {
  std::string log;
  put_key(log, 1, kVarint);
  put_varint(log, 1);  // SessionLog.START
  std::string e = event_head(wall_time, step);
  put_bytes(e, 7, log);
  return e;
}

std::string event_scalars(double wall_time, int64_t step, const std::vector<TfScalar>& scalars) {
  std::string summary;
  for (const auto& [tag, value] : scalars) {
    std::string v;
    put_bytes(v, 1, tag);
    const float f = static_cast<float>(value);
    uint32_t bits = 0;
    std::memcpy(&bits, &f, sizeof bits);
    put_key(v, 2, kFixed32);
    put_le(v, bits, 4);
    put_bytes(summary, 1, v);
  }
  std::string e = event_head(wall_time, step);
  put_bytes(e, 5, summary);
  return e;
}

double wall_time_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

EventFileWriter::EventFileWriter(const std::string& dir, int64_t start_step) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) fail("{}: not a directory (TensorBoard events)", dir);
  const double now = wall_time_now();
  int64_t seconds = static_cast<int64_t>(now);
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const int64_t s = name_seconds(e.path().filename().string());
    if (s >= seconds) seconds = s + 1;
  }
  if (ec) fail("{}: cannot list the directory ({})", dir, ec.message());
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  path_ = (fs::path(dir) / fmt::format("{}{:010d}.{}.{}", kPrefix, seconds, safe_name_part(host), ::getpid())).string();
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0) fail("{}: cannot create the TensorBoard events file ({})", path_, std::strerror(errno));
  write_record(event_file_version(now));
  write_record(event_session_start(now, start_step));
}

EventFileWriter::~EventFileWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void EventFileWriter::write_scalars(int64_t step, const std::vector<TfScalar>& scalars) {
  write_record(event_scalars(wall_time_now(), step, scalars));
}

void EventFileWriter::write_record(std::string_view event) { write_all(fd_, tfrecord(event), path_); }

}  // namespace drope
