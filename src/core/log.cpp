#include "drope/core/log.h"
#include "drope/core/environment.h"

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <filesystem>

#include "drope/core/error.h"
#include "drope/core/fd_write.h"
#include "log_backend/backend.h"

namespace drope::logging {

namespace {

constexpr std::pair<std::string_view, Level> kLevels[] = {{"trace", Level::kTrace}, {"debug", Level::kDebug},
                                                          {"info", Level::kInfo},   {"warn", Level::kWarn},
                                                          {"error", Level::kError}, {"off", Level::kOff}};

Options g_options;
bool g_ready = false;

// A non-negative integer from the first set variable among `names`, else `fallback`.
int int_from_env(std::initializer_list<const char*> names, int fallback) {
  for (const char* n : names) {
    const char* v = env::get(n);
    if (v == nullptr) continue;
    char* end = nullptr;
    const long x = std::strtol(v, &end, 10);
    if (*end == '\0' && x >= 0 && x < (1L << 30)) return static_cast<int>(x);
  }
  return fallback;
}

void ensure_ready() {
  if (!g_ready) init(Options{});
}

int level_number(Level l) { return static_cast<int>(l); }

}  // namespace

Level parse_level(std::string_view text, std::string_view flag) {
  for (const auto& [name, level] : kLevels)
    if (text == name) return level;
  fail("{}: expected one of trace, debug, info, warn, error, off; got '{}'", flag, text);
}

Ranks parse_ranks(std::string_view text, std::string_view flag) {
  if (text == "0") return Ranks::kMain;
  if (text == "all") return Ranks::kAll;
  fail("{}: expected 0 (rank 0 only) or all; got '{}'", flag, text);
}

int rank_from_env() { return int_from_env({"RANK", "SLURM_PROCID"}, 0); }
int world_from_env() { return std::max(1, int_from_env({"WORLD_SIZE", "SLURM_NTASKS"}, 1)); }

void init(const Options& o) {
  g_options = o;
  if (g_options.rank < 0) g_options.rank = rank_from_env();
  if (g_options.world < 0) g_options.world = world_from_env();
  const bool all = g_options.ranks == Ranks::kAll;
  // Rank 0 alone logs by default; the other ranks still report errors, saying whose they are.
  const bool speaks = all || g_options.rank == 0;
  backend::ConsoleConfig c;
  c.tool = g_options.tool;
  c.level = level_number(speaks ? g_options.level : std::max(g_options.level, Level::kError));
  if ((all && g_options.world > 1) || g_options.rank != 0) c.prefix = fmt::format("[rank {}] ", g_options.rank);
  c.out = g_options.out;
  c.err = g_options.err;
  backend::configure(c);
  g_ready = true;
}

const Options& options() {
  ensure_ready();
  return g_options;
}

std::string add_run_file(const std::string& dir) {
  ensure_ready();
  const std::string path = (std::filesystem::path(dir) / (g_options.tool + ".log")).string();
  AppendFile file(path);  // refuses a symlink or anything but a regular file, naming the path
  backend::add_file(file.release(), path, level_number(std::min(g_options.level, Level::kInfo)));
  return path;
}

bool enabled(Level l) {
  ensure_ready();
  return l != Level::kOff && backend::enabled(level_number(l));
}

void write(Level l, std::string_view message) {
  ensure_ready();
  if (l != Level::kOff) backend::write(level_number(l), message);
}

void flush() {
  ensure_ready();
  backend::flush();
}

void progress(std::string_view line, std::FILE* stream, bool last) {
  ensure_ready();
  backend::progress(line, stream, last);
}

}  // namespace drope::logging
