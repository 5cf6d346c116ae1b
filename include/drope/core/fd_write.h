// Writing to an open file descriptor with clear errors (shared by atomic writes and append-only logs).
#pragma once

#include <string>
#include <string_view>

namespace drope {

// Writes all of `data` to `fd` (retrying short writes and EINTR); throws drope::Error
// "<path>: write failed (...)" naming `path` on an error.
void write_all(int fd, std::string_view data, const std::string& path);

}  // namespace drope
