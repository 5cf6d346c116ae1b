// --log-level, --quiet and --log-ranks on every command of every tool, and the tool's logger made from
// them. Header-only: drope-data links no drope_app.
#pragma once

#include <cstdio>
#include <string>

#include <CLI/CLI.hpp>

#include "drope/core/error.h"
#include "drope/core/log.h"

namespace drope::app {

struct LogFlags {
  std::string tool;
  std::FILE* out = stdout;  // where messages below warn go
  std::string level;        // as given (an empty value is refused, not taken as absent)
  bool level_given = false;
  bool quiet = false;
  std::string ranks = "0";
};

inline LogFlags& log_flags() {
  static LogFlags f;
  return f;
}

namespace detail {
inline void add_log_flags_to(CLI::App& app, LogFlags& f) {
  app.add_option("--log-level", f.level,
                 "Console messages at this level and above: trace, debug, info (default), "
                 "warn, error or off")
      ->each([&f](const std::string&) { f.level_given = true; })
      ->group("Logging");
  app.add_flag("--quiet", f.quiet, "Only warnings and errors on the console (--log-level warn)")->group("Logging");
  app.add_option("--log-ranks", f.ranks,
                 "Under torchrun / Slurm: 0 (default: rank 0 logs, the others only errors) "
                 "or all (every rank, each line prefixed [rank N])")
      ->group("Logging");
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) add_log_flags_to(*sub, f);
}
}  // namespace detail

// Adds the logging flags to `app` and to each of its subcommands (call after they are declared). `tool`
// names the logger; `out` receives messages below warn (stderr for tools whose stdout is data).
inline void add_log_flags(CLI::App& app, const std::string& tool, std::FILE* out = stdout) {
  LogFlags& f = log_flags();
  f.tool = tool;
  f.out = out;
  detail::add_log_flags_to(app, f);
}

// Makes the tool's logger from the parsed flags; a bad value fails naming the flag.
inline void apply_log_flags() {
  const LogFlags& f = log_flags();
  logging::Options o;
  o.tool = f.tool.empty() ? "drope" : f.tool;
  o.out = f.out;
  if (f.quiet && f.level_given) fail("--quiet and --log-level {}: give one of them", f.level);
  o.level = f.quiet ? logging::Level::kWarn : f.level_given ? logging::parse_level(f.level) : logging::Level::kInfo;
  o.ranks = logging::parse_ranks(f.ranks);
  logging::init(o);
}

}  // namespace drope::app
