#include "module_loader.h"

#include <dlfcn.h>

#include <filesystem>
#include <vector>

#include <fmt/format.h>

#include "drope/core/error.h"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define DROPE_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define DROPE_ASAN 1
#endif

namespace fs = std::filesystem;

// Defined by a program built against the installed CMake package (dropeConfig.cmake compiles it into the
// program): the package's lib/drope/ directory. Absent (null) in drope's own build.
extern "C" const char* drope_installed_module_dir() __attribute__((weak));

namespace drope::text::detail {

void* open_module(const std::string& file_name, const std::string& built_at, const std::string& what) {
  std::vector<fs::path> candidates;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    candidates.push_back(exe.parent_path() / file_name);
    candidates.push_back(exe.parent_path().parent_path() / file_name);
    // installed tools: bin/ → lib/drope/
    candidates.push_back(exe.parent_path().parent_path() / "lib" / "drope" / file_name);
  }
  if (&drope_installed_module_dir != nullptr) candidates.push_back(fs::path(drope_installed_module_dir()) / file_name);
  candidates.emplace_back(built_at);
  int flags = RTLD_NOW | RTLD_LOCAL;
#ifndef DROPE_ASAN
  flags |= RTLD_DEEPBIND;
#endif
  std::string tried;
  for (const auto& p : candidates) {
    if (!fs::is_regular_file(p, ec)) continue;
    if (void* h = ::dlopen(p.c_str(), flags)) return h;
    const char* e = ::dlerror();
    tried += fmt::format("; {}: {}", p.string(), e ? e : "dlopen failed");
  }
  fail("cannot load {} ({}){}", file_name, what, tried.empty() ? "; not found" : tried);
}

void* module_symbol(void* handle, const char* name, const std::string& file_name) {
  void* p = ::dlsym(handle, name);
  if (!p) fail("{} has no {}", file_name, name);
  return p;
}

}  // namespace drope::text::detail
