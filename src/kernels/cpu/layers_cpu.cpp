#include "drope/kernels/layers_cpu.h"

#include <cmath>
#include <vector>

#include <ATen/Parallel.h>

#include "drope/kernels/cpu_isa.h"

namespace drope::kernels {

namespace {

template <typename T>
using acc_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

constexpr int64_t kGrainElements = 1 << 14;  // elements per thread chunk below which threads cost more

int64_t grain_rows(int64_t row_elements) { return std::max<int64_t>(1, kGrainElements / std::max<int64_t>(1, row_elements)); }

// Runs body(begin, end) built for the widest instruction set of this CPU. The bodies are plain loops the
// compiler vectorises; one copy per instruction set is instantiated through the target attribute.
template <typename F>
void body_baseline(const F& f, int64_t b, int64_t e) {
  f(b, e);
}
#ifdef DROPE_X86_DISPATCH
template <typename F>
__attribute__((target("avx512f,avx512dq,avx512bw,avx512vl,avx2,fma"))) void body_avx512(const F& f, int64_t b, int64_t e) {
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

template <typename F>
void for_dtype(const at::Tensor& t, const F& f) {
  if (t.scalar_type() == at::kDouble) return f(double{});
  TORCH_CHECK(t.scalar_type() == at::kFloat, "fused layer kernels take float32 or float64, got ", t.scalar_type());
  f(float{});
}

}  // namespace

bool layers_cpu_supported(std::initializer_list<at::Tensor> tensors) {
  const at::Tensor* first = nullptr;
  for (const auto& t : tensors) {
    if (!t.defined() || !t.device().is_cpu()) return false;
    if (t.scalar_type() != at::kFloat && t.scalar_type() != at::kDouble) return false;
    if (first && t.scalar_type() != first->scalar_type()) return false;
    first = &t;
  }
  return first != nullptr;
}

std::tuple<at::Tensor, at::Tensor> rms_norm_forward_cpu(const at::Tensor& x_in, const at::Tensor& weight, double eps) {
  const int64_t n = x_in.size(-1);
  TORCH_CHECK(weight.dim() == 1 && weight.size(0) == n, "RMSNorm weight must have shape (", n, "), got ",
              weight.sizes());
  auto x = x_in.contiguous();
  auto w = weight.contiguous();
  auto y = at::empty_like(x);
  auto shape = x.sizes().vec();
  shape.pop_back();
  auto rstd = at::empty(shape, x.options());
  const int64_t rows = n == 0 ? 0 : x.numel() / n;
  for_dtype(x, [&](auto tag) {
    using T = decltype(tag);
    RmsForward<T> k{x.data_ptr<T>(), w.data_ptr<T>(), y.data_ptr<T>(), rstd.data_ptr<T>(), n, acc_t<T>(eps)};
    dispatch_rows(rows, n, k);
  });
  return {y, rstd};
}

std::tuple<at::Tensor, at::Tensor> rms_norm_backward_cpu(const at::Tensor& dy_in, const at::Tensor& x_in,
                                                         const at::Tensor& weight, const at::Tensor& rstd_in) {
  const int64_t n = x_in.size(-1);
  auto dy = dy_in.contiguous(), x = x_in.contiguous(), w = weight.contiguous(), rstd = rstd_in.contiguous();
  auto dx = at::empty_like(x);
  const int64_t rows = n == 0 ? 0 : x.numel() / n;
  const auto acc = x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  auto parts = at::zeros({at::get_num_threads(), n}, x.options().dtype(acc));
  for_dtype(x, [&](auto tag) {
    using T = decltype(tag);
    RmsBackward<T> k{dy.data_ptr<T>(), x.data_ptr<T>(),  w.data_ptr<T>(), rstd.data_ptr<T>(),
                     dx.data_ptr<T>(), parts.data_ptr<acc_t<T>>(), n};
    dispatch_rows(rows, n, k);
  });
  return {dx, parts.sum(0).to(weight.scalar_type())};
}

at::Tensor rotary_cpu(const at::Tensor& x_in, const at::Tensor& cos_in, const at::Tensor& sin_in, bool inverse) {
  TORCH_CHECK(x_in.dim() == 4, "rotary: x must be (B, H, T, D), got ", x_in.dim(), " dims");
  const int64_t B = x_in.size(0), H = x_in.size(1), T = x_in.size(2), D = x_in.size(3);
  TORCH_CHECK(D % 2 == 0, "rotary: head dim must be even, got ", D);
  TORCH_CHECK(cos_in.dim() == 2 && cos_in.size(0) == T && cos_in.size(1) == D && sin_in.sizes() == cos_in.sizes(),
              "rotary: cos/sin must be (", T, ", ", D, ")");
  auto x = x_in.stride(3) == 1 ? x_in : x_in.contiguous();
  auto c = cos_in.contiguous(), s = sin_in.contiguous();
  auto y = at::empty({B, H, T, D}, x.options());
  for_dtype(x, [&](auto tag) {
    using Tp = decltype(tag);
    Rotary<Tp> k{x.data_ptr<Tp>(), y.data_ptr<Tp>(), c.data_ptr<Tp>(), s.data_ptr<Tp>(), H, T, D,
                 x.stride(0),      x.stride(1),      x.stride(2),      inverse};
    dispatch_rows(B * H * T, D, k);
  });
  return y;
}

}  // namespace drope::kernels
