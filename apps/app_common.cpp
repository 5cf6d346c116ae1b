#include "app_common.h"
#include "log_flags.h"

#include <malloc.h>
#include <unistd.h>

#include <cstdlib>
#include <exception>
#include <filesystem>
#include <new>
#include <string>

#include <c10/util/Exception.h>

#include "drope/core/cpu_budget.h"
#include "drope/core/environment.h"
#include "drope/core/error.h"
#include "drope/core/files.h"
#include "drope/core/log.h"
#include "drope/core/numbers.h"
#include "drope/kernels/cpu_isa.h"
#include "drope/ops/layers.h"

namespace drope::app {

namespace {
// LibTorch on the CPU frees and re-allocates the same activation-sized buffers every step. glibc serves
// blocks above its mmap threshold (at most 32 MiB) with fresh mmaps whose pages the kernel must zero on
// first touch, and trims freed heap eagerly: with a 32K vocabulary the logits alone are hundreds of MB, and
// a 50M-parameter training step spent a third of its time in page faults. Serve every block from the heap
// and keep up to 1 GiB of freed memory for reuse, as PyTorch's caching allocators do on GPUs: more tokens/s
// for a little more peak RSS (docs/benchmarks.md#defaults-chosen-by-measurement). A user's own
// GLIBC_TUNABLES / MALLOC_*_ settings win.
void tune_allocator() {
  if (env::is_set("GLIBC_TUNABLES") || env::is_set("MALLOC_MMAP_THRESHOLD_") || env::is_set("MALLOC_TRIM_THRESHOLD_") ||
      env::is_set("MALLOC_MMAP_MAX_"))
    return;
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
}
// Runs from the executable's .preinit_array, before any shared library's constructors: libgomp reads
// OMP_NUM_THREADS / OMP_WAIT_POLICY once, when it is loaded, so the defaults must be in the environment the
// process starts with. setenv() here does not survive (libc's own initialiser, which runs next, sets
// environ to the original block), so when defaults are added the tool re-executes itself with them, before
// LibTorch's static initialisation has run (a small cost at start, docs/benchmarks.md). The re-executed process finds
// the variables set and goes on; if exec fails it goes on with libgomp's defaults.
void preinit(int, char** argv, char** envp) {
  environ = envp;  // not yet set by libc at this point: the environment would read as empty
  if (env::is_set("DROPE_OMP_REEXEC")) return;
  if (!configure_openmp_env()) return;
  setenv("DROPE_OMP_REEXEC", "1", 1);
  execv("/proc/self/exe", argv);
}
__attribute__((section(".preinit_array"), used)) void (*preinit_entry)(int, char**, char**) = preinit;

constexpr const char* kOutOfMemory =
    "out of memory: an allocation failed (a size from the flags, config or input files is more than this machine "
    "can hold)";

// One line for an error from LibTorch or the standard library: an allocator failure in the user's terms (not
// the allocator's enforce text), otherwise the message's first line (no internal context lines).
std::string library_error_line(const std::string& what) {
  static const std::string tried = "tried to allocate ";
  if (what.find("can't allocate memory") != std::string::npos || what.find("not enough memory") != std::string::npos) {
    const size_t at = what.find(tried);
    const double bytes = at == std::string::npos ? 0 : std::strtod(what.c_str() + at + tried.size(), nullptr);
    if (bytes > 0)
      return fmt::format("out of memory: an allocation of {:.2f} GiB failed (a size from the flags, config or input "
                         "files is more than this machine can hold)",
                         bytes / double(1 << 30));
    return kOutOfMemory;
  }
  return what.substr(0, what.find('\n'));
}

}  // namespace

int run(const std::function<int()>& body) {
  tune_allocator();
  drope::ignore_file_size_signal();
  try {
    apply_log_flags();              // first: a bad --log-level is refused before anything else
    kernels::cpu_isa();             // a bad DROPE_CPU_ISA is refused before any work starts
    ops::onednn_linear_enabled();   // and a bad DROPE_ONEDNN_LINEAR
    drope::check_environment();     // every switch and count, before it is first read mid-run
    if (const std::string ignored = env::ignored_test_faults(); !ignored.empty())
      logging::warn("{}: test fault hooks, ignored without DROPE_TEST_FAULTS=1", ignored);
    return body();
  } catch (const drope::Error& e) {
    logging::error("{}", e.what());
  } catch (const c10::Error& e) {
    logging::error("{}", library_error_line(e.what_without_backtrace()));
  } catch (const std::bad_alloc&) {
    logging::error("{}", kOutOfMemory);
  } catch (const std::filesystem::filesystem_error& e) {  // a path the checks could not even stat (a symlink loop)
    logging::error("{}: {}", e.path1().string(), e.code().message());
  } catch (const std::exception& e) {
    logging::error("{}", library_error_line(e.what()));
  }
  return 1;
}

}  // namespace drope::app
