// FlashAttention-2 backward of the fused attention op on CUDA.
//   1. rowdot: D_i = Σ_d dO_id · O_id (one warp per query row).
//   2. dK/dV: one CTA per (batch, KV head, key tile of 64). It loops over every query head of the KV group
//      (so GQA accumulates inside the CTA, no atomics for dK/dV) and over the query tiles of 32 rows in the
//      key tile's band (query_band), recomputes P = exp(s − lse) and dS = P ∘ (dP − D_i), accumulates dV and
//      dK in registers, and adds scale · dS · K into a float32 dQ scratch with atomicAdd.
//   3. dQ: float32 scratch → the input dtype.
#include "drope/kernels/attention_cuda.h"

namespace drope::kernels::cuda {

namespace {

constexpr int kBQ = 32;  // query rows per inner tile
constexpr int kBK = 64;  // keys per CTA
constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kRowsPerWarp = kBQ / kWarps;  // phase A / C: 4 query rows per warp
constexpr int kKeysPerWarp = kBK / kWarps;  // phase B: 8 keys per warp

template <int D>
constexpr size_t bwd_smem_bytes() {
  // K, V (kBK × (D+1)), Q, dO (kBQ × (D+1)), P, dS (kBQ × kBK), lse, rowdot (kBQ), float32.
  return sizeof(float) * (2 * size_t(kBK) * (D + 1) + 2 * size_t(kBQ) * (D + 1) + 2 * size_t(kBQ) * kBK + 2 * kBQ);
}

template <typename T>
__global__ void __launch_bounds__(256)
    attention_bwd_rowdot_kernel(int64_t rows, int D, const T* __restrict__ out, const T* __restrict__ dout,
                                float* __restrict__ rowdot) {
  using namespace dev;
  const int64_t row = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  float acc = 0.f;
  for (int d = lane; d < D; d += 32) acc = fmaf(to_f(out[row * D + d]), to_f(dout[row * D + d]), acc);
  acc = warp_sum(acc);
  if (lane == 0) rowdot[row] = acc;
}

template <typename T>
__global__ void __launch_bounds__(256)
    attention_bwd_dq_convert_kernel(int64_t n, const float* __restrict__ src, T* __restrict__ dst) {
  using namespace dev;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = from_f<T>(src[i]);
}

// NOLINTBEGIN(readability-function-size): phases A-C of a key tile share its shared-memory tiles and the
// per-thread dK/dV accumulators held in registers; as separate device functions each would take all of them.
template <typename T, int D>
__global__ void __launch_bounds__(kThreads)
    attention_bwd_dkdv_kernel(const AttnParams<float> p, const T* __restrict__ q, const T* __restrict__ k,
                              const T* __restrict__ v, const T* __restrict__ dout, const float* __restrict__ lse,
                              const float* __restrict__ rowdot, float* __restrict__ dq_accum, T* __restrict__ dk,
                              T* __restrict__ dv) {
  using namespace dev;
  constexpr int DP = D + 1;
  constexpr int DPL = D / 32;
  extern __shared__ float smem[];
  float* Ks = smem;               // (kBK, DP)
  float* Vs = Ks + kBK * DP;      // (kBK, DP)
  float* Qs = Vs + kBK * DP;      // (kBQ, DP)
  float* dOs = Qs + kBQ * DP;     // (kBQ, DP)
  float* Ps = dOs + kBQ * DP;     // (kBQ, kBK)
  float* dSs = Ps + kBQ * kBK;    // (kBQ, kBK)
  float* lse_s = dSs + kBQ * kBK;  // (kBQ)
  float* rd_s = lse_s + kBQ;       // (kBQ)

  const int64_t bhk = blockIdx.x;
  const int64_t b = bhk / p.kv_heads, hk = bhk % p.kv_heads, G = p.heads / p.kv_heads;
  const int64_t j0 = int64_t(blockIdx.y) * kBK;
  const int nk = int(p.kv_len - j0 < kBK ? p.kv_len - j0 : kBK);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  const T* kp = k + b * p.k_stride[0] + hk * p.k_stride[1] + j0 * p.k_stride[2];
  const T* vp = v + b * p.v_stride[0] + hk * p.v_stride[1] + j0 * p.v_stride[2];
  for (int idx = threadIdx.x; idx < kBK * D; idx += kThreads) {
    const int r = idx / D, d = idx % D;
    const bool in = r < nk;
    Ks[r * DP + d] = in ? to_f(kp[r * p.k_stride[2] + d]) : 0.f;
    Vs[r * DP + d] = in ? to_f(vp[r * p.v_stride[2] + d]) : 0.f;
  }

  float dk_acc[kKeysPerWarp][DPL], dv_acc[kKeysPerWarp][DPL];
#pragma unroll
  for (int kk = 0; kk < kKeysPerWarp; ++kk)
#pragma unroll
    for (int c = 0; c < DPL; ++c) dk_acc[kk][c] = dv_acc[kk][c] = 0.f;

  int64_t t_lo, t_hi;
  query_band(p, j0, j0 + nk, &t_lo, &t_hi);
  const int64_t ja = j0 + lane, jb = j0 + lane + 32;
  for (int64_t h = hk * G; h < (hk + 1) * G; ++h) {
    const float slope = p.alibi_slopes ? p.alibi_slopes[h] : 0.f;
    const int64_t bh = b * p.heads + h;
    const T* qp = q + b * p.q_stride[0] + h * p.q_stride[1];
    for (int64_t t0 = t_lo; t0 < t_hi; t0 += kBQ) {
      const int nq = int(t_hi - t0 < kBQ ? t_hi - t0 : kBQ);
      __syncthreads();  // previous tile consumed (first time: K/V loaded)
      for (int idx = threadIdx.x; idx < kBQ * D; idx += kThreads) {
        const int r = idx / D, d = idx % D;
        const bool in = r < nq;
        Qs[r * DP + d] = in ? to_f(qp[(t0 + r) * p.q_stride[2] + d]) : 0.f;
        dOs[r * DP + d] = in ? to_f(dout[(bh * p.q_len + t0 + r) * D + d]) : 0.f;
      }
      if (threadIdx.x < kBQ) {
        const int r = threadIdx.x;
        lse_s[r] = r < nq ? lse[bh * p.q_len + t0 + r] : 0.f;
        rd_s[r] = r < nq ? rowdot[bh * p.q_len + t0 + r] : 0.f;
      }
      __syncthreads();

      // Phase A: P and dS of the (query tile, key tile) pair; warp rows, lane keys.
      const float* k0 = Ks + lane * DP;
      const float* k1 = Ks + (lane + 32) * DP;
      const float* v0 = Vs + lane * DP;
      const float* v1 = Vs + (lane + 32) * DP;
#pragma unroll
      for (int rr = 0; rr < kRowsPerWarp; ++rr) {
        const int r = warp * kRowsPerWarp + rr;
        const int64_t i = query_pos(p, t0 + r);
        const float* qr = Qs + r * DP;
        const float* gr = dOs + r * DP;
        float s0 = 0.f, s1 = 0.f, g0 = 0.f, g1 = 0.f;
#pragma unroll 16
        for (int d = 0; d < D; ++d) {
          const float qd = qr[d], gd = gr[d];
          s0 = fmaf(qd, k0[d], s0);
          s1 = fmaf(qd, k1[d], s1);
          g0 = fmaf(gd, v0[d], g0);
          g1 = fmaf(gd, v1[d], g1);
        }
        const bool va = r < nq && lane < nk && key_visible(p, i, ja);
        const bool vb = r < nq && lane + 32 < nk && key_visible(p, i, jb);
        const float p0 = va ? softmax_prob(attn_logit(s0, p.scale, slope, float(i - ja)), lse_s[r]) : 0.f;
        const float p1 = vb ? softmax_prob(attn_logit(s1, p.scale, slope, float(i - jb)), lse_s[r]) : 0.f;
        Ps[r * kBK + lane] = p0;
        Ps[r * kBK + lane + 32] = p1;
        dSs[r * kBK + lane] = va ? softmax_grad(p0, g0, rd_s[r]) : 0.f;
        dSs[r * kBK + lane + 32] = vb ? softmax_grad(p1, g1, rd_s[r]) : 0.f;
      }
      __syncthreads();

      // Phase B: dV += Pᵀ · dO, dK += dSᵀ · Q; warp keys, lane head-dim columns.
      for (int r = 0; r < nq; ++r) {
        float gv[DPL], qv[DPL];
#pragma unroll
        for (int c = 0; c < DPL; ++c) {
          gv[c] = dOs[r * DP + lane + 32 * c];
          qv[c] = Qs[r * DP + lane + 32 * c];
        }
#pragma unroll
        for (int kk = 0; kk < kKeysPerWarp; ++kk) {
          const int j = warp * kKeysPerWarp + kk;
          const float pj = Ps[r * kBK + j], dsj = dSs[r * kBK + j];
#pragma unroll
          for (int c = 0; c < DPL; ++c) {
            dv_acc[kk][c] = fmaf(pj, gv[c], dv_acc[kk][c]);
            dk_acc[kk][c] = fmaf(dsj, qv[c], dk_acc[kk][c]);
          }
        }
      }

      // Phase C: dQ += scale · dS · K (float32 scratch, atomics: other key tiles add to the same rows).
#pragma unroll
      for (int rr = 0; rr < kRowsPerWarp; ++rr) {
        const int r = warp * kRowsPerWarp + rr;
        if (r >= nq) break;
        float dqv[DPL];
#pragma unroll
        for (int c = 0; c < DPL; ++c) dqv[c] = 0.f;
        for (int j = 0; j < nk; ++j) {
          const float ds = dSs[r * kBK + j];
#pragma unroll
          for (int c = 0; c < DPL; ++c) dqv[c] = fmaf(ds, Ks[j * DP + lane + 32 * c], dqv[c]);
        }
        float* dqp = dq_accum + (bh * p.q_len + t0 + r) * D;
#pragma unroll
        for (int c = 0; c < DPL; ++c) atomicAdd(dqp + lane + 32 * c, dqv[c] * p.scale);
      }
    }
  }

#pragma unroll
  for (int kk = 0; kk < kKeysPerWarp; ++kk) {
    const int j = warp * kKeysPerWarp + kk;
    if (j >= nk) break;
    const int64_t row = bhk * p.kv_len + j0 + j;
#pragma unroll
    for (int c = 0; c < DPL; ++c) {
      dk[row * D + lane + 32 * c] = from_f<T>(dk_acc[kk][c] * p.scale);
      dv[row * D + lane + 32 * c] = from_f<T>(dv_acc[kk][c]);
    }
  }
}
// NOLINTEND(readability-function-size)

template <typename T, int D>
void launch_backward(const BackwardArgs& a, cudaStream_t stream) {
  const auto& p = a.p;
  const int64_t rows = p.batch * p.heads * p.q_len;
  if (rows > 0) {
    const unsigned blocks = unsigned((rows + 7) / 8);
    attention_bwd_rowdot_kernel<T>
        <<<blocks, 256, 0, stream>>>(rows, D, static_cast<const T*>(a.out), static_cast<const T*>(a.dout), a.rowdot);
    DROPE_CUDA_CHECK_LAUNCH("attention_bwd_rowdot_kernel");
  }
  if (p.batch * p.kv_heads > 0 && p.kv_len > 0) {
    constexpr size_t smem = bwd_smem_bytes<D>();
    DROPE_CUDA_CHECK(
        cudaFuncSetAttribute(attention_bwd_dkdv_kernel<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    const dim3 grid(unsigned(p.batch * p.kv_heads), unsigned((p.kv_len + kBK - 1) / kBK));
    attention_bwd_dkdv_kernel<T, D><<<grid, kThreads, smem, stream>>>(
        p, static_cast<const T*>(a.q), static_cast<const T*>(a.k), static_cast<const T*>(a.v),
        static_cast<const T*>(a.dout), a.lse, a.rowdot, a.dq_accum, static_cast<T*>(a.dk), static_cast<T*>(a.dv));
    DROPE_CUDA_CHECK_LAUNCH("attention_bwd_dkdv_kernel");
  }
  const int64_t n = rows * D;
  if (n > 0) {
    const int64_t want = (n + 255) / 256;
    const unsigned blocks = unsigned(want < 65536 ? want : 65536);
    attention_bwd_dq_convert_kernel<T><<<blocks, 256, 0, stream>>>(n, a.dq_accum, static_cast<T*>(a.dq));
    DROPE_CUDA_CHECK_LAUNCH("attention_bwd_dq_convert_kernel");
  }
}

template <typename T>
void dispatch_dim(const BackwardArgs& a, cudaStream_t stream) {
  switch (a.p.head_dim) {
    case 64: return launch_backward<T, 64>(a, stream);
    case 128: return launch_backward<T, 128>(a, stream);
    default:
      throw std::runtime_error("attention_backward_cuda: head dim " + std::to_string(a.p.head_dim) +
                               " not compiled (64 or 128)");
  }
}

}  // namespace

void attention_backward_cuda(const BackwardArgs& a, cudaStream_t stream) {
  if (a.p.kv_len > int64_t(kBK) * 65535)
    throw std::runtime_error("attention_backward_cuda: too many keys for one launch");
  switch (a.dtype) {
    case DType::kFloat16: return dispatch_dim<__half>(a, stream);
    case DType::kBFloat16: return dispatch_dim<__nv_bfloat16>(a, stream);
    default: throw std::runtime_error("attention_backward_cuda: float16 or bfloat16 inputs only");
  }
}

}  // namespace drope::kernels::cuda
