// Writing to an open file descriptor with clear errors (shared by atomic writes and append-only logs), and the
// one way a log file is opened for appending.
#pragma once

#include <string>
#include <string_view>

namespace drope {

// Writes all of `data` to `fd` (retrying short writes and EINTR); throws drope::Error
// "<path>: write failed (...)" naming `path` on an error.
void write_all(int fd, std::string_view data, const std::string& path);

// A log file opened for appending (created 0644 when absent). The last component of `path` is never followed
// as a symlink, and only a regular file is accepted, so a run's log cannot be redirected into a user's file or
// onto a device; refusals and write errors name the path and the errno text.
class AppendFile {
 public:
  AppendFile() = default;
  explicit AppendFile(const std::string& path);
  ~AppendFile();
  AppendFile(AppendFile&& o) noexcept;
  AppendFile& operator=(AppendFile&& o) noexcept;
  AppendFile(const AppendFile&) = delete;
  AppendFile& operator=(const AppendFile&) = delete;

  bool is_open() const { return fd_ >= 0; }
  const std::string& path() const { return path_; }
  void append(std::string_view data) { write_all(fd_, data, path_); }
  // Hands the descriptor over (the caller closes it); the object is closed afterwards.
  int release();

 private:
  int fd_ = -1;
  std::string path_;
};

}  // namespace drope
