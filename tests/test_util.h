// Helpers shared by the C++ tests.
#pragma once

#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "drope/core/error.h"

namespace drope::test {

// A fresh directory under the build tree for one test.
inline std::string tmp_dir(const std::string& name) {
  auto p = std::filesystem::path(DROPE_TEST_TMP) / name;
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  return p.string();
}

// Runs `f`, expects a drope::Error whose message contains every needle.
template <typename F>
void expect_error(F&& f, std::initializer_list<std::string> needles) {
  try {
    f();
    ADD_FAILURE() << "expected drope::Error";
  } catch (const drope::Error& e) {
    for (const auto& n : needles)
      EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << "message: " << e.what() << "\nmissing: " << n;
  }
}

}  // namespace drope::test
