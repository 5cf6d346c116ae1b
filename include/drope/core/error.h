// User-facing errors: every message names the file, key or flag and what was expected.
#pragma once

#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace drope {

// Thrown for bad user input (files, flags, configs). Apps print what() and exit non-zero.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace drope
