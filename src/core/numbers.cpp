#include "drope/core/numbers.h"
#include "drope/core/environment.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include "drope/core/error.h"

namespace drope {

bool Interval::contains(double v) const {
  if (!std::isfinite(v)) return false;
  if (lo_open ? !(v > lo) : !(v >= lo)) return false;
  if (hi_open ? !(v < hi) : !(v <= hi)) return false;
  return true;
}

std::string Interval::describe() const {
  const bool has_lo = std::isfinite(lo), has_hi = std::isfinite(hi);
  if (has_lo && has_hi)
    return fmt::format("a number in {}{:g}, {:g}{}", lo_open ? '(' : '[', lo, hi, hi_open ? ')' : ']');
  if (has_lo) return fmt::format("a finite number {} {:g}", lo_open ? ">" : ">=", lo);
  if (has_hi) return fmt::format("a finite number {} {:g}", hi_open ? "<" : "<=", hi);
  return "a finite number";
}

std::optional<double> parse_decimal(std::string_view text) {
  // strtod alone would take leading spaces, hex ("0x10"), "inf" and "nan".
  if (text.empty() || text.find_first_not_of("0123456789.eE+-") != std::string_view::npos) return std::nullopt;
  const size_t lead = text[0] == '-' || text[0] == '+' ? 1 : 0;
  if (lead >= text.size() || !(std::isdigit(static_cast<unsigned char>(text[lead])) || text[lead] == '.'))
    return std::nullopt;
  const std::string s(text);
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size() || errno == ERANGE || !std::isfinite(v)) return std::nullopt;
  return v;
}

std::optional<int64_t> parse_count(std::string_view text) {
  if (text.empty() || text.size() > 18) return std::nullopt;
  int64_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + (c - '0');
  }
  return v;
}

double check_number(double v, const std::string& what, const Interval& range) {
  if (!range.contains(v)) fail("{} must be {}, got {:g}", what, range.describe(), v);
  return v;
}

SwitchValue switch_value(const char* value) {
  if (value == nullptr || *value == '\0') return SwitchValue::kUnset;
  if (std::strcmp(value, "0") == 0) return SwitchValue::kOff;
  if (std::strcmp(value, "1") == 0) return SwitchValue::kOn;
  return SwitchValue::kInvalid;
}

std::optional<bool> parse_switch(const char* name, const char* value, const char* unset_means) {
  switch (switch_value(value)) {
    case SwitchValue::kUnset: return std::nullopt;
    case SwitchValue::kOff: return false;
    case SwitchValue::kOn: return true;
    case SwitchValue::kInvalid: break;
  }
  fail("environment variable {}='{}': expected 0 or 1{}", name, value,
       unset_means ? fmt::format(" (unset: {})", unset_means) : std::string());
}

std::optional<bool> env_switch(const char* name, const char* unset_means) {
  return parse_switch(name, env::get(name), unset_means);
}

namespace {

// An integer of at most 9 digits written with digits only (parse_count), at least `lo`.
bool digits_at_least(std::string_view text, int64_t lo) {
  const auto v = text.size() <= 9 ? parse_count(text) : std::nullopt;
  return v && *v >= lo;
}

// Every `sep`-separated field of `text` is digits_at_least(lo); with `spaces`, blanks around a field are allowed (as
// libgomp reads OMP_NUM_THREADS).
bool digit_list(std::string_view text, char sep, int64_t lo, bool spaces = false) {
  for (size_t start = 0;;) {
    const size_t end = text.find(sep, start);
    std::string_view field = text.substr(start, end == std::string_view::npos ? end : end - start);
    if (spaces) {
      while (!field.empty() && (field.front() == ' ' || field.front() == '\t')) field.remove_prefix(1);
      while (!field.empty() && (field.back() == ' ' || field.back() == '\t')) field.remove_suffix(1);
    }
    if (!digits_at_least(field, lo)) return false;
    if (end == std::string_view::npos) return true;
    start = end + 1;
  }
}

bool same_ignoring_case(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  return true;
}

bool value_fits(env::Check check, std::string_view v) {
  switch (check) {
    case env::Check::kNone:
    case env::Check::kSwitch: return true;  // parse_switch has its own message
    case env::Check::kThreadList: return digit_list(v, ',', 1, true);
    case env::Check::kWaitPolicy: return same_ignoring_case(v, "PASSIVE") || same_ignoring_case(v, "ACTIVE");
    case env::Check::kSteps: return digit_list(v, ',', 1);
    case env::Check::kRankStep: {
      const size_t colon = v.find(':');
      return colon != std::string_view::npos && digits_at_least(v.substr(0, colon), 0) &&
             digits_at_least(v.substr(colon + 1), 1);
    }
  }
  return false;
}

}  // namespace

void check_environment() {
  for (const env::Variable& v : env::variables()) {
    if (v.check == env::Check::kNone) continue;
    const char* value = env::get(v.name);
    if (value == nullptr) continue;
    if (v.check == env::Check::kSwitch) parse_switch(v.name, value, v.unset);
    if (value_fits(v.check, value)) continue;
    std::string expected(v.values);
    expected.erase(std::remove(expected.begin(), expected.end(), '`'), expected.end());
    fail("environment variable {}='{}': expected {}", v.name, value, expected);
  }
}

}  // namespace drope
