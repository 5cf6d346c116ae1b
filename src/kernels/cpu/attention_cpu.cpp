#include "drope/kernels/attention_cpu.h"
#include "drope/core/environment.h"
#include "drope/core/numbers.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include <ATen/Parallel.h>
#include <ATen/native/CPUBlas.h>
#include <c10/util/BFloat16.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "drope/kernels/attention_math.h"
#include "drope/kernels/cpu_isa.h"
#include "simd.h"

namespace drope::kernels {

namespace {

constexpr int64_t kBlockQ = 128;  // query rows per tile
constexpr int64_t kBlockK = 64;  // keys per tile
constexpr int64_t kRows = 4;     // rows per micro-kernel step; tiles are padded to a multiple of it
constexpr int64_t kMinParallelWork = int64_t(1) << 21;  // B·H·T·S·D below which threads cost more than they save
constexpr int kMaxVecBytes = 64;  // the widest vector of any path: head dims are padded to it

// Vector-width of each instruction set's entry point.
constexpr int kVecAvx512 = 64, kVecAvx2 = 32, kVecBase = 16;

// Lane indices 0, 1, …, W − 1.
template <typename V>
DROPE_INLINE V iota() {
  V v{};
  for (int l = 0; l < int(sizeof(V) / sizeof(v[0])); ++l) v[l] = l;
  return v;
}

// Lower and upper half of a vector, as a vector of half the width.
template <typename V>
struct Halves {
  typedef typename std::remove_reference<decltype(V{}[0])>::type T;
  typedef T H __attribute__((vector_size(sizeof(V) / 2)));
};

// Largest lane and sum of the lanes, as a tree of log2(lanes) steps: a lane-by-lane loop is one serial chain
// the compiler may not reorder (floating point), 15 dependent adds for 16 floats.
template <typename V>
DROPE_INLINE auto hmax(V v) {
  constexpr int N = int(sizeof(V) / sizeof(v[0]));
  if constexpr (N <= 4) {
    auto m = v[0];
    for (int l = 1; l < N; ++l) m = v[l] > m ? v[l] : m;
    return m;
  } else {
    typename Halves<V>::H lo, hi;
    std::memcpy(&lo, &v, sizeof lo);
    std::memcpy(&hi, reinterpret_cast<const char*>(&v) + sizeof lo, sizeof hi);
    return hmax(lo > hi ? lo : hi);
  }
}

template <typename V>
DROPE_INLINE auto hsum(V v) {
  constexpr int N = int(sizeof(V) / sizeof(v[0]));
  if constexpr (N <= 4) {
    auto s = v[0];
    for (int l = 1; l < N; ++l) s += v[l];
    return s;
  } else {
    typename Halves<V>::H lo, hi;
    std::memcpy(&lo, &v, sizeof lo);
    std::memcpy(&hi, reinterpret_cast<const char*>(&v) + sizeof lo, sizeof hi);
    return hsum(lo + hi);
  }
}

// C (R × NV·W) = [C +] A (R × K, row stride lda) · B (K × NV·W, row stride ldb), accumulators in registers.
// TransA: A is stored transposed, element (r, k) at A[k · lda + r].
template <typename T, int VB, int NV, bool TransA, int R = kRows>
DROPE_INLINE void gemm_rows(int64_t K, const T* A, int64_t lda, const T* B, int64_t ldb, T* C, int64_t ldc,
                            bool accumulate, const T* row_scale) {
  using V = typename Simd<T, VB>::V;
  constexpr int W = Simd<T, VB>::W;
  static_assert(R * NV + NV + 1 <= Simd<T, VB>::kRegs, "micro-kernel needs more vector registers than the target has");
  V c[R][NV];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) c[r][v] = accumulate ? vload<V>(C + r * ldc + v * W) : V{};
  if (row_scale)
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < NV; ++v) c[r][v] *= row_scale[r];
  for (int64_t k = 0; k < K; ++k) {
    V b[NV];
    for (int v = 0; v < NV; ++v) b[v] = vload<V>(B + k * ldb + v * W);
    for (int r = 0; r < R; ++r) {
      const T a = TransA ? A[k * lda + r] : A[r * lda + k];
      for (int v = 0; v < NV; ++v) c[r][v] += a * b[v];
    }
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) vstore(C + r * ldc + v * W, c[r][v]);
}

// C (M × N) = [C +] op(A) (M × K) · B (K × N), row-major; M % kRows == 0, N % W == 0. op(A) = A (row stride
// lda), or with TransA the transpose of a (K × M) matrix of row stride lda (no copy). With row_scale and
// accumulate, row r of C is first multiplied by row_scale[r] (the online softmax's rescaling, at no extra
// pass). The register blocking follows the target: with 32 vector registers, 4 rows × 4 vectors (8 rows for
// narrow C); with 16, 4 rows × 2 vectors, so that accumulators, B vectors and the broadcast A value all stay
// in registers.
template <typename T, int VB, bool TransA = false>
DROPE_INLINE void gemm(int64_t M, int64_t N, int64_t K, const T* A, int64_t lda, const T* B, int64_t ldb, T* C,
                       int64_t ldc, bool accumulate, const T* row_scale = nullptr) {
  constexpr int W = Simd<T, VB>::W;
  constexpr bool kWide = Simd<T, VB>::kRegs >= 32;
  constexpr int kNV = kWide ? 4 : 2;  // vectors per micro-kernel step
  int64_t i = 0;
  if constexpr (kWide) {
    if (N <= 2 * W)  // narrow C (head dims ≤ 2 vectors): twice the rows per step keeps 16 accumulators busy
      for (; i + 2 * kRows <= M; i += 2 * kRows) {
        const T* a = TransA ? A + i : A + i * lda;
        const T* rs = row_scale ? row_scale + i : nullptr;
        T* c = C + i * ldc;
        if (N == 2 * W) gemm_rows<T, VB, 2, TransA, 2 * kRows>(K, a, lda, B, ldb, c, ldc, accumulate, rs);
        else if (N == W) gemm_rows<T, VB, 1, TransA, 2 * kRows>(K, a, lda, B, ldb, c, ldc, accumulate, rs);
      }
  }
  for (; i < M; i += kRows) {
    const T* a = TransA ? A + i : A + i * lda;
    const T* rs = row_scale ? row_scale + i : nullptr;
    T* c = C + i * ldc;
    int64_t n = 0;
    for (; n + kNV * W <= N; n += kNV * W)
      gemm_rows<T, VB, kNV, TransA>(K, a, lda, B + n, ldb, c + n, ldc, accumulate, rs);
    const int64_t rest = (N - n) / W;
    if constexpr (kNV > 3)
      if (rest == 3) gemm_rows<T, VB, 3, TransA>(K, a, lda, B + n, ldb, c + n, ldc, accumulate, rs);
    if constexpr (kNV > 2)
      if (rest == 2) gemm_rows<T, VB, 2, TransA>(K, a, lda, B + n, ldb, c + n, ldc, accumulate, rs);
    if (rest == 1) gemm_rows<T, VB, 1, TransA>(K, a, lda, B + n, ldb, c + n, ldc, accumulate, rs);
  }
}

DROPE_INLINE int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// dst (rows × ld) ← n rows of D values at src (row stride), converted to T; the rest of the rows zero.
template <typename in_t, typename T>
DROPE_INLINE void load_rows(const in_t* src, int64_t stride, int64_t n, int64_t D, int64_t rows, int64_t ld, T* dst) {
  std::fill(dst, dst + rows * ld, T(0));
  for (int64_t r = 0; r < n; ++r)
    for (int64_t d = 0; d < D; ++d) dst[r * ld + d] = static_cast<T>(src[r * stride + d]);
}

// dst (D × cols) ← the transpose of n rows of D values at src, converted to T; other columns zero.
template <typename in_t, typename T>
DROPE_INLINE void load_cols(const in_t* src, int64_t stride, int64_t n, int64_t D, int64_t cols, T* dst) {
  std::fill(dst, dst + D * cols, T(0));
  for (int64_t r = 0; r < n; ++r)
    for (int64_t d = 0; d < D; ++d) dst[d * cols + r] = static_cast<T>(src[r * stride + d]);
}

// A (rows, Dp) GEMM operand holding n rows of D values at src (row stride `stride`); *ld gets its row stride.
// Read in place when nothing needs converting or padding: same type, D == Dp, no padding rows (they would read
// past the tensor) and rows packed (stride D). Otherwise converted into dst (load_rows). Strided rows, such as
// the heads of a transposed (B, T, H, D) view, are copied; whether reading them in place pays is not measured.
template <typename in_t, typename T>
DROPE_INLINE const T* operand_rows(const in_t* src, int64_t stride, int64_t n, int64_t D, int64_t Dp, int64_t rows,
                                   T* dst, int64_t* ld) {
  if constexpr (std::is_same<in_t, T>::value) {
    if (D == Dp && n == rows && stride == D) {
      *ld = D;
      return src;
    }
  }
  load_rows(src, stride, n, D, rows, Dp, dst);
  *ld = Dp;
  return dst;
}

// ---- bf16 tile GEMMs on AMX ----------------------------------------------------------------------------
// With bf16 inputs on a CPU with AMX tiles, the GEMMs of a tile pair run as LibTorch's batch-reduce GEMM
// (at::native::cpublas::brgemm: oneDNN's AMX micro-kernel, bf16 operands, float32 accumulators). Its B operand is
// in VNNI order: the rows of B (K × N) in pairs, element (k, n) at [(k / 2) · 2N + 2n + k % 2]. The softmax
// state, logits, probabilities and accumulators stay float32 in the scratch; probabilities and logit gradients are
// rounded to bf16 only as the second GEMMs' inputs (as flash attention does in bf16).
using bf16 = c10::BFloat16;

// Whether bf16 tile GEMMs run on AMX: LibTorch packs bf16 for AMX (oneDNN's cap, ONEDNN_MAX_CPU_ISA, allows it),
// drope's kernels run at avx512, and DROPE_ATTENTION_AMX is not 0 (for A/B timing against the float32 FMA path).
bool amx_tiles() {
  static const bool on = [] {
    if (switch_value(env::get("DROPE_ATTENTION_AMX")) == SwitchValue::kOff) return false;  // validated at start
    return cpu_isa() == Isa::kAvx512 && at::native::cpublas::could_pack(at::kBFloat16);
  }();
  return on;
}

// B = Mᵀ in VNNI order, K = D (even), N = ncols: M is n rows of D bf16 values (row stride `stride`); columns n..ncols
// zero. Pairs (M[j][d], M[j][d + 1]) are adjacent in M's row, so this is a transpose of 32-bit words.
DROPE_INLINE void vnni_transposed(const bf16* src, int64_t stride, int64_t n, int64_t D, int64_t ncols, bf16* dst) {
  auto* out = reinterpret_cast<uint32_t*>(dst);
  for (int64_t k2 = 0; k2 < D / 2; ++k2) {
    for (int64_t j = 0; j < n; ++j) std::memcpy(out + k2 * ncols + j, src + j * stride + 2 * k2, 4);
    std::fill(out + k2 * ncols + n, out + (k2 + 1) * ncols, 0u);
  }
}

// B = M in VNNI order, N = D: M is n rows of D bf16 values (row stride `stride`), padded with zero rows to `rows`
// (even).
DROPE_INLINE void vnni_rows(const bf16* src, int64_t stride, int64_t n, int64_t D, int64_t rows, bf16* dst) {
  for (int64_t k = 0; k < rows; k += 2) {
    const bf16* a = src + k * stride;
    const bf16* b = a + stride;
    bf16* o = dst + k * D;
    for (int64_t d = 0; d < D; ++d) {
      o[2 * d] = k < n ? a[d] : bf16(0.0f);
      o[2 * d + 1] = k + 1 < n ? b[d] : bf16(0.0f);
    }
  }
}

// dst (rows × cols, row stride ld) = src rows (float, row stride lds) rounded to bf16.
DROPE_INLINE void to_bf16_rows(const float* src, int64_t lds, int64_t rows, int64_t cols, bf16* dst, int64_t ld) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) dst[r * ld + c] = bf16(src[r * lds + c]);
}

// dst (cols × rows_pad, row stride rows_pad) = the transpose of src (rows × cols floats, row stride lds) in bf16;
// columns rows..rows_pad zero.
DROPE_INLINE void to_bf16_transposed(const float* src, int64_t lds, int64_t rows, int64_t rows_pad, int64_t cols,
                                     bf16* dst) {
  for (int64_t c = 0; c < cols; ++c) {
    for (int64_t r = 0; r < rows; ++r) dst[c * rows_pad + r] = bf16(src[r * lds + c]);
    for (int64_t r = rows; r < rows_pad; ++r) dst[c * rows_pad + r] = bf16(0.0f);
  }
}

// C (M × N, float, row stride ldc) [+]= A (M × K bf16, row stride lda) · B (K × N, VNNI).
DROPE_INLINE void tile_gemm(int64_t M, int64_t N, int64_t K, const bf16* A, int64_t lda, const bf16* B, float* C,
                            int64_t ldc, bool accumulate) {
  if (M > 0) at::native::cpublas::brgemm(M, N, K, lda, N, ldc, accumulate, A, B, C, /*is_vnni=*/true);
}

// Everything one kernel launch needs; the work items are tiles of one (batch, head) pair.
template <typename in_t, typename T>
struct Job {
  enum Kind { kForward, kRowDot, kGradKV, kGradQ, kGradKVQ } kind;
  AttnParams<T> p;
  int64_t D = 0, Dp = 0;      // head dim, and padded to the SIMD width
  int64_t blocks = 0;         // tiles per (batch, head) pair
  bool serial = false;        // too little work to spread over threads
  bool amx = false;           // bf16 inputs whose tile GEMMs run on AMX (bf16 in, float32 accumulation)
  const in_t *q = nullptr, *k = nullptr, *v = nullptr, *out = nullptr, *dout = nullptr;
  const T *lse = nullptr, *rowdot = nullptr;
  in_t *o = nullptr, *dq = nullptr, *dk = nullptr, *dv = nullptr;
  T *lse_out = nullptr, *rowdot_out = nullptr;
};

// Scratch elements of grad_kv_tile (with room for the key tile that dQ needs).
template <typename in_t, typename T>
int64_t scratch_kv(const Job<in_t, T>& job) {
  return 2 * job.D * kBlockK + 3 * kBlockK * job.Dp + 2 * kBlockQ * job.Dp + 2 * kBlockQ * kBlockK;
}

// Scratch elements one work item of the job needs.
template <typename in_t, typename T>
int64_t scratch_size(const Job<in_t, T>& job) {
  const int64_t D = job.D, Dp = job.Dp, QK = kBlockQ * kBlockK;
  switch (job.kind) {
    case Job<in_t, T>::kForward:
      return 2 * kBlockQ * Dp + D * kBlockK + kBlockK * Dp + QK + 3 * kBlockQ +
             kBlockQ * kMaxVecBytes / int64_t(sizeof(T));  // lv: one vector per row
    case Job<in_t, T>::kGradKV: return scratch_kv(job);
    case Job<in_t, T>::kGradQ: return 3 * kBlockQ * Dp + 2 * D * kBlockK + kBlockK * Dp + 2 * QK;
    case Job<in_t, T>::kGradKVQ:  // the last query tile's padding rows spill kRows − 1 rows past dQ
      return scratch_kv(job) + ((job.p.heads / job.p.kv_heads) * job.p.q_len + kRows) * Dp;
    default: return 0;
  }
}

// Tile index of work item idx within its pair, zig-zag ordered so that contiguous chunks mix cheap and
// expensive causal tiles.
DROPE_INLINE int64_t zigzag(int64_t r, int64_t n) { return r % 2 == 0 ? r / 2 : n - 1 - r / 2; }

// Keys [*a, *b) of the key tile at j0 (nk keys) that query position i sees, relative to j0; empty if *a >= *b.
template <typename T>
DROPE_INLINE void tile_keys(const AttnParams<T>& p, int64_t i, int64_t j0, int64_t nk, int64_t* a, int64_t* b) {
  *a = std::max<int64_t>(visible_lo(p, i) - j0, 0);
  *b = std::min<int64_t>(visible_hi(p, i) - j0, nk);
}

// Logits of keys c, …, c + W − 1 of one row (relative to its key tile; di = i − j0) from their raw dots: scaled,
// ALiBi-biased, −inf outside the row's visible keys [a, b). Only a vector straddling a or b pays for the mask;
// callers handle vectors wholly outside [a, b) without loading them.
template <typename T, int VB>
DROPE_INLINE typename Simd<T, VB>::V vec_logits(const AttnParams<T>& p, typename Simd<T, VB>::V dot, int64_t c,
                                                int64_t a, int64_t b, T slope, T di) {
  using V = typename Simd<T, VB>::V;
  constexpr int W = Simd<T, VB>::W;
  const V jj = iota<V>() + T(c);
  const V x = slope == T(0) ? dot * p.scale : attn_logit(dot, p.scale, slope, di - jj);
  if (c >= a && c + W <= b) return x;
  return ((jj < T(a)) | (jj >= T(b))) ? V{} + neg_inf<T>() : x;
}

// Turns the raw dots of one query row of a key tile [j0, j0 + kBlockK) into masked, scaled, biased logits in
// place and stores the row's largest logit in row_max; returns false (and touches nothing) when no key of the
// tile is visible to the row.
template <typename T, int VB>
DROPE_INLINE bool row_logits(const AttnParams<T>& p, T* s, int64_t i, int64_t j0, int64_t nk, T slope, T& row_max) {
  using V = typename Simd<T, VB>::V;
  constexpr int W = Simd<T, VB>::W;
  int64_t a, b;
  tile_keys(p, i, j0, nk, &a, &b);
  if (a >= b) return false;
  const V ninf = V{} + neg_inf<T>();
  V vmax = ninf;
  const bool all = a == 0 && b == kBlockK;
  if (slope == T(0) && all) {  // every key visible, no bias: only the scale
    for (int64_t c = 0; c < kBlockK; c += W) {
      const V x = vload<V>(s + c) * p.scale;
      vmax = x > vmax ? x : vmax;
      vstore(s + c, x);
    }
  } else if (all) {  // every key visible, ALiBi bias
    const V lane = iota<V>();
    const T di = T(i - j0);
    for (int64_t c = 0; c < kBlockK; c += W) {
      const V x = attn_logit(vload<V>(s + c), p.scale, slope, di - (lane + T(c)));
      vmax = x > vmax ? x : vmax;
      vstore(s + c, x);
    }
  } else {  // keys [a, b) visible: vectors wholly outside are set, only the (at most two) straddling ones masked
    const T di = T(i - j0);
    for (int64_t c = 0; c < kBlockK; c += W) {
      if (c + W <= a || c >= b) {
        vstore(s + c, ninf);
        continue;
      }
      const V x = vec_logits<T, VB>(p, vload<V>(s + c), c, a, b, slope, di);
      vmax = x > vmax ? x : vmax;
      vstore(s + c, x);
    }
  }
  row_max = hmax(vmax);
  return true;
}

// Rows [*r0, *r1) of a query tile (positions i0, …, i0 + nq − 1) that see a key of [j0, j1), widened to
// multiples of kRows. Both ends of each row's visible keys grow with the row, so these rows are contiguous.
template <typename T>
DROPE_INLINE void visible_rows(const AttnParams<T>& p, int64_t i0, int64_t nq, int64_t j0, int64_t j1, int64_t* r0,
                               int64_t* r1) {
  const auto sees = [&](int64_t r) {
    int64_t a, b;
    tile_keys(p, i0 + r, j0, j1 - j0, &a, &b);
    return a < b;
  };
  int64_t a = 0, b = nq;
  while (a < b && !sees(a)) ++a;
  while (b > a && !sees(b - 1)) --b;
  *r0 = a / kRows * kRows;
  *r1 = a < b ? round_up(b, kRows) : *r0;
}

// Forward of one query tile: online softmax over the key tiles of its band. Per key tile: the raw dots, every
// row's logits and tile maximum; the running maxima and rescaling factors for all rows at once (vector exp);
// the probabilities, with each row's running sum kept as a vector (one horizontal sum per row at the end);
// then O = alpha · O + P · V in one GEMM pass.
template <typename in_t, typename T, int VB>
DROPE_INLINE void forward_tile(const Job<in_t, T>& job, int64_t bh, int64_t qb, T* buf, bf16* bb) {
  using V = typename Simd<T, VB>::V;
  constexpr int W = Simd<T, VB>::W;
  const auto& p = job.p;
  const int64_t D = job.D, Dp = job.Dp, b = bh / p.heads, h = bh % p.heads, hk = kv_head_of(p, h);
  const int64_t t0 = qb * kBlockQ, nq = std::min(kBlockQ, p.q_len - t0), Mq = round_up(nq, kRows);
  const int64_t Mv = std::min(round_up(Mq, W), kBlockQ);  // rows of the per-row vector steps
  const int64_t i0 = query_pos(p, t0);
  const T slope = p.alibi_slopes ? p.alibi_slopes[h] : T(0);
  T* Q = buf;                    // (kBlockQ, Dp)
  T* O = Q + kBlockQ * Dp;       // (kBlockQ, Dp)
  T* Kt = O + kBlockQ * Dp;      // (D, kBlockK)
  T* Vs = Kt + D * kBlockK;      // (kBlockK, Dp)
  T* S = Vs + kBlockK * Dp;      // (kBlockQ, kBlockK)
  T* m = S + kBlockQ * kBlockK;  // (kBlockQ) running maxima
  T* tmax = m + kBlockQ;         // (kBlockQ) maxima of the current tile
  T* alpha = tmax + kBlockQ;     // (kBlockQ) rescaling factors of the current tile
  T* lv = alpha + kBlockQ;       // (kBlockQ, W) running sums, one vector per row
  const in_t* qp = job.q + b * p.q_stride[0] + h * p.q_stride[1] + t0 * p.q_stride[2];
  const in_t* kp = job.k + b * p.k_stride[0] + hk * p.k_stride[1];
  const in_t* vp = job.v + b * p.v_stride[0] + hk * p.v_stride[1];
  load_rows(qp, p.q_stride[2], nq, D, kBlockQ, Dp, Q);
  std::fill(O, O + kBlockQ * Dp, T(0));
  std::fill(m, m + kBlockQ, neg_inf<T>());
  std::fill(lv, lv + kBlockQ * W, T(0));
  int64_t lo, hi;
  key_band(p, i0, i0 + nq, &lo, &hi);
  const V ninf = V{} + neg_inf<T>(), one = V{} + T(1);
  for (int64_t j0 = lo; j0 < hi; j0 += kBlockK) {
    const int64_t nk = std::min(kBlockK, hi - j0);
    int64_t r0, r1;  // rows that see this key tile (causal: the diagonal tiles skip the rows above it)
    visible_rows(p, i0, nq, j0, j0 + nk, &r0, &r1);
    if (r0 == r1) continue;
    const int64_t Mr = r1 - r0;
    int64_t ldv = 0;
    const T* vt = nullptr;
    if constexpr (std::is_same<in_t, bf16>::value) {
      if (job.amx) {  // bb: Kᵀ (D × kBlockK) and V (kBlockK × D) in VNNI order, then P (kBlockQ × kBlockK)
        vnni_transposed(kp + j0 * p.k_stride[2], p.k_stride[2], nk, D, kBlockK, bb);
        vnni_rows(vp + j0 * p.v_stride[2], p.v_stride[2], nk, D, kBlockK, bb + D * kBlockK);
        tile_gemm(std::min(r1, nq) - r0, kBlockK, D, qp + r0 * p.q_stride[2], p.q_stride[2], bb, S + r0 * kBlockK,
                  kBlockK, false);  // raw dots, rows past nq are zeroed below
      }
    }
    if (!job.amx) {
      load_cols(kp + j0 * p.k_stride[2], p.k_stride[2], nk, D, kBlockK, Kt);
      vt = operand_rows(vp + j0 * p.v_stride[2], p.v_stride[2], nk, D, Dp, kBlockK, Vs, &ldv);
      gemm<T, VB>(Mr, kBlockK, D, Q + r0 * Dp, Dp, Kt, kBlockK, S + r0 * kBlockK, kBlockK, false);  // raw dots
    }
    std::fill(tmax, tmax + kBlockQ, neg_inf<T>());
    for (int64_t r = r0; r < r1; ++r) {
      T* s = S + r * kBlockK;
      if (r >= nq || !row_logits<T, VB>(p, s, i0 + r, j0, nk, slope, tmax[r])) std::fill(s, s + kBlockK, T(0));
    }
    for (int64_t r = 0; r < Mv; r += W) {  // online_softmax_rescale on W rows at once
      const V m_old = vload<V>(m + r), m_new = vload<V>(tmax + r) > m_old ? vload<V>(tmax + r) : m_old;
      vstore(alpha + r, m_new == ninf ? one : vexp(m_old - m_new));  // exp(−inf) = 0 for a row's first tile
      vstore(m + r, m_new);
    }
    for (int64_t r = r0; r < r1; ++r) {
      if (tmax[r] == neg_inf<T>()) continue;  // no visible key: P row is zero, the sum unchanged
      T* s = S + r * kBlockK;
      V vsum = vload<V>(lv + r * W) * alpha[r];
      for (int64_t c = 0; c < kBlockK; c += W) {
        const V e = vexp(vload<V>(s + c) - m[r]);
        vstore(s + c, e);
        vsum += e;
      }
      vstore(lv + r * W, vsum);
    }
    // O = alpha · O + P · V
    if constexpr (std::is_same<in_t, bf16>::value) {
      if (job.amx) {
        for (int64_t r = r0; r < r1; ++r)
          for (int64_t d = 0; d < Dp; d += W) vstore(O + r * Dp + d, vload<V>(O + r * Dp + d) * alpha[r]);
        bf16* P = bb + 2 * D * kBlockK;
        to_bf16_rows(S + r0 * kBlockK, kBlockK, Mr, kBlockK, P, kBlockK);
        tile_gemm(Mr, D, kBlockK, P, kBlockK, bb + D * kBlockK, O + r0 * Dp, Dp, true);
      }
    }
    if (!job.amx) gemm<T, VB>(Mr, Dp, kBlockK, S + r0 * kBlockK, kBlockK, vt, ldv, O + r0 * Dp, Dp, true, alpha + r0);
  }
  in_t* op = job.o + b * p.o_stride[0] + h * p.o_stride[1] + t0 * p.o_stride[2];
  T* lsep = job.lse_out + bh * p.q_len + t0;
  for (int64_t r = 0; r < nq; ++r) {
    const T l = hsum(vload<V>(lv + r * W));
    const T inv = l > T(0) ? T(1) / l : std::numeric_limits<T>::quiet_NaN();
    for (int64_t d = 0; d < D; ++d) op[r * p.o_stride[2] + d] = static_cast<in_t>(O[r * Dp + d] * inv);
    lsep[r] = softmax_lse(m[r], l);
  }
}

// Σ_d dout·out for every query row of one tile (the D_i term of the backward).
template <typename in_t, typename T>
DROPE_INLINE void rowdot_tile(const Job<in_t, T>& job, int64_t bh, int64_t qb) {
  const auto& p = job.p;
  const int64_t t0 = qb * kBlockQ, nq = std::min(kBlockQ, p.q_len - t0);
  const in_t* o = job.out + (bh * p.q_len + t0) * job.D;
  const in_t* g = job.dout + (bh * p.q_len + t0) * job.D;
  for (int64_t r = 0; r < nq; ++r) {
    T acc = 0;
    for (int64_t d = 0; d < job.D; ++d) acc += static_cast<T>(o[r * job.D + d]) * static_cast<T>(g[r * job.D + d]);
    job.rowdot_out[bh * p.q_len + t0 + r] = acc;
  }
}

// Probabilities P and logit gradients dS of one (query tile, key tile) pair, in place of the raw dots S and
// dP = dout·vᵀ; rows and keys outside the band get zeros. Logits are formed on the fly (vec_logits); vectors
// wholly outside a row's visible keys are only zeroed.
template <typename T, int VB>
DROPE_INLINE void probs_and_grads(const AttnParams<T>& p, T* S, T* dP, int64_t Mq, int64_t nq, int64_t t0, int64_t j0,
                                  int64_t nk, T slope, const T* lse, const T* rowdot) {
  using V = typename Simd<T, VB>::V;
  constexpr int W = Simd<T, VB>::W;
  const V zero = V{}, ninf = V{} + neg_inf<T>();
  for (int64_t r = 0; r < Mq; ++r) {
    T* s = S + r * kBlockK;
    T* dp = dP + r * kBlockK;
    const int64_t i = query_pos(p, t0 + r);
    int64_t a, b;
    tile_keys(p, i, j0, nk, &a, &b);
    if (r >= nq || a >= b) {
      std::fill(s, s + kBlockK, T(0));
      std::fill(dp, dp + kBlockK, T(0));
      continue;
    }
    const T row_lse = lse[r], row_dot = rowdot[r], di = T(i - j0);
    for (int64_t c = 0; c < kBlockK; c += W) {
      if (c + W <= a || c >= b) {
        vstore(s + c, zero);
        vstore(dp + c, zero);
        continue;
      }
      const V x = vec_logits<T, VB>(p, vload<V>(s + c), c, a, b, slope, di);
      V prob = vexp(x - row_lse);  // softmax_prob on SIMD lanes
      V grad = softmax_grad(prob, vload<V>(dp + c), row_dot);
      if (c < a || c + W > b) {  // the masked keys of a straddling vector (−inf logits)
        const auto masked = x == ninf;
        prob = masked ? zero : prob;
        grad = masked ? zero : grad;
      }
      vstore(s + c, prob);
      vstore(dp + c, grad);
    }
  }
}

// One (query tile, key tile) pair of the backward on AMX (bf16 inputs): the raw dots and dP = dout · vᵀ from the
// packed Kᵀ and Vᵀ of the key tile (bb), probabilities and logit gradients in float32, then dV += Pᵀ · dout,
// dK += dSᵀ · q and (dq) dQ += dS · k with P and dS rounded to bf16.
template <typename T, int VB>
DROPE_INLINE void grad_pair_amx(const Job<bf16, T>& job, bf16* bb, const bf16* qp, const bf16* gp, T* S, T* dP,
                                int64_t nq, int64_t Mq, int64_t t0, int64_t j0, int64_t nk, T slope, int64_t bh, T* dK,
                                T* dV, T* dq) {
  const auto& p = job.p;
  const int64_t D = job.D, Dp = job.Dp, Kq = round_up(nq, 2);  // queries as the reduced dim, even
  bf16* Qv = bb + 3 * D * kBlockK;  // (Kq × D) VNNI
  bf16* Gv = Qv + kBlockQ * D;      // (Kq × D) VNNI
  bf16* Pt = Gv + kBlockQ * D;      // (kBlockK × Kq)
  bf16* dSt = Pt + kBlockK * kBlockQ;
  bf16* dSr = dSt + kBlockK * kBlockQ;  // (nq × kBlockK)
  tile_gemm(nq, kBlockK, D, qp, p.q_stride[2], bb, S, kBlockK, false);
  tile_gemm(nq, kBlockK, D, gp, D, bb + D * kBlockK, dP, kBlockK, false);
  probs_and_grads<T, VB>(p, S, dP, Mq, nq, t0, j0, nk, slope, job.lse + bh * p.q_len + t0,
                         job.rowdot + bh * p.q_len + t0);
  vnni_rows(qp, p.q_stride[2], nq, D, Kq, Qv);
  vnni_rows(gp, D, nq, D, Kq, Gv);
  to_bf16_transposed(S, kBlockK, nq, Kq, kBlockK, Pt);
  to_bf16_transposed(dP, kBlockK, nq, Kq, kBlockK, dSt);
  tile_gemm(nk, D, Kq, Pt, Kq, Gv, dV, Dp, true);   // dV += Pᵀ · dout
  tile_gemm(nk, D, Kq, dSt, Kq, Qv, dK, Dp, true);  // dK += dSᵀ · q
  if (!dq) return;
  to_bf16_rows(dP, kBlockK, nq, kBlockK, dSr, kBlockK);
  tile_gemm(nq, D, kBlockK, dSr, kBlockK, bb + 2 * D * kBlockK, dq, Dp, true);  // dQ += dS · k
}

// dK and dV of one key tile, accumulated over every query head of its KV group and every query tile that
// sees it. With dq_acc (G, T, Dp) also adds the tile's contribution to the group's dQ (unscaled).
template <typename in_t, typename T, int VB>
DROPE_INLINE void grad_kv_tile(const Job<in_t, T>& job, int64_t bhk, int64_t kb, T* buf, T* dq_acc, bf16* bb) {
  const auto& p = job.p;
  const int64_t D = job.D, Dp = job.Dp, b = bhk / p.kv_heads, hk = bhk % p.kv_heads, G = p.heads / p.kv_heads;
  const int64_t j0 = kb * kBlockK, nk = std::min(kBlockK, p.kv_len - j0), Mk = round_up(nk, kRows);
  T* Kt = buf;                     // (D, kBlockK)
  T* Vt = Kt + D * kBlockK;        // (D, kBlockK)
  T* dK = Vt + D * kBlockK;        // (kBlockK, Dp)
  T* dV = dK + kBlockK * Dp;       // (kBlockK, Dp)
  T* Q = dV + kBlockK * Dp;        // (kBlockQ, Dp)
  T* dO = Q + kBlockQ * Dp;        // (kBlockQ, Dp)
  T* S = dO + kBlockQ * Dp;        // (kBlockQ, kBlockK)
  T* dP = S + kBlockQ * kBlockK;   // (kBlockQ, kBlockK)
  T* Ks = dP + kBlockQ * kBlockK;  // (kBlockK, Dp), only with dq_acc
  const in_t* kp = job.k + b * p.k_stride[0] + hk * p.k_stride[1] + j0 * p.k_stride[2];
  const in_t* vp = job.v + b * p.v_stride[0] + hk * p.v_stride[1] + j0 * p.v_stride[2];
  int64_t ldk = Dp;  // key rows for dQ
  const T* ks = Ks;
  if constexpr (std::is_same<in_t, bf16>::value) {
    if (job.amx) {  // bb: Kᵀ, Vᵀ (D × kBlockK) and K (kBlockK × D) in VNNI order, then the per-query-tile operands
      vnni_transposed(kp, p.k_stride[2], nk, D, kBlockK, bb);
      vnni_transposed(vp, p.v_stride[2], nk, D, kBlockK, bb + D * kBlockK);
      vnni_rows(kp, p.k_stride[2], nk, D, kBlockK, bb + 2 * D * kBlockK);
    }
  }
  if (!job.amx) {
    load_cols(kp, p.k_stride[2], nk, D, kBlockK, Kt);
    if (dq_acc) ks = operand_rows(kp, p.k_stride[2], nk, D, Dp, Mk, Ks, &ldk);
    load_cols(vp, p.v_stride[2], nk, D, kBlockK, Vt);
  }
  std::fill(dK, dK + 2 * kBlockK * Dp, T(0));
  int64_t t_lo, t_hi;
  query_band(p, j0, j0 + nk, &t_lo, &t_hi);
  for (int64_t h = hk * G; h < (hk + 1) * G; ++h) {
    const T slope = p.alibi_slopes ? p.alibi_slopes[h] : T(0);
    const int64_t bh = b * p.heads + h;
    for (int64_t t0 = t_lo; t0 < t_hi; t0 += kBlockQ) {
      const int64_t nq = std::min(kBlockQ, t_hi - t0), Mq = round_up(nq, kRows);
      const in_t* qp = job.q + b * p.q_stride[0] + h * p.q_stride[1] + t0 * p.q_stride[2];
      const in_t* gp = job.dout + (bh * p.q_len + t0) * D;
      T* dq = dq_acc ? dq_acc + ((h - hk * G) * p.q_len + t0) * Dp : nullptr;
      if constexpr (std::is_same<in_t, bf16>::value) {
        if (job.amx) {
          grad_pair_amx<T, VB>(job, bb, qp, gp, S, dP, nq, Mq, t0, j0, nk, slope, bh, dK, dV, dq);
          continue;
        }
      }
      int64_t ldq, ldg;  // query and dout rows
      const T* q = operand_rows(qp, p.q_stride[2], nq, D, Dp, Mq, Q, &ldq);
      const T* g = operand_rows(gp, D, nq, D, Dp, Mq, dO, &ldg);
      gemm<T, VB>(Mq, kBlockK, D, q, ldq, Kt, kBlockK, S, kBlockK, false);    // raw dots
      gemm<T, VB>(Mq, kBlockK, D, g, ldg, Vt, kBlockK, dP, kBlockK, false);  // dP = dout · vᵀ
      probs_and_grads<T, VB>(p, S, dP, Mq, nq, t0, j0, nk, slope, job.lse + bh * p.q_len + t0,
                             job.rowdot + bh * p.q_len + t0);
      gemm<T, VB, true>(Mk, Dp, Mq, S, kBlockK, g, ldg, dV, Dp, true);   // dV += Pᵀ · dout
      gemm<T, VB, true>(Mk, Dp, Mq, dP, kBlockK, q, ldq, dK, Dp, true);  // dK += dSᵀ · q
      if (dq) gemm<T, VB>(Mq, Dp, Mk, dP, kBlockK, ks, ldk, dq, Dp, true);
    }
  }
  in_t* dkp = job.dk + (bhk * p.kv_len + j0) * D;
  in_t* dvp = job.dv + (bhk * p.kv_len + j0) * D;
  for (int64_t r = 0; r < nk; ++r)
    for (int64_t d = 0; d < D; ++d) {
      dkp[r * D + d] = static_cast<in_t>(dK[r * Dp + d] * p.scale);
      dvp[r * D + d] = static_cast<in_t>(dV[r * Dp + d]);
    }
}

// dQ, dK and dV of one (batch, KV head) pair in one sweep over its key tiles (no recomputation of the
// logits for dQ; needs enough pairs to keep every thread busy).
template <typename in_t, typename T, int VB>
DROPE_INLINE void grad_pair(const Job<in_t, T>& job, int64_t bhk, T* buf, bf16* bb) {
  const auto& p = job.p;
  const int64_t D = job.D, Dp = job.Dp, G = p.heads / p.kv_heads;
  T* dq_acc = buf + scratch_kv(job);  // (G, T, Dp) and kRows rows of padding
  std::fill(dq_acc, dq_acc + (G * p.q_len + kRows) * Dp, T(0));
  for (int64_t kb = 0; kb * kBlockK < p.kv_len; ++kb) grad_kv_tile<in_t, T, VB>(job, bhk, kb, buf, dq_acc, bb);
  in_t* dqp = job.dq + bhk * G * p.q_len * D;  // heads of one group are consecutive
  for (int64_t r = 0; r < G * p.q_len; ++r)
    for (int64_t d = 0; d < D; ++d) dqp[r * D + d] = static_cast<in_t>(dq_acc[r * Dp + d] * p.scale);
}

// dQ of one query tile over the key tiles of its band.
template <typename in_t, typename T, int VB>
DROPE_INLINE void grad_q_tile(const Job<in_t, T>& job, int64_t bh, int64_t qb, T* buf) {
  const auto& p = job.p;
  const int64_t D = job.D, Dp = job.Dp, b = bh / p.heads, h = bh % p.heads, hk = kv_head_of(p, h);
  const int64_t t0 = qb * kBlockQ, nq = std::min(kBlockQ, p.q_len - t0), Mq = round_up(nq, kRows);
  const T slope = p.alibi_slopes ? p.alibi_slopes[h] : T(0);
  T* Q = buf;                     // (kBlockQ, Dp)
  T* dO = Q + kBlockQ * Dp;       // (kBlockQ, Dp)
  T* dQ = dO + kBlockQ * Dp;      // (kBlockQ, Dp)
  T* Kt = dQ + kBlockQ * Dp;      // (D, kBlockK)
  T* Vt = Kt + D * kBlockK;       // (D, kBlockK)
  T* Ks = Vt + D * kBlockK;       // (kBlockK, Dp)
  T* S = Ks + kBlockK * Dp;       // (kBlockQ, kBlockK)
  T* dP = S + kBlockQ * kBlockK;  // (kBlockQ, kBlockK)
  const in_t* kp = job.k + b * p.k_stride[0] + hk * p.k_stride[1];
  const in_t* vp = job.v + b * p.v_stride[0] + hk * p.v_stride[1];
  load_rows(job.q + b * p.q_stride[0] + h * p.q_stride[1] + t0 * p.q_stride[2], p.q_stride[2], nq, D, kBlockQ, Dp, Q);
  load_rows(job.dout + (bh * p.q_len + t0) * D, D, nq, D, kBlockQ, Dp, dO);
  std::fill(dQ, dQ + kBlockQ * Dp, T(0));
  int64_t lo, hi;
  key_band(p, query_pos(p, t0), query_pos(p, t0 + nq), &lo, &hi);
  for (int64_t j0 = lo; j0 < hi; j0 += kBlockK) {
    const int64_t nk = std::min(kBlockK, hi - j0), Mk = round_up(nk, kRows);
    load_cols(kp + j0 * p.k_stride[2], p.k_stride[2], nk, D, kBlockK, Kt);
    load_cols(vp + j0 * p.v_stride[2], p.v_stride[2], nk, D, kBlockK, Vt);
    load_rows(kp + j0 * p.k_stride[2], p.k_stride[2], nk, D, kBlockK, Dp, Ks);
    gemm<T, VB>(Mq, kBlockK, D, Q, Dp, Kt, kBlockK, S, kBlockK, false);
    gemm<T, VB>(Mq, kBlockK, D, dO, Dp, Vt, kBlockK, dP, kBlockK, false);
    probs_and_grads<T, VB>(p, S, dP, Mq, nq, t0, j0, nk, slope, job.lse + bh * p.q_len + t0,
                           job.rowdot + bh * p.q_len + t0);
    gemm<T, VB>(Mq, Dp, Mk, dP, kBlockK, Ks, Dp, dQ, Dp, true);  // dQ += dS · k
  }
  in_t* dqp = job.dq + (bh * p.q_len + t0) * D;
  for (int64_t r = 0; r < nq; ++r)
    for (int64_t d = 0; d < D; ++d) dqp[r * D + d] = static_cast<in_t>(dQ[r * Dp + d] * p.scale);
}

// Runs work items [begin, end) of the job on the calling thread.
template <typename in_t, typename T, int VB>
DROPE_INLINE void run_items(const Job<in_t, T>& job, int64_t begin, int64_t end) {
  std::vector<T> buf(scratch_size(job));
  // The AMX operands: three packed (D × kBlockK) key-tile operands, two (kBlockQ × D) query-tile ones and three
  // (kBlockK × kBlockQ) probability / gradient tiles.
  std::vector<bf16> bb(job.amx ? 3 * job.D * kBlockK + 2 * kBlockQ * job.D + 3 * kBlockK * kBlockQ : 0);
  for (int64_t idx = begin; idx < end; ++idx) {
    const int64_t pair = idx / job.blocks, blk = zigzag(idx % job.blocks, job.blocks);
    switch (job.kind) {
      case Job<in_t, T>::kForward: forward_tile<in_t, T, VB>(job, pair, blk, buf.data(), bb.data()); break;
      case Job<in_t, T>::kRowDot: rowdot_tile(job, pair, blk); break;
      case Job<in_t, T>::kGradKV:
        grad_kv_tile<in_t, T, VB>(job, pair, blk, buf.data(), static_cast<T*>(nullptr), bb.data());
        break;
      case Job<in_t, T>::kGradQ: grad_q_tile<in_t, T, VB>(job, pair, blk, buf.data()); break;
      case Job<in_t, T>::kGradKVQ: grad_pair<in_t, T, VB>(job, pair, buf.data(), bb.data()); break;
    }
  }
  if (job.amx) at::native::cpublas::brgemm_release();  // this thread's tile configuration
}

#ifdef DROPE_X86_DISPATCH
template <typename in_t, typename T>
__attribute__((target("avx512f,avx512dq,avx512bw,avx512vl,avx2,fma"))) void run_items_avx512(const Job<in_t, T>& job,
                                                                                             int64_t begin,
                                                                                             int64_t end) {
  run_items<in_t, T, kVecAvx512>(job, begin, end);
}

template <typename in_t, typename T>
__attribute__((target("avx2,fma"))) void run_items_avx2(const Job<in_t, T>& job, int64_t begin, int64_t end) {
  run_items<in_t, T, kVecAvx2>(job, begin, end);
}

#endif

template <typename in_t, typename T>
void run_items_baseline(const Job<in_t, T>& job, int64_t begin, int64_t end) {
  run_items<in_t, T, kVecBase>(job, begin, end);
}

// Calls f(i, i + 1) for every i in [0, n) from all of LibTorch's intra-op threads.
void parallel_items(int64_t n, const std::function<void(int64_t, int64_t)>& f) {
  // Items differ in cost (causal rows, window bands), so threads take them one at a time from a shared
  // counter rather than in fixed chunks. The threads are LibTorch's own OpenMP team (this file is built
  // with -fopenmp): a second pool would fight torch's spinning OpenMP workers for the same cores.
  if (n <= 1 || at::get_num_threads() <= 1 || at::in_parallel_region()) return f(0, n);
#ifdef _OPENMP
  std::atomic<int64_t> next{0};
  std::atomic_flag failed = ATOMIC_FLAG_INIT;
  std::exception_ptr error;
#pragma omp parallel
  {
    at::internal::ThreadIdGuard tid_guard(omp_get_thread_num());
    for (int64_t i; (i = next.fetch_add(1)) < n;) {
      try {
        f(i, i + 1);
      } catch (...) {
        if (!failed.test_and_set()) error = std::current_exception();
        next.store(n);
      }
    }
  }
  if (error) std::rethrow_exception(error);
#else
  at::parallel_for(0, n, 1, f);
#endif
}

// Runs every work item of the job on the CPU's widest instruction set, spread over threads unless small.
template <typename in_t, typename T>
void launch(const Job<in_t, T>& job, int64_t pairs) {
  const Isa isa = cpu_isa();  // outside the parallel region: an invalid DROPE_CPU_ISA throws here
  const auto run = [&](int64_t begin, int64_t end) {
#ifdef DROPE_X86_DISPATCH
    switch (isa) {
      case Isa::kAvx512: return run_items_avx512(job, begin, end);
      case Isa::kAvx2: return run_items_avx2(job, begin, end);
      case Isa::kBase: break;
    }
#endif
    run_items_baseline(job, begin, end);
  };
  const int64_t items = pairs * job.blocks;
  if (job.serial) run(0, items);
  else parallel_items(items, run);
}

// Whether a call of these sizes is too small to be worth threads.
template <typename T>
bool too_small_for_threads(const AttnParams<T>& p) {
  return p.batch * p.heads * p.q_len * p.kv_len * p.head_dim < kMinParallelWork;
}

template <typename in_t, typename T>
Job<in_t, T> make_job(const AttnParams<T>& p) {
  Job<in_t, T> job;
  job.p = p;
  job.serial = too_small_for_threads(p);
  job.D = p.head_dim;
  job.Dp = round_up(job.D, kMaxVecBytes / int64_t(sizeof(T)));
  job.amx = std::is_same<in_t, bf16>::value && job.D % 2 == 0 && amx_tiles();
  return job;
}

template <typename in_t, typename T>
void forward_impl(const AttnForwardArgs<T>& a) {
  auto job = make_job<in_t, T>(a.p);
  job.kind = Job<in_t, T>::kForward;
  job.blocks = (job.p.q_len + kBlockQ - 1) / kBlockQ;
  job.q = static_cast<const in_t*>(a.q);
  job.k = static_cast<const in_t*>(a.k);
  job.v = static_cast<const in_t*>(a.v);
  job.o = static_cast<in_t*>(a.out);
  job.lse_out = a.lse;
  launch(job, job.p.batch * job.p.heads);
}

template <typename in_t, typename T>
void backward_impl(const AttnBackwardArgs<T>& a) {
  auto job = make_job<in_t, T>(a.p);
  job.q = static_cast<const in_t*>(a.q);
  job.k = static_cast<const in_t*>(a.k);
  job.v = static_cast<const in_t*>(a.v);
  job.out = static_cast<const in_t*>(a.out);
  job.dout = static_cast<const in_t*>(a.dout);
  job.lse = a.lse;
  job.rowdot = job.rowdot_out = a.rowdot;
  job.dq = static_cast<in_t*>(a.dq);
  job.dk = static_cast<in_t*>(a.dk);
  job.dv = static_cast<in_t*>(a.dv);
  const int64_t q_blocks = (job.p.q_len + kBlockQ - 1) / kBlockQ, pairs = job.p.batch * job.p.heads;
  job.kind = Job<in_t, T>::kRowDot;
  job.blocks = q_blocks;
  launch(job, pairs);
  const int64_t kv_pairs = job.p.batch * job.p.kv_heads, threads = at::get_num_threads();
  BackwardSchedule schedule = a.schedule;
  if (schedule == BackwardSchedule::kAuto)
    schedule = job.serial || kv_pairs % threads == 0 || kv_pairs >= 4 * threads ? BackwardSchedule::kPerKVHead
                                                                                : BackwardSchedule::kTwoPass;
  if (schedule == BackwardSchedule::kPerKVHead) {
    job.kind = Job<in_t, T>::kGradKVQ;
    job.blocks = 1;
    launch(job, kv_pairs);
    return;
  }
  job.kind = Job<in_t, T>::kGradKV;
  job.blocks = (job.p.kv_len + kBlockK - 1) / kBlockK;
  launch(job, kv_pairs);
  job.kind = Job<in_t, T>::kGradQ;
  job.blocks = q_blocks;
  launch(job, pairs);
}

[[noreturn]] void bad_dtype(const char* who) {
  throw std::invalid_argument(std::string(who) + ": float32/bfloat16 inputs take float accumulation, "
                                                 "float64 inputs double accumulation");
}

}  // namespace

void attention_forward_cpu(const AttnForwardArgs<float>& a) {
  if (a.dtype == AttnDType::kFloat32) return forward_impl<float, float>(a);
  if (a.dtype == AttnDType::kBFloat16) return forward_impl<c10::BFloat16, float>(a);
  bad_dtype("attention_forward_cpu");
}

void attention_forward_cpu(const AttnForwardArgs<double>& a) {
  if (a.dtype != AttnDType::kFloat64) bad_dtype("attention_forward_cpu");
  forward_impl<double, double>(a);
}

void attention_backward_cpu(const AttnBackwardArgs<float>& a) {
  if (a.dtype == AttnDType::kFloat32) return backward_impl<float, float>(a);
  if (a.dtype == AttnDType::kBFloat16) return backward_impl<c10::BFloat16, float>(a);
  bad_dtype("attention_backward_cpu");
}

void attention_backward_cpu(const AttnBackwardArgs<double>& a) {
  if (a.dtype != AttnDType::kFloat64) bad_dtype("attention_backward_cpu");
  backward_impl<double, double>(a);
}

}  // namespace drope::kernels
