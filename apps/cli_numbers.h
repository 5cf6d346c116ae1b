// Numeric CLI flags checked as they are parsed, for every command of every tool: CLI11 (2.1) turns
// "inf"/"nan" into doubles that pass every `x > 0` test, and clamps integers that overflow (strtoll →
// INT64_MIN/MAX) or wraps negatives into unsigned flags. Header-only: drope-data links no drope_app.
#pragma once

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <string>

#include <fmt/format.h>

#include "drope/core/error.h"

#include <CLI/CLI.hpp>

namespace drope::app {

namespace detail {

// "" when `s` is a number of CLI11's type `type` ("INT", "UINT" or "FLOAT") that fits; otherwise why not.
inline std::string numeric_flag_error(const std::string& s, const std::string& type) {
  if (s.empty()) return "expected a number, got an empty value";
  char* end = nullptr;
  errno = 0;
  if (type == "FLOAT") {
    const double v = std::strtod(s.c_str(), &end);
    if (end != s.c_str() + s.size()) return "";  // not a number at all: CLI11 reports the conversion error
    if (std::isnan(v) || (std::isinf(v) && errno != ERANGE)) return "must be a finite number, got '" + s + "'";
    if (std::isinf(v)) return "number '" + s + "' is out of range (overflows a double)";
    return "";
  }
  const bool negative = s.find_first_not_of(" \t") != std::string::npos && s[s.find_first_not_of(" \t")] == '-';
  if (type == "UINT") {
    if (negative) return "expected a non-negative integer, got '" + s + "'";
    std::strtoull(s.c_str(), &end, 0);
  } else {
    std::strtoll(s.c_str(), &end, 0);
  }
  if (end != s.c_str() + s.size()) return "";
  if (errno == ERANGE) return "integer '" + s + "' is out of range (overflows 64 bits)";
  return "";
}

}  // namespace detail

// Largest sequence length any command accepts (4M tokens): a model that long needs GBs per layer already,
// and a typo such as 1e9 must be refused before anything is allocated or timed.
constexpr int64_t kMaxTokensFlag = int64_t(1) << 22;

// Largest --threads any command accepts: more than any machine's cores, and a typo such as 100000 would start
// that many threads before the first result.
constexpr int64_t kMaxThreadsFlag = 1024;

// Refuses a size flag outside [lo, hi] with a message naming the flag.
inline void check_size_flag(const std::string& flag, int64_t v, int64_t lo, int64_t hi) {
  if (v < lo || v > hi) throw drope::Error(fmt::format("{}: expected an integer in [{}, {}], got {}", flag, lo, hi, v));
}

// Adds the finite/overflow check to every numeric option of `app` and of all its subcommands.
// Call once, after every option is declared and before parsing.
inline void check_numeric_flags(CLI::App& app) {
  for (CLI::Option* opt : app.get_options()) {
    const std::string full = opt->get_type_name();
    const std::string type = full.substr(0, full.find(':'));
    if (type != "INT" && type != "UINT" && type != "FLOAT") continue;
    opt->check(CLI::Validator([type](std::string& s) { return detail::numeric_flag_error(s, type); }, ""));
  }
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) check_numeric_flags(*sub);
}

}  // namespace drope::app
