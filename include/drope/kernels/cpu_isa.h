// The widest x86 vector instruction set this CPU runs, for kernels compiled once per instruction set.
#pragma once

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define DROPE_X86_DISPATCH 1
#endif

namespace drope::kernels {

enum class Isa { kBase, kAvx2, kAvx512 };

#ifdef DROPE_X86_DISPATCH
inline Isa cpu_isa() {
  static const Isa isa = [] {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl"))
      return Isa::kAvx512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return Isa::kAvx2;
    return Isa::kBase;
  }();
  return isa;
}
#else
inline Isa cpu_isa() { return Isa::kBase; }
#endif

}  // namespace drope::kernels
