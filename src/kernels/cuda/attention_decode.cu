// Split-KV decode forward of the fused attention op on CUDA, for few queries (T = 1) against long caches.
//   1. split: one CTA per (query row, key chunk). The row's visible keys [visible_lo, visible_hi) are cut into
//      num_splits chunks; each of the 4 warps folds every 4th key of the chunk into its own online-softmax
//      state (lanes own head-dim columns), the warps are merged, and the CTA writes a partial
//      (max m, sum l, accumulator acc).
//   2. combine: one CTA per query row folds the partials of its chunks and writes out and lse.
#include "drope/kernels/attention_cuda.h"

namespace drope::kernels::cuda {

namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;

// Folds a partial state (m_s, l_s, acc_s) into (m, l, acc) with the shared online-softmax update; a partial
// that saw no key (m_s = −inf) is skipped.
__device__ __forceinline__ float fold_weight(float* m, float* l, float m_s, float l_s, float* alpha) {
  *alpha = online_softmax_rescale(m, m_s);
  const float w = exp_of(m_s - *m);
  *l = *l * *alpha + l_s * w;
  return w;
}

template <typename T, int D>
__global__ void __launch_bounds__(kThreads)
    attention_decode_split_kernel(const AttnParams<float> p, const T* __restrict__ q, const T* __restrict__ k,
                                  const T* __restrict__ v, int num_splits, float* __restrict__ part_m,
                                  float* __restrict__ part_l, float* __restrict__ part_acc) {
  using namespace dev;
  constexpr int DPL = D / 32;
  __shared__ float w_m[kWarps], w_l[kWarps];
  __shared__ float w_acc[kWarps][D];

  const int64_t row = blockIdx.x;  // (b, h, t)
  const int split = blockIdx.y;
  const int64_t bh = row / p.q_len, t = row % p.q_len;
  const int64_t b = bh / p.heads, h = bh % p.heads, hk = kv_head_of(p, h);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const float slope = p.alibi_slopes ? p.alibi_slopes[h] : 0.f;

  const int64_t i = query_pos(p, t);
  const int64_t lo = visible_lo(p, i), hi = visible_hi(p, i);
  const int64_t n = hi > lo ? hi - lo : 0;
  const int64_t chunk = (n + num_splits - 1) / num_splits;
  const int64_t c0 = lo + split * chunk;
  const int64_t c1 = c0 + chunk < hi ? c0 + chunk : hi;

  const T* qp = q + b * p.q_stride[0] + h * p.q_stride[1] + t * p.q_stride[2];
  const T* kp = k + b * p.k_stride[0] + hk * p.k_stride[1];
  const T* vp = v + b * p.v_stride[0] + hk * p.v_stride[1];
  float qv[DPL], acc[DPL];
#pragma unroll
  for (int c = 0; c < DPL; ++c) {
    qv[c] = to_f(qp[lane + 32 * c]);
    acc[c] = 0.f;
  }
  float m = neg_inf<float>(), l = 0.f;
  for (int64_t j = c0 + warp; j < c1; j += kWarps) {
    const T* kr = kp + j * p.k_stride[2];
    float dot = 0.f;
#pragma unroll
    for (int c = 0; c < DPL; ++c) dot = fmaf(qv[c], to_f(kr[lane + 32 * c]), dot);
    dot = warp_sum(dot);
    if (!key_visible(p, i, j)) continue;  // never taken: [lo, hi) is the visible range
    const float s = attn_logit(dot, p.scale, slope, float(i - j));
    const float alpha = online_softmax_rescale(&m, s);
    const float e = exp_of(s - m);
    l = l * alpha + e;
    const T* vr = vp + j * p.v_stride[2];
#pragma unroll
    for (int c = 0; c < DPL; ++c) acc[c] = fmaf(e, to_f(vr[lane + 32 * c]), acc[c] * alpha);
  }
  if (lane == 0) {
    w_m[warp] = m;
    w_l[warp] = l;
  }
#pragma unroll
  for (int c = 0; c < DPL; ++c) w_acc[warp][lane + 32 * c] = acc[c];
  __syncthreads();

  const int64_t slot = row * num_splits + split;
  for (int d = threadIdx.x; d < D; d += kThreads) {
    float M = neg_inf<float>(), L = 0.f, A = 0.f;
    for (int w = 0; w < kWarps; ++w) {
      if (w_m[w] == neg_inf<float>()) continue;
      float alpha;
      const float wt = fold_weight(&M, &L, w_m[w], w_l[w], &alpha);
      A = A * alpha + w_acc[w][d] * wt;
    }
    part_acc[slot * D + d] = A;
    if (d == 0) {
      part_m[slot] = M;
      part_l[slot] = L;
    }
  }
}

template <typename T, int D>
__global__ void __launch_bounds__(D)
    attention_decode_combine_kernel(int64_t D_unused, int num_splits, const float* __restrict__ part_m,
                                    const float* __restrict__ part_l, const float* __restrict__ part_acc,
                                    T* __restrict__ out, float* __restrict__ lse) {
  using namespace dev;
  (void)D_unused;
  const int64_t row = blockIdx.x;
  const int d = threadIdx.x;
  float M = neg_inf<float>(), L = 0.f, A = 0.f;
  for (int s = 0; s < num_splits; ++s) {
    const int64_t slot = row * num_splits + s;
    const float m_s = part_m[slot];
    if (m_s == neg_inf<float>()) continue;
    float alpha;
    const float wt = fold_weight(&M, &L, m_s, part_l[slot], &alpha);
    A = A * alpha + part_acc[slot * D + d] * wt;
  }
  const float inv = L > 0.f ? 1.f / L : __int_as_float(0x7fc00000);  // NaN: no visible key
  out[row * D + d] = from_f<T>(A * inv);
  if (d == 0) lse[row] = softmax_lse(M, L);
}

template <typename T, int D>
void launch_decode(const DecodeArgs& a, cudaStream_t stream) {
  const auto& p = a.p;
  const int64_t rows = p.batch * p.heads * p.q_len;
  const dim3 grid(unsigned(rows), unsigned(a.num_splits));
  attention_decode_split_kernel<T, D>
      <<<grid, kThreads, 0, stream>>>(p, static_cast<const T*>(a.q), static_cast<const T*>(a.k),
                                      static_cast<const T*>(a.v), a.num_splits, a.part_m, a.part_l, a.part_acc);
  DROPE_CUDA_CHECK_LAUNCH("attention_decode_split_kernel");
  attention_decode_combine_kernel<T, D><<<unsigned(rows), D, 0, stream>>>(D, a.num_splits, a.part_m, a.part_l,
                                                                          a.part_acc, static_cast<T*>(a.out), a.lse);
  DROPE_CUDA_CHECK_LAUNCH("attention_decode_combine_kernel");
}

template <typename T>
void dispatch_dim(const DecodeArgs& a, cudaStream_t stream) {
  switch (a.p.head_dim) {
    case 64: return launch_decode<T, 64>(a, stream);
    case 128: return launch_decode<T, 128>(a, stream);
    default:
      throw std::runtime_error("attention_decode_cuda: head dim " + std::to_string(a.p.head_dim) +
                               " not compiled (64 or 128)");
  }
}

}  // namespace

void attention_decode_cuda(const DecodeArgs& a, cudaStream_t stream) {
  if (a.p.batch * a.p.heads * a.p.q_len == 0) return;
  if (a.num_splits < 1 || a.num_splits > 65535)
    throw std::runtime_error("attention_decode_cuda: num_splits must be in [1, 65535], got " +
                             std::to_string(a.num_splits));
  switch (a.dtype) {
    case DType::kFloat16: return dispatch_dim<__half>(a, stream);
    case DType::kBFloat16: return dispatch_dim<__nv_bfloat16>(a, stream);
    default: throw std::runtime_error("attention_decode_cuda: float16 or bfloat16 inputs only");
  }
}

}  // namespace drope::kernels::cuda
