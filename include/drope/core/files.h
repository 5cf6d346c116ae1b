// File helpers: whole-file reads with clear errors, atomic writes (temp file, fsync, rename), the rule for
// output directories and the advisory lock on every directory a tool writes.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

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

// The regular files of a directory as they are now (device, inode, size, modification time), so that
// a reader can check after reading and verifying them that none was replaced or written to meanwhile: a digest
// checked by path after the bytes were read from a file swapped in between would vouch for other bytes.
class StableFiles {
 public:
  // The files of `dir` whose names `read` selects (those the reader reads; others may change meanwhile).
  StableFiles(const std::string& dir, const std::function<bool(const std::string& name)>& read);
  ~StableFiles();
  StableFiles(const StableFiles&) = delete;
  StableFiles& operator=(const StableFiles&) = delete;
  // Fails naming the first file that was removed, replaced or written to since construction.
  void check() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Names a mapping of `size` bytes at `map` of file `path` for the SIGBUS handler these install (once): a read of a
// mapped file that shrank meanwhile (or whose disk failed) then ends the tool with one line naming the file and exit
// status 1, instead of the signal. MappedFile does it; code that maps a file itself calls both.
void watch_mapping(const void* map, uint64_t size, const std::string& path);
void unwatch_mapping(const void* map);

// Reads a whole regular file of at most `max_bytes`; throws drope::Error naming the path when it cannot
// (missing, a directory, a FIFO or device, too large, unreadable).
std::string read_file(const std::string& path, uint64_t max_bytes = kMaxReadBytes);

// The first `max_bytes` bytes of a regular file, or all of it when it is shorter: a reader that uses only the
// start of a file reads only that. Refuses what InputFile refuses.
std::string read_file_prefix(const std::string& path, uint64_t max_bytes);

// Writes `path` atomically: the content goes to a temp file in the same directory, is fsynced, then
// renamed over `path`, and the directory is fsynced. On any failure the temp file is removed and
// `path` is left as it was. The first write into a directory also removes our stale temporaries there.
// An existing `path` that is not a file of ours to replace is written in place instead (written_in_place);
// one that is a directory, block device or socket is refused. Errors name `path` and the errno text.
void write_file_atomic(const std::string& path, const std::string& content);

// Whether write_file_atomic writes the existing `path` in place, appending, instead of replacing it: a
// character device (/dev/null, /dev/full, a terminal), a FIFO (which must have a reader), or a symlink under
// /dev or /proc (/dev/stdout, /proc/self/fd/1) whatever it points to. Renaming over them would replace a
// system file.
bool written_in_place(const std::string& path);

// Like write_file_atomic, for a whole directory: `fill(tmp_dir)` writes into a fresh temp directory
// beside `dir`, which then replaces `dir`. If `fill` throws, nothing of `dir` changes. Callers check
// with check_output_dir that an existing `dir` is theirs to replace.
void write_dir_atomic(const std::string& dir, const std::function<void(const std::string&)>& fill);

// What a tool may write as an output directory. The one rule for every tool: the output is never one of
// its inputs, never inside one and never contains one (compared by device and inode after resolving
// symlinks, not by spelling), and it is absent, empty, or holds one of `markers` (files or directories our
// tools put in every directory of this kind, e.g. drope.yaml for a model), so that a directory holding
// files we did not create is never written into unless `force`.
struct OutputDirRule {
  std::string flag;    // how the user named the output, for messages: "--out", "run.out_dir"
  std::string what;    // the kind of directory: "model directory", "run directory"
  std::vector<std::string> markers;
  std::vector<std::pair<std::string, std::string>> inputs;  // (how the user named it, path); empty paths skipped
  bool force = false;  // accept a non-empty directory without a marker (never an input)
  std::string force_hint;  // how to force, e.g. "pass --force to replace it anyway"; empty: no way
};

// Throws drope::Error (one line naming the flag, the directory and the input) when `dir` breaks `rule`.
void check_output_dir(const std::string& dir, const OutputDirRule& rule);

// The same rule for outputs written in place: files written whole (write_file_atomic) under a name or a
// prefix, or a directory that receives named files. `paths` are what the output `out` (as the user named it
// with `flag`) writes; none of them is one of `inputs`, and none lies inside an input directory (compared by
// device and inode after resolving symlinks). Unlike check_output_dir, an output may contain an input, which
// it leaves untouched. Throws drope::Error naming the flag, the output and the input.
void check_output_paths(const std::string& flag, const std::string& out, const std::vector<std::string>& paths,
                        const std::vector<std::pair<std::string, std::string>>& inputs);

// An advisory lock (flock(2)) on a directory a tool writes, held until the lock is destroyed. A second
// process that locks the same directory fails with "<dir> is in use by process <pid> (<name>)". The kernel
// drops the lock when its holder exits, however it exits, so the lock file alone never blocks: a lock file
// left by a process that died holding it is taken over, with an info line on stderr naming that process.
// kInside keeps ".drope-lock" inside the directory (emptied on release; for directories written in place,
// such as run directories, where it also marks the directory as ours). Directories the lock had to create
// are removed on release while they hold nothing else, so a run refused after locking leaves nothing. kBeside locks
// ".<name>.drope-lock" next to it (removed on release), for directories replaced whole by write_dir_atomic
// and files replaced by write_file_atomic; an output written in place (written_in_place) is not locked.
class DirLock {
 public:
  enum class Where { kInside, kBeside };
  DirLock() = default;
  DirLock(const std::string& dir, Where where);  // creates `dir` (kInside) or its parent (kBeside)
  ~DirLock();
  DirLock(DirLock&& o) noexcept;
  DirLock& operator=(DirLock&& o) noexcept;
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;
  bool held() const { return fd_ >= 0; }
  const std::string& lock_path() const { return path_; }
  // The process that held the lock before and died without releasing it; 0 if none.
  int64_t stale_owner() const { return stale_owner_; }

 private:
  void release() noexcept;
  int fd_ = -1;
  std::string path_;
  bool remove_ = false;
  int64_t stale_owner_ = 0;
  std::vector<std::string> created_;  // directories the constructor created, deepest first
};

// The name of the lock file DirLock keeps inside a directory (Where::kInside).
constexpr const char* kDirLockName = ".drope-lock";

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
