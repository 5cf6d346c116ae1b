#include "drope/core/fd_write.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "drope/core/error.h"

namespace drope {

void write_all(int fd, std::string_view data, const std::string& path) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("{}: write failed ({})", path, std::strerror(errno));
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
}

AppendFile::AppendFile(const std::string& path) : path_(path) {
  // O_NONBLOCK: a FIFO put in the log's place fails the check below instead of blocking the open.
  fd_ = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY, 0644);
  if (fd_ < 0) {
    if (errno == ELOOP) fail("{}: is a symbolic link; a log file is never followed through one", path);
    fail("{}: cannot open the log file for appending ({})", path, std::strerror(errno));
  }
  struct stat st{};
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd_);
    fd_ = -1;
    fail("{}: the log file is not a regular file", path);
  }
  const int flags = ::fcntl(fd_, F_GETFL);
  if (flags >= 0) ::fcntl(fd_, F_SETFL, flags & ~O_NONBLOCK);
}

AppendFile::~AppendFile() {
  if (fd_ >= 0) ::close(fd_);
}

AppendFile::AppendFile(AppendFile&& o) noexcept : fd_(std::exchange(o.fd_, -1)), path_(std::move(o.path_)) {}

AppendFile& AppendFile::operator=(AppendFile&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(o.fd_, -1);
    path_ = std::move(o.path_);
  }
  return *this;
}

int AppendFile::release() { return std::exchange(fd_, -1); }

}  // namespace drope
