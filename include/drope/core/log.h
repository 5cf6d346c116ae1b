// Logging for the tools: one logger per tool (spdlog underneath), rank-aware under torchrun / Slurm, an
// optional file sink with timestamps, and progress lines that know whether they write to a terminal.
//
// Console: messages up to info go to Options::out (stdout unless a tool's stdout carries data), warnings
// and errors to stderr with "warning: " / "error: " in front; no timestamps. Only rank 0 writes unless
// Options::ranks is kAll (then every line starts with "[rank N] "); other ranks still report errors.
// spdlog and its fmt stay inside src/core/log_backend: this header formats with the project's fmt.
#pragma once

#include <cstdio>
#include <string>
#include <string_view>
#include <utility>

#include <fmt/format.h>

namespace drope::logging {

// Severity, lowest first; kOff silences everything.
enum class Level { kTrace = 0, kDebug = 1, kInfo = 2, kWarn = 3, kError = 4, kOff = 6 };

// Which ranks of a multi-process run write to the console.
enum class Ranks { kMain, kAll };

struct Options {
  std::string tool = "drope";  // the logger's name; a run file is <dir>/<tool>.log
  Level level = Level::kInfo;  // console threshold
  Ranks ranks = Ranks::kMain;
  int rank = -1;                // -1: RANK, else SLURM_PROCID, else 0
  int world = -1;               // -1: WORLD_SIZE, else SLURM_NTASKS, else 1
  std::FILE* out = stdout;      // trace/debug/info messages and progress lines
  std::FILE* err = stderr;      // warnings and errors
};

// "trace", "debug", "info", "warn", "error" or "off"; anything else fails naming `flag`.
Level parse_level(std::string_view text, std::string_view flag = "--log-level");
// "0" (rank 0 only) or "all"; anything else fails naming `flag`.
Ranks parse_ranks(std::string_view text, std::string_view flag = "--log-ranks");
// This process's rank and world size from the launcher's environment (torchrun, then Slurm).
int rank_from_env();
int world_from_env();

// (Re)creates the logger. Before the first call the logger is Options{} (tool "drope", info, rank 0 only).
void init(const Options& o);
const Options& options();

// Sends messages to <dir>/<tool>.log as well (appending; it replaces an earlier run file): every message at
// info or the console level, whichever is lower, each line with a timestamp and its level. The file is opened
// as drope::AppendFile (a symlink or non-regular file is refused naming it). Returns the path.
std::string add_run_file(const std::string& dir);

// Whether a message at `l` reaches any sink of this process.
bool enabled(Level l);
void write(Level l, std::string_view message);
void flush();

// A progress line on `stream` (default: Options::out), from logging ranks at info: on a terminal it
// replaces the previous progress line in place (the next message clears it, unless `last` ended it with a
// newline); on a pipe or file it is one line per call.
void progress(std::string_view line, std::FILE* stream = nullptr, bool last = false);

template <typename... Args>
void log(Level l, fmt::format_string<Args...> f, Args&&... args) {
  if (enabled(l)) write(l, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void trace(fmt::format_string<Args...> f, Args&&... args) {
  log(Level::kTrace, f, std::forward<Args>(args)...);
}
template <typename... Args>
void debug(fmt::format_string<Args...> f, Args&&... args) {
  log(Level::kDebug, f, std::forward<Args>(args)...);
}
template <typename... Args>
void info(fmt::format_string<Args...> f, Args&&... args) {
  log(Level::kInfo, f, std::forward<Args>(args)...);
}
template <typename... Args>
void warn(fmt::format_string<Args...> f, Args&&... args) {
  log(Level::kWarn, f, std::forward<Args>(args)...);
}
template <typename... Args>
void error(fmt::format_string<Args...> f, Args&&... args) {
  log(Level::kError, f, std::forward<Args>(args)...);
}

}  // namespace drope::logging
