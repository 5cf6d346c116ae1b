// Forward of the fused attention op on CUDA: one CTA per (batch·head, query tile of 64 rows), looping over
// the key tiles of 64 of the tile's causal/window band only; online softmax with float32 accumulation.
// Four warps, each owning 16 query rows; lanes own keys (logits) and head-dim columns (output).
#include "drope/kernels/attention_cuda.h"

namespace drope::kernels::cuda {

namespace {

constexpr int kBQ = 64;            // query rows per CTA
constexpr int kBK = 64;            // keys per tile
constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kRowsPerWarp = kBQ / kWarps;  // 16

template <int D>
constexpr size_t fwd_smem_bytes() {
  // Q (kBQ × (D+1)), K (kBK × (D+1)), V (kBK × D), P (kBQ × kBK), all float32.
  return sizeof(float) * (size_t(kBQ) * (D + 1) + size_t(kBK) * (D + 1) + size_t(kBK) * D + size_t(kBQ) * kBK);
}

// NOLINTBEGIN(readability-function-size): the online softmax keeps each query row's running max, sum and
// output in registers across the key tiles; split into device functions, every stage would take all of them.
template <typename T, int D>
__global__ void __launch_bounds__(kThreads)
    attention_fwd_kernel(const AttnParams<float> p, const T* __restrict__ q, const T* __restrict__ k,
                         const T* __restrict__ v, T* __restrict__ out, float* __restrict__ lse) {
  using namespace dev;
  constexpr int DP = D + 1;   // padded row stride: lane-indexed rows hit distinct banks
  constexpr int DPL = D / 32;  // head-dim columns per lane
  extern __shared__ float smem[];
  float* Qs = smem;              // (kBQ, DP)
  float* Ks = Qs + kBQ * DP;     // (kBK, DP)
  float* Vs = Ks + kBK * DP;     // (kBK, D)
  float* Ps = Vs + kBK * D;      // (kBQ, kBK): probabilities of the current tile, per warp's rows

  const int64_t bh = blockIdx.x;
  const int64_t b = bh / p.heads, h = bh % p.heads, hk = kv_head_of(p, h);
  const int64_t n_qtiles = gridDim.y;
  const int64_t t0 = (n_qtiles - 1 - blockIdx.y) * kBQ;  // heavy (late, causal) tiles first
  const int64_t nq = p.q_len - t0 < kBQ ? p.q_len - t0 : kBQ;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const float slope = p.alibi_slopes ? p.alibi_slopes[h] : 0.f;

  const T* qp = q + b * p.q_stride[0] + h * p.q_stride[1] + t0 * p.q_stride[2];
  const T* kp = k + b * p.k_stride[0] + hk * p.k_stride[1];
  const T* vp = v + b * p.v_stride[0] + hk * p.v_stride[1];
  for (int idx = threadIdx.x; idx < kBQ * D; idx += kThreads) {
    const int r = idx / D, d = idx % D;
    Qs[r * DP + d] = r < nq ? to_f(qp[r * p.q_stride[2] + d]) : 0.f;
  }

  const int r0 = warp * kRowsPerWarp;
  int64_t wn = nq - r0;  // rows of this warp inside the query range
  wn = wn < 0 ? 0 : (wn > kRowsPerWarp ? kRowsPerWarp : wn);
  const int64_t i0 = query_pos(p, t0);

  float m[kRowsPerWarp], l[kRowsPerWarp], acc[kRowsPerWarp][DPL];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    m[r] = neg_inf<float>();
    l[r] = 0.f;
#pragma unroll
    for (int c = 0; c < DPL; ++c) acc[r][c] = 0.f;
  }

  int64_t lo, hi;
  key_band(p, i0, i0 + nq, &lo, &hi);
  float* P = Ps + r0 * kBK;
  for (int64_t j0 = lo; j0 < hi; j0 += kBK) {
    const int nk = int(hi - j0 < kBK ? hi - j0 : kBK);
    __syncthreads();  // the previous tile is consumed (first iteration: Q is loaded)
    for (int idx = threadIdx.x; idx < kBK * D; idx += kThreads) {
      const int r = idx / D, d = idx % D;
      const bool in = r < nk;
      Ks[r * DP + d] = in ? to_f(kp[(j0 + r) * p.k_stride[2] + d]) : 0.f;
      Vs[r * D + d] = in ? to_f(vp[(j0 + r) * p.v_stride[2] + d]) : 0.f;
    }
    __syncthreads();
    // Warp-uniform skip of a tile no row of this warp sees (shared band math).
    if (wn == 0 || tile_fully_masked(p, i0 + r0, i0 + r0 + wn, j0, j0 + nk)) continue;

    const float* k0 = Ks + lane * DP;
    const float* k1 = Ks + (lane + 32) * DP;
    const int64_t ja = j0 + lane, jb = j0 + lane + 32;
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const int64_t i = i0 + r0 + r;
      const float* qr = Qs + (r0 + r) * DP;
      float s0 = 0.f, s1 = 0.f;
#pragma unroll 16
      for (int d = 0; d < D; ++d) {
        const float qd = qr[d];
        s0 = fmaf(qd, k0[d], s0);
        s1 = fmaf(qd, k1[d], s1);
      }
      const bool row_ok = r < wn;
      const bool va = row_ok && lane < nk && key_visible(p, i, ja);
      const bool vb = row_ok && lane + 32 < nk && key_visible(p, i, jb);
      s0 = va ? attn_logit(s0, p.scale, slope, float(i - ja)) : neg_inf<float>();
      s1 = vb ? attn_logit(s1, p.scale, slope, float(i - jb)) : neg_inf<float>();
      const float tile_max = warp_max(fmaxf(s0, s1));
      const float alpha = online_softmax_rescale(&m[r], tile_max);
      const float e0 = va ? exp_of(s0 - m[r]) : 0.f;
      const float e1 = vb ? exp_of(s1 - m[r]) : 0.f;
      l[r] = l[r] * alpha + warp_sum(e0 + e1);
      P[r * kBK + lane] = e0;
      P[r * kBK + lane + 32] = e1;
#pragma unroll
      for (int c = 0; c < DPL; ++c) acc[r][c] *= alpha;
    }
    __syncwarp();
    for (int j = 0; j < nk; ++j) {  // acc += P · V
      float vv[DPL];
#pragma unroll
      for (int c = 0; c < DPL; ++c) vv[c] = Vs[j * D + lane + 32 * c];
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) {
        const float pr = P[r * kBK + j];
#pragma unroll
        for (int c = 0; c < DPL; ++c) acc[r][c] = fmaf(pr, vv[c], acc[r][c]);
      }
    }
    __syncwarp();
  }

#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    if (r >= wn) break;
    const int64_t row = bh * p.q_len + t0 + r0 + r;
    const float inv = l[r] > 0.f ? 1.f / l[r] : __int_as_float(0x7fc00000);  // NaN: no visible key
#pragma unroll
    for (int c = 0; c < DPL; ++c) out[row * D + lane + 32 * c] = from_f<T>(acc[r][c] * inv);
    if (lane == 0) lse[row] = softmax_lse(m[r], l[r]);
  }
}
// NOLINTEND(readability-function-size)

template <typename T, int D>
void launch_forward(const ForwardArgs& a, cudaStream_t stream) {
  const auto& p = a.p;
  constexpr size_t smem = fwd_smem_bytes<D>();
  DROPE_CUDA_CHECK(
      cudaFuncSetAttribute(attention_fwd_kernel<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  const dim3 grid(unsigned(p.batch * p.heads), unsigned((p.q_len + kBQ - 1) / kBQ));
  attention_fwd_kernel<T, D><<<grid, kThreads, smem, stream>>>(p, static_cast<const T*>(a.q),
                                                               static_cast<const T*>(a.k), static_cast<const T*>(a.v),
                                                               static_cast<T*>(a.out), a.lse);
  DROPE_CUDA_CHECK_LAUNCH("attention_fwd_kernel");
}

template <typename T>
void dispatch_dim(const ForwardArgs& a, cudaStream_t stream) {
  switch (a.p.head_dim) {
    case 64: return launch_forward<T, 64>(a, stream);
    case 128: return launch_forward<T, 128>(a, stream);
    default:
      throw std::runtime_error("attention_forward_cuda: head dim " + std::to_string(a.p.head_dim) +
                               " not compiled (64 or 128)");
  }
}

}  // namespace

void attention_forward_cuda(const ForwardArgs& a, cudaStream_t stream) {
  if (a.p.batch * a.p.heads == 0 || a.p.q_len == 0) return;
  if (a.p.q_len > int64_t(kBQ) * 65535)
    throw std::runtime_error("attention_forward_cuda: too many queries for one launch");
  switch (a.dtype) {
    case DType::kFloat16: return dispatch_dim<__half>(a, stream);
    case DType::kBFloat16: return dispatch_dim<__nv_bfloat16>(a, stream);
    default: throw std::runtime_error("attention_forward_cuda: float16 or bfloat16 inputs only");
  }
}

}  // namespace drope::kernels::cuda
