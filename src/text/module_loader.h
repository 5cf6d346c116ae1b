// Loading the text layer's dlopen()ed modules (libdrope_sentencepiece.so, libdrope_parquet.so): where
// they may be, how they are opened, and resolving their C functions. Torch-free; private to src/text.
#pragma once

#include <string>
#include <type_traits>

namespace drope::text::detail {

// Opens the module `file_name` (found beside the running executable, one directory up for tests/ and
// fuzz/, in ../lib/drope/ for installed tools, in the installed package's lib/drope/ for programs built
// against it, then at `built_at`, where the build put it) with RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND: its
// symbols and its libraries' never enter the global scope, and its libraries bind their own symbols
// first (the sanitizers refuse RTLD_DEEPBIND; their builds are torch-free). Fails naming `what` (the
// feature it provides) and every path tried. The handle is never closed.
void* open_module(const std::string& file_name, const std::string& built_at, const std::string& what);

// The address of `name` in module `handle`; fails naming the module when it is missing.
void* module_symbol(void* handle, const char* name, const std::string& file_name);

// Resolves `name` into the function pointer `fn`.
template <typename Fn>
void resolve(void* handle, Fn& fn, const char* name, const std::string& file_name) {
  fn = reinterpret_cast<std::remove_reference_t<Fn>>(module_symbol(handle, name, file_name));
}

}  // namespace drope::text::detail
