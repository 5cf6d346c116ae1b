#include "app_common.h"
#include "log_flags.h"

#include <malloc.h>
#include <unistd.h>

#include <cstdlib>
#include <exception>

#include <c10/util/Exception.h>

#include "drope/core/cpu_budget.h"
#include "drope/core/error.h"
#include "drope/core/files.h"
#include "drope/core/log.h"
#include "drope/kernels/cpu_isa.h"
#include "drope/ops/layers.h"

namespace drope::app {

namespace {
// LibTorch on the CPU frees and re-allocates the same activation-sized buffers every step. glibc serves
// blocks above its mmap threshold (at most 32 MiB) with fresh mmaps whose pages the kernel must zero on
// first touch, and trims freed heap eagerly: with a 32K vocabulary the logits alone are hundreds of MB, and
// a 50M-parameter training step spent a third of its time in page faults. Serve every block from the heap
// and keep up to 1 GiB of freed memory for reuse, as PyTorch's caching allocators do on GPUs (measured:
// +30 % tokens/s for small-50m, +15 % peak RSS). A user's own GLIBC_TUNABLES / MALLOC_*_ settings win.
void tune_allocator() {
  if (std::getenv("GLIBC_TUNABLES") || std::getenv("MALLOC_MMAP_THRESHOLD_") || std::getenv("MALLOC_TRIM_THRESHOLD_") ||
      std::getenv("MALLOC_MMAP_MAX_"))
    return;
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
}
// Runs from the executable's .preinit_array, before any shared library's constructors: libgomp reads
// OMP_NUM_THREADS / OMP_WAIT_POLICY once, when it is loaded, so the defaults must be in the environment the
// process starts with. setenv() here does not survive (libc's own initialiser, which runs next, sets
// environ to the original block), so when defaults are added the tool re-executes itself with them, before
// LibTorch's static initialisation has run (measured: +0.1 s at start). The re-executed process finds the
// variables set and goes on; if exec fails it goes on with libgomp's defaults.
void preinit(int, char** argv, char** envp) {
  environ = envp;  // not yet set by libc at this point: getenv() would see an empty environment
  if (std::getenv("DROPE_OMP_REEXEC")) return;
  if (!configure_openmp_env()) return;
  setenv("DROPE_OMP_REEXEC", "1", 1);
  execv("/proc/self/exe", argv);
}
__attribute__((section(".preinit_array"), used)) void (*preinit_entry)(int, char**, char**) = preinit;

}  // namespace

int run(const std::function<int()>& body) {
  tune_allocator();
  drope::ignore_file_size_signal();
  try {
    apply_log_flags();              // first: a bad --log-level is refused before anything else
    kernels::cpu_isa();             // a bad DROPE_CPU_ISA is refused before any work starts
    ops::onednn_linear_enabled();   // and a bad DROPE_ONEDNN_LINEAR
    return body();
  } catch (const drope::Error& e) {
    logging::error("{}", e.what());
  } catch (const c10::Error& e) {
    logging::error("{}", e.what_without_backtrace());
  } catch (const std::exception& e) {
    logging::error("{}", e.what());
  }
  return 1;
}

}  // namespace drope::app
