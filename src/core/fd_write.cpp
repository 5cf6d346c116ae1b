#include "drope/core/fd_write.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

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

}  // namespace drope
