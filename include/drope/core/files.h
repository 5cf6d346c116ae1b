// File helpers: whole-file reads with clear errors, and atomic writes (temp file, fsync, rename).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace drope {

// Largest file read whole by default (configs, tokenizers, documents); larger ones are refused.
constexpr uint64_t kMaxReadBytes = uint64_t{4} << 30;
// Largest configuration file (YAML, config.json, checkpoint state, indexes).
constexpr uint64_t kMaxConfigBytes = uint64_t{64} << 20;

// A user file opened for reading: `path` is checked with stat first and opened non-blocking, so a FIFO,
// socket or device is refused with a clear error instead of blocking open(); only regular files pass.
// The descriptor (close-on-exec, blocking again) is closed by the destructor.
class InputFile {
 public:
  explicit InputFile(const std::string& path);
  ~InputFile();
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;
  int fd() const { return fd_; }
  uint64_t size() const { return size_; }  // bytes, from fstat at open

 private:
  int fd_ = -1;
  uint64_t size_ = 0;
};

// A regular file mapped read-only (private) for its lifetime; an empty file maps to no bytes (data() is
// a valid pointer to nothing). Refuses what InputFile refuses.
class MappedFile {
 public:
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  const uint8_t* data() const { return map_ ? map_ : &kEmpty; }
  uint64_t size() const { return size_; }

 private:
  static constexpr uint8_t kEmpty = 0;
  const uint8_t* map_ = nullptr;
  uint64_t size_ = 0;
};

// Reads a whole regular file of at most `max_bytes`; throws drope::Error naming the path when it cannot
// (missing, a directory, a FIFO or device, too large, unreadable).
std::string read_file(const std::string& path, uint64_t max_bytes = kMaxReadBytes);

// Writes `path` atomically: the content goes to a temp file in the same directory, is fsynced, then
// renamed over `path`, and the directory is fsynced. On any failure the temp file is removed and
// `path` is left as it was. The first write into a directory also removes our stale temporaries there.
void write_file_atomic(const std::string& path, const std::string& content);

// Like write_file_atomic, for a whole directory: `fill(tmp_dir)` writes into a fresh temp directory
// beside `dir`, which then replaces `dir`. If `fill` throws, nothing of `dir` changes. Callers check
// with check_replaceable_dir that an existing `dir` is theirs to replace.
void write_dir_atomic(const std::string& dir, const std::function<void(const std::string&)>& fill);

// Fails unless `dir` is absent, empty, or holds `marker` (a file our tools write into every directory of
// this kind, e.g. drope.yaml for a model): a tool never replaces a directory it did not create. `what`
// names the kind; `hint` (may be empty) says how to override.
void check_replaceable_dir(const std::string& dir, const std::string& marker, const std::string& what,
                           const std::string& hint);

// A temporary name for `path` in its directory: ".drope-tmp-<pid>-<random>.<name of path>". Only we
// produce names of this form, and the pid says whose it is.
std::string temp_path_for(const std::string& path);

// Removes the temporaries (temp_path_for) in `dir` whose process no longer runs: what an interrupted
// drope tool left behind, never another program's files nor a live drope process's temporaries.
// Returns how many entries were removed.
int remove_stale_temporaries(const std::string& dir);

// Makes a write beyond the file-size limit (RLIMIT_FSIZE) fail with EFBIG, reported as a write error
// naming the file, instead of SIGXFSZ killing the process. Every tool calls it at start-up.
void ignore_file_size_signal();

// fsyncs a file or directory by path.
void fsync_path(const std::string& path);

}  // namespace drope
