#include "drope/kernels/layers_cpu.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include <ATen/Parallel.h>

#include "drope/kernels/cpu_isa.h"
#include "simd.h"

namespace drope::kernels {

namespace {

template <typename T>
using acc_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

constexpr int64_t kGrainElements = 1 << 14;  // elements per thread chunk below which threads cost more

int64_t grain_rows(int64_t row_elements) {
  return std::max<int64_t>(1, kGrainElements / std::max<int64_t>(1, row_elements));
}

// Runs body(begin, end) built for the widest instruction set of this CPU. The bodies are plain loops the
// compiler vectorises; one copy per instruction set is instantiated through the target attribute.
template <typename F>
void body_baseline(const F& f, int64_t b, int64_t e) {
  f(b, e);
}
#ifdef DROPE_X86_DISPATCH
template <typename F>
__attribute__((target("avx512f,avx512dq,avx512bw,avx512vl,avx2,fma"))) void body_avx512(const F& f, int64_t b,
                                                                                        int64_t e) {
  f(b, e);
}
template <typename F>
__attribute__((target("avx2,fma"))) void body_avx2(const F& f, int64_t b, int64_t e) {
  f(b, e);
}
#endif

template <typename F>
void dispatch_rows(int64_t rows, int64_t row_elements, const F& f) {
  const Isa isa = cpu_isa();  // outside the parallel region: an invalid DROPE_CPU_ISA throws here
  at::parallel_for(0, rows, grain_rows(row_elements), [&](int64_t b, int64_t e) {
#ifdef DROPE_X86_DISPATCH
    switch (isa) {
      case Isa::kAvx512: return body_avx512(f, b, e);
      case Isa::kAvx2: return body_avx2(f, b, e);
      case Isa::kBase: break;
    }
#endif
    body_baseline(f, b, e);
  });
}

// Runs K<T, VB>(args)(begin, end) over rows, with VB the vector width in bytes of the widest instruction set
// of this CPU (for kernels written with vector types rather than loops left to the compiler).
template <template <typename, int> class K, typename T, typename Args>
void dispatch_rows_vec(int64_t rows, int64_t row_elements, const Args& a) {
  const Isa isa = cpu_isa();
  at::parallel_for(0, rows, grain_rows(row_elements), [&](int64_t b, int64_t e) {
#ifdef DROPE_X86_DISPATCH
    switch (isa) {
      case Isa::kAvx512: return body_avx512(K<T, 64>{a}, b, e);
      case Isa::kAvx2: return body_avx2(K<T, 32>{a}, b, e);
      case Isa::kBase: break;
    }
#endif
    body_baseline(K<T, 16>{a}, b, e);
  });
}

// ---- RMSNorm -------------------------------------------------------------------------------------------

template <typename T>
struct RmsForward {
  const T* x;
  const T* w;
  T* y;
  T* rstd;
  int64_t n;
  acc_t<T> eps;
  __attribute__((always_inline)) inline void operator()(int64_t b, int64_t e) const {
    using A = acc_t<T>;
    for (int64_t r = b; r < e; ++r) {
      const T* xr = x + r * n;
      T* yr = y + r * n;
      A ss = 0;
#pragma omp simd reduction(+ : ss)
      for (int64_t i = 0; i < n; ++i) ss += A(xr[i]) * A(xr[i]);
      const A rs = A(1) / std::sqrt(ss / A(n) + eps);
      rstd[r] = T(rs);
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) yr[i] = T(A(w[i]) * (A(xr[i]) * rs));
    }
  }
};

template <typename T>
struct RmsBackward {
  const T* dy;
  const T* x;
  const T* w;
  const T* rstd;
  T* dx;
  acc_t<T>* dw_parts;  // one row of n per thread
  int64_t n;
  __attribute__((always_inline)) inline void operator()(int64_t b, int64_t e) const {
    using A = acc_t<T>;
    A* dw = dw_parts + at::get_thread_num() * n;
    for (int64_t r = b; r < e; ++r) {
      const T* g = dy + r * n;
      const T* xr = x + r * n;
      T* dxr = dx + r * n;
      const A rs = A(rstd[r]);
      A dot = 0;
#pragma omp simd reduction(+ : dot)
      for (int64_t i = 0; i < n; ++i) dot += A(g[i]) * A(w[i]) * A(xr[i]);
      // y = w·x·rs with rs = (mean(x²)+eps)^-½: dx = rs·(g·w) − x·rs³·mean(g·w·x).
      const A c = dot * rs * rs * rs / A(n);
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) {
        dxr[i] = T(rs * A(g[i]) * A(w[i]) - A(xr[i]) * c);
        dw[i] += A(g[i]) * A(xr[i]) * rs;
      }
    }
  }
};

// ---- rotary --------------------------------------------------------------------------------------------

template <typename T>
struct Rotary {
  const T* x;
  T* y;
  const T* cos;
  const T* sin;
  int64_t heads, len, dim;
  int64_t xs0, xs1, xs2;  // x strides of B, H, T (D has stride 1)
  bool inverse;
  __attribute__((always_inline)) inline void operator()(int64_t b, int64_t e) const {
    const int64_t h = dim / 2;
    for (int64_t r = b; r < e; ++r) {  // r = ((bi·H) + hi)·T + t
      const int64_t t = r % len, bh = r / len, hi = bh % heads, bi = bh / heads;
      const T* xr = x + bi * xs0 + hi * xs1 + t * xs2;
      T* yr = y + r * dim;
      const T* c = cos + t * dim;
      const T* s = sin + t * dim;
      if (!inverse) {  // y1 = x1·c1 − x2·s1, y2 = x2·c2 + x1·s2
#pragma omp simd
        for (int64_t i = 0; i < h; ++i) {
          const T x1 = xr[i], x2 = xr[i + h];
          yr[i] = x1 * c[i] - x2 * s[i];
          yr[i + h] = x2 * c[i + h] + x1 * s[i + h];
        }
      } else {  // transpose: dx1 = g1·c1 + g2·s2, dx2 = g2·c2 − g1·s1
#pragma omp simd
        for (int64_t i = 0; i < h; ++i) {
          const T g1 = xr[i], g2 = xr[i + h];
          yr[i] = g1 * c[i] + g2 * s[i + h];
          yr[i + h] = g2 * c[i + h] - g1 * s[i];
        }
      }
    }
  }
};

// ---- SwiGLU --------------------------------------------------------------------------------------------

// One row of gate g and up u (n each) → silu(g)·u, or the gradients [dh·u·silu'(g) | dh·silu(g)] with
// silu(g) = g·σ(g) and silu'(g) = σ(g)·(1 + g·(1 − σ(g))). The last partial vector goes through a padded one,
// so every element takes the same arithmetic.
template <typename T, int VB>
struct SwiGlu {
  SwiGluArgs<T> a;
  using V = typename Simd<T, VB>::V;
  static constexpr int W = Simd<T, VB>::W;
  DROPE_INLINE static V sigmoid(V g) { return T(1) / (T(1) + vexp(-g)); }
  DROPE_INLINE void forward(const T* g, const T* u, T* h, int64_t i) const {
    const V gv = vload<V>(g + i), s = sigmoid(gv);
    vstore(h + i, gv * s * vload<V>(u + i));
  }
  DROPE_INLINE void backward(const T* g, const T* u, const T* dh, T* dg, T* du, int64_t i) const {
    const V gv = vload<V>(g + i), s = sigmoid(gv), sg = gv * s, d = vload<V>(dh + i);
    vstore(du + i, d * sg);
    vstore(dg + i, d * vload<V>(u + i) * (s + sg * (T(1) - s)));
  }
  DROPE_INLINE void operator()(int64_t b, int64_t e) const {
    const int64_t n = a.n, full = n - n % W, rest = n - full;
    for (int64_t r = b; r < e; ++r) {
      const T* g = a.gu + r * 2 * n;
      const T* u = g + n;
      if (!a.dh) {
        T* h = a.out + r * n;
        for (int64_t i = 0; i < full; i += W) forward(g, u, h, i);
        if (rest) {
          T tg[W] = {}, tu[W] = {}, th[W];
          std::memcpy(tg, g + full, rest * sizeof(T));
          std::memcpy(tu, u + full, rest * sizeof(T));
          forward(tg, tu, th, 0);
          std::memcpy(h + full, th, rest * sizeof(T));
        }
      } else {
        const T* dh = a.dh + r * n;
        T* dg = a.out + r * 2 * n;
        T* du = dg + n;
        for (int64_t i = 0; i < full; i += W) backward(g, u, dh, dg, du, i);
        if (rest) {
          T tg[W] = {}, tu[W] = {}, td[W] = {}, tdg[W], tdu[W];
          std::memcpy(tg, g + full, rest * sizeof(T));
          std::memcpy(tu, u + full, rest * sizeof(T));
          std::memcpy(td, dh + full, rest * sizeof(T));
          backward(tg, tu, td, tdg, tdu, 0);
          std::memcpy(dg + full, tdg, rest * sizeof(T));
          std::memcpy(du + full, tdu, rest * sizeof(T));
        }
      }
    }
  }
};

// ---- Softmax cross-entropy ------------------------------------------------------------------------------

template <typename T, int VB>
struct SoftmaxXent {
  SoftmaxXentArgs<T> a;
  using V = typename Simd<T, VB>::V;
  static constexpr int W = Simd<T, VB>::W;
  DROPE_INLINE void operator()(int64_t b, int64_t e) const {
    const int64_t n = a.n, full = n - n % W;
    for (int64_t r = b; r < e; ++r) {
      T* x = a.x + r * n;
      const int64_t y = a.labels[r];
      const bool keep = y != a.ignore_index;
      if (!keep) {
        a.loss[r] = T(0);
        if (a.grad) std::memset(x, 0, size_t(n) * sizeof(T));
        continue;
      }
      const T picked = x[y];
      // Pass 1: the row max.
      T m = -std::numeric_limits<T>::infinity();
      if (full > 0) {
        V vm = vload<V>(x);
        for (int64_t i = W; i < full; i += W) {
          const V v = vload<V>(x + i);
          vm = v > vm ? v : vm;
        }
        for (int l = 0; l < W; ++l) m = std::max(m, T(vm[l]));
      }
      for (int64_t i = full; i < n; ++i) m = std::max(m, x[i]);
      // Pass 2: exp(x − m), summed (and stored when the gradient follows).
      V vs{};
      const V vmax = V{} + m;
      for (int64_t i = 0; i < full; i += W) {
        const V ex = vexp(vload<V>(x + i) - vmax);
        vs += ex;
        if (a.grad) vstore(x + i, ex);
      }
      T s = T(0);
      for (int l = 0; l < W; ++l) s += vs[l];
      if (full < n) {
        T t[W] = {};
        for (int64_t i = full; i < n; ++i) t[i - full] = x[i] - m;
        const V ex = vexp(vload<V>(t));
        for (int64_t i = full; i < n; ++i) {
          s += ex[i - full];
          if (a.grad) x[i] = ex[i - full];
        }
      }
      a.loss[r] = m + std::log(s) - picked;
      if (!a.grad) continue;
      // Pass 3: softmax · scale, minus scale at the label.
      const T f = T(a.scale) / s;
      const V vf = V{} + f;
      for (int64_t i = 0; i < full; i += W) vstore(x + i, vload<V>(x + i) * vf);
      for (int64_t i = full; i < n; ++i) x[i] *= f;
      x[y] -= T(a.scale);
    }
  }
};

// bf16 ↔ float32 of n values (bf16 as bit patterns; rounding to nearest even, NaN kept NaN), loops the compiler
// vectorises.
DROPE_INLINE void bf16_to_float(const uint16_t* src, int64_t n, float* dst) {
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t u = uint32_t(src[i]) << 16;
    std::memcpy(dst + i, &u, 4);
  }
}
DROPE_INLINE void float_to_bf16(const float* src, int64_t n, uint16_t* dst) {
  for (int64_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, src + i, 4);
    const bool nan = (u & 0x7fffffffu) > 0x7f800000u;
    dst[i] = nan ? uint16_t(0x7fc0) : uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  }
}

template <typename, int VB>
struct SwiGluBf16 {
  SwiGluBf16Args a;
  DROPE_INLINE void operator()(int64_t b, int64_t e) const {
    const int64_t n = a.n, out_n = a.dh ? 2 * n : n;
    std::vector<float> gu(static_cast<size_t>(2 * n)), dh(static_cast<size_t>(a.dh ? n : 0)),
        out(static_cast<size_t>(out_n));
    const SwiGlu<float, VB> k{SwiGluArgs<float>{gu.data(), a.dh ? dh.data() : nullptr, out.data(), 1, n}};
    for (int64_t r = b; r < e; ++r) {
      bf16_to_float(a.gu + r * 2 * n, 2 * n, gu.data());
      if (a.dh) bf16_to_float(a.dh + r * n, n, dh.data());
      k(0, 1);
      float_to_bf16(out.data(), out_n, a.out + r * out_n);
    }
  }
};

template <typename, int VB>
struct SoftmaxXentBf16 {
  SoftmaxXentBf16Args a;
  DROPE_INLINE void operator()(int64_t b, int64_t e) const {
    const int64_t n = a.n;
    std::vector<float> x(static_cast<size_t>(n));
    for (int64_t r = b; r < e; ++r) {
      bf16_to_float(a.x + r * n, n, x.data());
      SoftmaxXent<float, VB>{
          SoftmaxXentArgs<float>{x.data(), a.labels + r, a.loss + r, 1, n, a.ignore_index, a.scale, a.grad}}(0, 1);
      if (a.grad) float_to_bf16(x.data(), n, a.x + r * n);
    }
  }
};

}  // namespace

template <typename T>
static void softmax_xent(const SoftmaxXentArgs<T>& a) {
  for (int64_t r = 0; r < a.rows; ++r)
    if (a.labels[r] != a.ignore_index && (a.labels[r] < 0 || a.labels[r] >= a.n))
      throw std::invalid_argument("softmax_xent_cpu: label out of range");
  dispatch_rows_vec<SoftmaxXent, T>(a.rows, 3 * a.n, a);
}

template <typename T>
static void swiglu(const SwiGluArgs<T>& a) {
  dispatch_rows_vec<SwiGlu, T>(a.rows, 3 * a.n, a);
}

template <typename T>
static void rms_forward(const RmsNormForwardArgs<T>& a) {
  RmsForward<T> k{a.x, a.w, a.y, a.rstd, a.n, acc_t<T>(a.eps)};
  dispatch_rows(a.rows, a.n, k);
}

template <typename T>
static void rms_backward(const RmsNormBackwardArgs<T>& a) {
  if (a.dw_rows < at::get_num_threads())
    throw std::invalid_argument("rms_norm_backward_cpu: dw_parts needs one row per intra-op thread");
  RmsBackward<T> k{a.dy, a.x, a.w, a.rstd, a.dx, a.dw_parts, a.n};
  dispatch_rows(a.rows, a.n, k);
}

template <typename T>
static void rotary(const RotaryArgs<T>& a) {
  Rotary<T> k{a.x, a.y, a.cos, a.sin, a.heads, a.len, a.dim, a.xs[0], a.xs[1], a.xs[2], a.inverse};
  dispatch_rows(a.batch * a.heads * a.len, a.dim, k);
}

void rms_norm_forward_cpu(const RmsNormForwardArgs<float>& a) { rms_forward(a); }
void rms_norm_forward_cpu(const RmsNormForwardArgs<double>& a) { rms_forward(a); }
void rms_norm_backward_cpu(const RmsNormBackwardArgs<float>& a) { rms_backward(a); }
void rms_norm_backward_cpu(const RmsNormBackwardArgs<double>& a) { rms_backward(a); }
void rotary_cpu(const RotaryArgs<float>& a) { rotary(a); }
void rotary_cpu(const RotaryArgs<double>& a) { rotary(a); }
void swiglu_cpu(const SwiGluArgs<float>& a) { swiglu(a); }
void swiglu_cpu(const SwiGluArgs<double>& a) { swiglu(a); }
void softmax_xent_cpu(const SoftmaxXentArgs<float>& a) { softmax_xent(a); }
void softmax_xent_cpu(const SoftmaxXentArgs<double>& a) { softmax_xent(a); }
void swiglu_bf16_cpu(const SwiGluBf16Args& a) { dispatch_rows_vec<SwiGluBf16, float>(a.rows, 3 * a.n, a); }
void softmax_xent_bf16_cpu(const SoftmaxXentBf16Args& a) {
  for (int64_t r = 0; r < a.rows; ++r)
    if (a.labels[r] != a.ignore_index && (a.labels[r] < 0 || a.labels[r] >= a.n))
      throw std::invalid_argument("softmax_xent_bf16_cpu: label out of range");
  dispatch_rows_vec<SoftmaxXentBf16, float>(a.rows, 3 * a.n, a);
}

}  // namespace drope::kernels
