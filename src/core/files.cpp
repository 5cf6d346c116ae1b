#include "drope/core/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <random>

#include "drope/core/error.h"

namespace fs = std::filesystem;

namespace drope {

namespace {
std::string temp_sibling(const std::string& path) {
  std::random_device rd;
  return fmt::format("{}.tmp-{}-{:x}", path, ::getpid(), rd());
}
}  // namespace

namespace {
// What a non-regular file is, for messages.
const char* file_kind(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISFIFO(m)) return "a FIFO (named pipe)";
  if (S_ISSOCK(m)) return "a socket";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  return "not a regular file";
}
}  // namespace

InputFile::InputFile(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) fail("{}: file not found", path);
    fail("{}: cannot open for reading ({})", path, std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) fail("{}: expected a regular file, found {}", path, file_kind(st.st_mode));
  // Non-blocking open: if the path was swapped for a FIFO since the stat, open() still returns at once.
  fd_ = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd_ < 0) fail("{}: cannot open for reading ({})", path, std::strerror(errno));
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    const int err = errno;
    ::close(fd_);
    fd_ = -1;
    if (err) fail("{}: cannot stat ({})", path, std::strerror(err));
    fail("{}: expected a regular file, found {}", path, file_kind(st.st_mode));
  }
  const int flags = ::fcntl(fd_, F_GETFL);
  if (flags >= 0) ::fcntl(fd_, F_SETFL, flags & ~O_NONBLOCK);
  size_ = static_cast<uint64_t>(st.st_size);
}

InputFile::~InputFile() {
  if (fd_ >= 0) ::close(fd_);
}

std::string read_file(const std::string& path, uint64_t max_bytes) {
  InputFile f(path);
  if (f.size() > max_bytes)
    fail("{}: file is {} bytes, more than the {} bytes this reader accepts", path, f.size(), max_bytes);
  std::string out;
  out.resize(static_cast<size_t>(f.size()));
  size_t got = 0;
  while (true) {
    if (got == out.size()) {  // all fstat promised: probe for the end (or a file that grew since)
      char probe;
      const ssize_t n = ::read(f.fd(), &probe, 1);
      if (n == 0) break;
      if (n < 0) {
        if (errno == EINTR) continue;
        fail("{}: read error ({})", path, std::strerror(errno));
      }
      if (out.size() >= max_bytes) fail("{}: file grew beyond the {} bytes this reader accepts", path, max_bytes);
      out.resize(static_cast<size_t>(std::min<uint64_t>(max_bytes, std::max<uint64_t>(out.size() * 2, 4096))));
      out[got++] = probe;
      continue;
    }
    const ssize_t n = ::read(f.fd(), out.data() + got, out.size() - got);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("{}: read error ({})", path, std::strerror(errno));
    }
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  out.resize(got);
  return out;
}

void fsync_path(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

void write_file_atomic(const std::string& path, const std::string& content) {
  fs::path target(path);
  if (target.has_parent_path()) {
    std::error_code ec;
    fs::create_directories(target.parent_path(), ec);
    if (ec) fail("{}: cannot create directory {} ({})", path, target.parent_path().string(), ec.message());
  }
  const std::string tmp = temp_sibling(path);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) fail("{}: cannot create temp file {} ({})", path, tmp, std::strerror(errno));
  const char* p = content.data();
  size_t left = content.size();
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      fail("{}: write failed ({})", path, std::strerror(err));
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    fail("{}: fsync/close failed ({})", path, std::strerror(err));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    fail("{}: rename from temp file failed ({})", path, std::strerror(err));
  }
  fsync_path(target.has_parent_path() ? target.parent_path().string() : ".");
}

void write_dir_atomic(const std::string& dir, const std::function<void(const std::string&)>& fill) {
  fs::path target = fs::absolute(dir);
  std::error_code ec;
  fs::create_directories(target.parent_path(), ec);
  if (ec) fail("{}: cannot create parent directory ({})", dir, ec.message());
  if (fs::exists(target) && !fs::is_directory(target)) fail("{}: exists and is not a directory", dir);
  const std::string tmp = temp_sibling(target.string());
  fs::create_directories(tmp, ec);
  if (ec) fail("{}: cannot create temp directory {} ({})", dir, tmp, ec.message());
  try {
    fill(tmp);
    for (const auto& e : fs::directory_iterator(tmp)) fsync_path(e.path().string());
    fsync_path(tmp);
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
  if (fs::is_directory(target, ec) &&
      ::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, target.c_str(), RENAME_EXCHANGE) == 0) {
    // Swapped in one step (no moment without `dir`); the temp name now holds the previous directory.
    fsync_path(target.parent_path().string());
    fs::remove_all(tmp, ec);
    return;
  }
  std::string old;  // fallback where the filesystem cannot exchange: move the previous one aside first
  if (fs::exists(target)) {
    old = temp_sibling(target.string() + ".old");
    fs::rename(target, old, ec);
    if (ec) {
      fs::remove_all(tmp, ec);
      fail("{}: cannot move the previous directory aside", dir);
    }
  }
  fs::rename(tmp, target, ec);
  if (ec) {
    if (!old.empty()) fs::rename(old, target, ec);
    fs::remove_all(tmp, ec);
    fail("{}: cannot rename the new directory into place", dir);
  }
  if (!old.empty()) fs::remove_all(old, ec);
  fsync_path(target.parent_path().string());
}

}  // namespace drope
