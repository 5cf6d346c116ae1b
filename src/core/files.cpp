#include "drope/core/files.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "drope/core/error.h"

namespace fs = std::filesystem;

namespace drope {

namespace {
std::string temp_sibling(const std::string& path) {
  std::random_device rd;
  return fmt::format("{}.tmp-{}-{:x}", path, ::getpid(), rd());
}
}  // namespace

std::string read_file(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) fail("{}: file not found", path);
  if (fs::is_directory(path, ec)) fail("{}: expected a file, found a directory", path);
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open for reading ({})", path, std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) fail("{}: read error", path);
  return ss.str();
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
