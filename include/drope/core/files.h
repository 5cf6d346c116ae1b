// File helpers: whole-file reads with clear errors, and atomic writes (temp file, fsync, rename).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace drope {

// Reads a whole file; throws drope::Error naming the path when it cannot.
std::string read_file(const std::string& path);

// Writes `path` atomically: the content goes to a temp file in the same directory, is fsynced, then
// renamed over `path`, and the directory is fsynced. On any failure the temp file is removed and
// `path` is left as it was.
void write_file_atomic(const std::string& path, const std::string& content);

// Like write_file_atomic, for a whole directory: `fill(tmp_dir)` writes into a fresh temp directory
// beside `dir`, which then replaces `dir`. If `fill` throws, nothing of `dir` changes.
void write_dir_atomic(const std::string& dir, const std::function<void(const std::string&)>& fill);

// fsyncs a file or directory by path.
void fsync_path(const std::string& path);

}  // namespace drope
