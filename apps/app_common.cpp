#include "app_common.h"

#include <cstdio>
#include <exception>

#include <c10/util/Exception.h>

#include "drope/core/error.h"

namespace drope::app {

int run(const std::function<int()>& body) {
  try {
    return body();
  } catch (const drope::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
  } catch (const c10::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what_without_backtrace());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
  }
  return 1;
}

}  // namespace drope::app
