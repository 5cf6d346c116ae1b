// The x86 vector instruction set the CPU kernels run on. Each kernel is compiled once per level (target
// attributes, with a vector width of its own) and one is chosen at run time: the widest the CPU runs, or
// the level named by the environment variable DROPE_CPU_ISA (avx512 | avx2 | baseline | native), so that
// every path can be tested and benchmarked on a CPU that has a wider one.
#pragma once

#include <string>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define DROPE_X86_DISPATCH 1
#endif

namespace drope::kernels {

enum class Isa { kBase, kAvx2, kAvx512 };

// "baseline", "avx2" or "avx512" (the names DROPE_CPU_ISA takes).
const char* isa_name(Isa isa);

// Whether this CPU runs the level's instructions (kBase: always; AVX2 means AVX2 + FMA; AVX-512 means
// F + DQ + BW + VL).
bool cpu_supports(Isa isa);

// The widest level this CPU runs.
Isa cpu_isa_native();

// Whether this CPU has the AVX512-BF16 dot-product instructions (vdpbf16ps: AMD Zen 4 and later, Intel Cooper
// Lake and Sapphire Rapids and later), whatever DROPE_CPU_ISA says.
bool cpu_has_avx512_bf16();

// The level the kernels use: DROPE_CPU_ISA when set (read once), else cpu_isa_native(). Throws
// std::invalid_argument naming the variable when its value is not a level or the CPU lacks that level.
Isa cpu_isa();

// "drope kernels avx2 (native avx512), ATen AVX2": the levels our kernels and LibTorch's run at, for logs.
std::string describe_cpu_levels();

// Parses a DROPE_CPU_ISA value ("" and "native" mean the native level); throws std::invalid_argument
// naming the variable and what was expected.
Isa parse_cpu_isa(const std::string& value);

}  // namespace drope::kernels
