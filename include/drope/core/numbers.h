// The one check for numbers that come from users (YAML, config.json, CLI flags): finite, and inside the
// range the field allows. ±inf and NaN pass every `x > 0` test, so each such test goes through here.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

namespace drope {

// An interval of the real line with open or closed ends; the default holds every finite number.
struct Interval {
  double lo = -std::numeric_limits<double>::infinity();
  double hi = std::numeric_limits<double>::infinity();
  bool lo_open = true, hi_open = true;

  static Interval any() { return {}; }
  static Interval above(double lo) { return {lo, std::numeric_limits<double>::infinity(), true, true}; }  // (lo, ∞)
  static Interval at_least(double lo) { return {lo, std::numeric_limits<double>::infinity(), false, true}; }  // [lo, ∞)
  static Interval closed(double lo, double hi) { return {lo, hi, false, false}; }  // [lo, hi]
  static Interval half_open(double lo, double hi) { return {lo, hi, false, true}; }  // [lo, hi)
  static Interval positive() { return above(0); }
  static Interval non_negative() { return at_least(0); }

  // True for a finite v inside the interval (NaN and ±inf are never inside).
  bool contains(double v) const;
  // "a finite number", "a finite number > 0", "a number in [0, 1)".
  std::string describe() const;
};

// The whole of `text` as a plain decimal number ("0.5", "-2", "1e-3", ".5"), or nullopt: no spaces, no hex, no
// inf or nan, nothing after the number, finite.
std::optional<double> parse_decimal(std::string_view text);

// A non-negative decimal integer of at most 18 digits and nothing else ("4abc", "+4", " 4", "0x10", "" and overflow
// are refused), as launchers, metadata and our own switches write them; strtol alone would take ' 0' and '+1'.
std::optional<int64_t> parse_count(std::string_view text);

// Returns v when it is finite and inside `range`; otherwise fails with
// "<what> must be <range.describe()>, got <v>" (v printed as inf, -inf or nan when it is one).
double check_number(double v, const std::string& what, const Interval& range = Interval::any());

// What a 0/1 switch's value says, without exceptions (for code that runs before main or in a thread-local
// initialiser; those leave the error to parse_switch in the tool's main): null or empty → kUnset.
enum class SwitchValue { kUnset, kOff, kOn, kInvalid };
SwitchValue switch_value(const char* value);

// A 0/1 switch from environment variable `name` whose value is `value` (null or empty: unset → nullopt);
// any other value fails with "environment variable NAME='value': expected 0 or 1[ (unset: unset_means)]".
std::optional<bool> parse_switch(const char* name, const char* value, const char* unset_means = nullptr);
// parse_switch(name, env::get(name)): `name` must be declared in src/core/environment.cpp.
std::optional<bool> env_switch(const char* name, const char* unset_means = nullptr);

// Checks the value of every declared variable that has a Check (include/drope/core/environment.h; the test-fault
// hooks only while DROPE_TEST_FAULTS=1) and fails on the first bad one with "environment variable NAME='value':
// expected <its declared values>". Every tool calls it when it starts.
void check_environment();

}  // namespace drope
