// Shared helpers for the libFuzzer targets: inputs as files in a per-process temp directory, and the
// rule every parser must follow: reject bad input with a drope::Error whose message names the file.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "drope/core/error.h"

// Each target is a libFuzzer entry point, or, with DROPE_FUZZ_REPLAY, a plain function
// drope_fuzz_<name>(data, size) that tests/test_fuzz_regressions.cpp calls on the saved inputs.
#ifdef DROPE_FUZZ_REPLAY
#define DROPE_FUZZ_TARGET(name) inline int drope_fuzz_##name
#else
#define DROPE_FUZZ_TARGET(name) extern "C" int LLVMFuzzerTestOneInput
#endif

namespace drope::fuzz {

// A directory of our own under $TMPDIR (one per fuzzing process).
inline const std::string& scratch_dir() {
  static const std::string dir = [] {
#ifdef DROPE_TEST_TMP
    const char* t = DROPE_TEST_TMP;
#else
    const char* t = std::getenv("TMPDIR");
#endif
    auto p = std::filesystem::path(t && *t ? t : "/tmp") / ("drope-fuzz-" + std::to_string(::getpid()));
    std::filesystem::create_directories(p);
    return p.string();
  }();
  return dir;
}

// Writes the input to `name` inside the scratch directory and returns its path.
inline std::string input_file(const std::string& name, const uint8_t* data, size_t size) {
  const std::string p = scratch_dir() + "/" + name;
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  f.close();
  if (!f) {
    std::fprintf(stderr, "fuzz harness: cannot write %s\n", p.c_str());
    std::abort();
  }
  return p;
}

// Runs `body`; a drope::Error is a correct rejection only if its message names `where` (the file).
// Any other exception escapes to libFuzzer and counts as a finding.
template <typename F>
void expect_clean(const std::string& where, F&& body) {
  try {
    body();
  } catch (const drope::Error& e) {
    if (std::string(e.what()).find(where) == std::string::npos) {
      std::fprintf(stderr, "error message does not name %s:\n%s\n", where.c_str(), e.what());
      std::abort();
    }
  }
}

// Aborts with a message when an invariant of a parse result does not hold.
inline void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "invariant violated: %s\n", what);
    std::abort();
  }
}

}  // namespace drope::fuzz
