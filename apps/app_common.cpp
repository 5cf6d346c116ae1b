#include "app_common.h"

#include <malloc.h>

#include <cstdio>
#include <cstdlib>
#include <exception>

#include <c10/util/Exception.h>

#include "drope/core/error.h"

namespace drope::app {

namespace {
// LibTorch on the CPU frees and re-allocates the same activation-sized buffers every step. glibc serves
// blocks above its mmap threshold with fresh mmaps whose pages the kernel must zero on first touch (~6 %
// of a training step here), and trims freed heap eagerly. Keep blocks up to 32 MiB on the heap and freed
// memory for reuse, as PyTorch's caching allocators do on GPUs. A user's own GLIBC_TUNABLES /
// MALLOC_*_ settings win.
void tune_allocator() {
  if (std::getenv("GLIBC_TUNABLES") || std::getenv("MALLOC_MMAP_THRESHOLD_") || std::getenv("MALLOC_TRIM_THRESHOLD_"))
    return;
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
}
}  // namespace

int run(const std::function<int()>& body) {
  tune_allocator();
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
