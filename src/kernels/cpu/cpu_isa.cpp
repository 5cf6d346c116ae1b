#include "drope/kernels/cpu_isa.h"
#include "drope/core/environment.h"

#include <cstdlib>
#include <stdexcept>

#include <ATen/Version.h>

namespace drope::kernels {

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kAvx512: return "avx512";
    case Isa::kAvx2: return "avx2";
    case Isa::kBase: break;
  }
  return "baseline";
}

bool cpu_supports(Isa isa) {
  if (isa == Isa::kBase) return true;
#ifdef DROPE_X86_DISPATCH
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (isa == Isa::kAvx2) return avx2;
  return avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
         __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
#else
  return false;
#endif
}

bool cpu_has_avx512_bf16() {
#ifdef DROPE_X86_DISPATCH
  __builtin_cpu_init();
  return cpu_supports(Isa::kAvx512) && __builtin_cpu_supports("avx512bf16");
#else
  return false;
#endif
}

Isa cpu_isa_native() {
  static const Isa isa = cpu_supports(Isa::kAvx512) ? Isa::kAvx512 : cpu_supports(Isa::kAvx2) ? Isa::kAvx2 : Isa::kBase;
  return isa;
}

Isa parse_cpu_isa(const std::string& value) {
  if (value.empty() || value == "native") return cpu_isa_native();
  Isa isa;
  if (value == "avx512") isa = Isa::kAvx512;
  else if (value == "avx2") isa = Isa::kAvx2;
  else if (value == "baseline") isa = Isa::kBase;
  else throw std::invalid_argument("DROPE_CPU_ISA: expected avx512, avx2, baseline or native, got '" + value + "'");
  if (!cpu_supports(isa))
    throw std::invalid_argument(std::string("DROPE_CPU_ISA=") + value + ": this CPU lacks " +
                                (isa == Isa::kAvx512 ? "AVX-512 (F, DQ, BW, VL)" : "AVX2 + FMA") +
                                "; its widest level is " + isa_name(cpu_isa_native()));
  return isa;
}

Isa cpu_isa() {
  static const Isa isa = [] {
    const char* value = env::get("DROPE_CPU_ISA");
    return parse_cpu_isa(value ? value : "");
  }();  // a throwing initialiser is retried on the next call, so the error repeats rather than vanishing
  return isa;
}

std::string describe_cpu_levels() {
  const Isa isa = cpu_isa(), native = cpu_isa_native();
  std::string s = std::string("drope kernels ") + isa_name(isa);
  if (isa != native) s += std::string(" (native ") + isa_name(native) + ")";
  return s + ", ATen " + at::get_cpu_capability();
}

}  // namespace drope::kernels
