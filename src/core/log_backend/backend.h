// The spdlog side of drope/core/log.h. This folder is compiled apart from the rest of the tree: spdlog
// (Debian's, built on libfmt 9) and the fmt that LibTorch's headers carry are different major versions, so
// only standard types cross this interface and no header here includes fmt.
#pragma once

#include <cstdio>
#include <string>
#include <string_view>

namespace drope::logging::backend {

// Levels are spdlog's numbers: trace 0, debug 1, info 2, warn 3, error 4, off 6.
struct ConsoleConfig {
  std::string tool;      // the logger's name
  int level = 2;         // console threshold
  std::string prefix;    // written before every line, e.g. "[rank 1] "
  std::FILE* out = stdout;  // levels below warn, and progress lines by default
  std::FILE* err = stderr;  // warn and error
};

// Replaces the logger with one that has only a console sink.
void configure(const ConsoleConfig& c);
// Sets the file sink (it replaces an earlier one) writing to `fd`, a file opened for appending whose
// descriptor the sink now owns, messages at `level` and above, lines "[date time] [level] prefix text".
// `path` names the file in the one warning a failed write gives.
void add_file(int fd, const std::string& path, int level);
bool enabled(int level);
void write(int level, std::string_view message);
// A progress line on `stream` (nullptr: the console's out) if the console takes info; `last` ends a line
// redrawn on a terminal.
void progress(std::string_view line, std::FILE* stream, bool last);
void flush();

}  // namespace drope::logging::backend
