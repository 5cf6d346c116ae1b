#include "drope/core/numbers.h"

#include <cmath>

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
  if (has_lo && has_hi) return fmt::format("a number in {}{:g}, {:g}{}", lo_open ? '(' : '[', lo, hi, hi_open ? ')' : ']');
  if (has_lo) return fmt::format("a finite number {} {:g}", lo_open ? ">" : ">=", lo);
  if (has_hi) return fmt::format("a finite number {} {:g}", hi_open ? "<" : "<=", hi);
  return "a finite number";
}

double check_number(double v, const std::string& what, const Interval& range) {
  if (!range.contains(v)) fail("{} must be {}, got {:g}", what, range.describe(), v);
  return v;
}

}  // namespace drope
