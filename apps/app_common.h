// Shared entry point for the CLIs: user errors print one clear line and exit non-zero.
#pragma once

#include <functional>

namespace drope::app {
// Runs `body` (after tuning glibc malloc for LibTorch's allocation pattern and making the tool's logger from
// its logging flags, see log_flags.h); drope::Error / c10::Error / std::exception → "error: ..." on stderr,
// exit code 1.
int run(const std::function<int()>& body);
}  // namespace drope::app
