// SIMD building blocks of the CPU kernels (attention, layers), internal to src/kernels/cpu.
//
// The hot loops are templates forced inline into one entry point per instruction set (AVX-512, AVX2+FMA,
// baseline SSE2), chosen at run time (cpu_isa()), so the library needs no special compiler flags. SIMD code
// uses GCC/Clang vector extensions whose width VB (bytes) is a template parameter: each entry point uses its
// target's register width (64, 32 or 16 bytes). A vector wider than the target's registers has no machine
// mode: GCC keeps it in memory and splits every operation, many times slower (docs/cpu-isa.md).
#pragma once

#include <cmath>
#include <cstring>

// Vector-typed helpers only ever run inlined into one of the entry points, so their ABI does not matter.
#pragma GCC diagnostic ignored "-Wpsabi"

#define DROPE_INLINE inline __attribute__((always_inline))

namespace drope::kernels {
namespace {

// Vector of T that is VB bytes wide, its lane count, and the number of vector registers of that target
// (AVX-512: 32; AVX2 and SSE: 16), which sizes the register blocking of the micro-kernels.
template <typename T, int VB>
struct Simd {
  typedef T V __attribute__((vector_size(VB)));
  static constexpr int W = VB / int(sizeof(T));
  static constexpr int kRegs = VB == 64 ? 32 : 16;
};

template <typename V, typename T>
DROPE_INLINE V vload(const T* p) {
  V v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <typename V, typename T>
DROPE_INLINE void vstore(T* p, V v) {
  std::memcpy(p, &v, sizeof v);
}

// exp of each lane of a float vector (Cephes expf polynomial, ~1 ulp); arguments below −87.3 give 0.
template <typename V>
DROPE_INLINE V vexp_f32(V x) {
  using VI = decltype(x < x);  // int32 lanes of the same width
  const V lo = V{} - 87.3365447f, hi = V{} + 88.3762626f, zero = V{};
  const auto under = x < lo;
  x = x > hi ? hi : x;
  x = under ? zero : x;
  const float magic = 12582912.0f;  // 1.5 · 2^23: adding it rounds to an integer
  const V n = (x * 1.44269504088896341f + magic) - magic;
  const V r = x - n * 0.693359375f + n * 2.12194440e-4f;
  V y = 1.9875691500E-4f * r + 1.3981999507E-3f;
  y = y * r + 8.3334519073E-3f;
  y = y * r + 4.1665795894E-2f;
  y = y * r + 1.6666665459E-1f;
  y = y * r + 5.0000001201E-1f;
  y = y * (r * r) + r + 1.0f;
  const VI e = __builtin_convertvector(n, VI) << 23;
  const V out = (V)((VI)y + e);
  return under ? zero : out;
}

// exp of each lane of a double vector through libm (float64 results must be exact to ~1e-15).
template <typename V>
DROPE_INLINE V vexp_f64(V x) {
  V out;
  for (int l = 0; l < int(sizeof(V) / sizeof(double)); ++l) out[l] = std::exp(x[l]);
  return out;
}

template <typename V>
DROPE_INLINE V vexp(V x) {
  if constexpr (sizeof(x[0]) == sizeof(float)) return vexp_f32(x);
  else return vexp_f64(x);
}

}  // namespace
}  // namespace drope::kernels
