// The own_cuda backend: our CUDA kernels (include/drope/kernels/attention_cuda.h), which compute ALiBi and windows
// in the kernel: what they take (own_cuda_supports, attention_plan.h) and their Torch glue (declared in
// cuda_glue.h; only when the library has CUDA kernels, DROPE_WITH_CUDA): parameters, output and scratch
// allocation, launches on the current CUDA stream. The plan routes a CUDA call here only when no LibTorch
// kernel takes it without an oversized dense bias.
#include <tuple>

#include <ATen/ATen.h>

#include "attention_common.h"
#include "attention_internal.h"

#ifdef DROPE_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include "cuda_glue.h"
#include "drope/kernels/attention_cuda.h"

namespace drope::ops::cuda_glue {

namespace kc = drope::kernels::cuda;

int device_sm(const at::Tensor& q) {
  const auto* prop = at::cuda::getDeviceProperties(q.device().index());
  return prop->major * 10 + prop->minor;
}

// Whether the CUDA kernels handle these inputs: CUDA tensors on one device, one dtype among bfloat16 and
// float16, head dim 64 or 128.
bool supported(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  if (!q.defined() || !k.defined() || !v.defined()) return false;
  if (!q.is_cuda() || !k.is_cuda() || !v.is_cuda()) return false;
  if (k.device() != q.device() || v.device() != q.device()) return false;
  const auto dt = q.scalar_type();
  if (dt != at::kBFloat16 && dt != at::kHalf) return false;
  if (k.scalar_type() != dt || v.scalar_type() != dt) return false;
  return q.dim() == 4 && kc::cuda_head_dim_supported(q.size(3));
}

namespace {

struct Prepared {
  at::Tensor q, k, v, slopes;  // contiguous inputs and float32 device slopes (kept alive for the launch)
  kernels::AttnParams<float> p;
  kc::DType dtype = kc::DType::kBFloat16;
};

Prepared prepare(const at::Tensor& q_, const at::Tensor& k_, const at::Tensor& v_, const AttentionParams& a) {
  Prepared r;
  r.q = q_.contiguous();
  r.k = k_.contiguous();
  r.v = v_.contiguous();
  r.dtype = q_.scalar_type() == at::kHalf ? kc::DType::kFloat16 : kc::DType::kBFloat16;
  r.slopes = detail::kernel_slopes(a, q_.device(), at::kFloat);
  r.p = detail::kernel_params<float>(r.q, r.k, r.v, a, r.slopes.defined() ? r.slopes.data_ptr<float>() : nullptr);
  return r;
}

}  // namespace

// Forward: out (B, H, T, D) in the input dtype, lse (B, H, T) float32. T = 1 uses the split-KV decode kernel.
AttentionOutput forward(const at::Tensor& q_, const at::Tensor& k_, const at::Tensor& v_, const AttentionParams& a) {
  auto r = prepare(q_, k_, v_, a);
  const c10::cuda::CUDAGuard guard(r.q.device());
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream(r.q.device().index()).stream();
  auto out = at::empty_like(r.q);
  auto lse = at::empty({r.p.batch, r.p.heads, r.p.q_len}, r.q.options().dtype(at::kFloat));
  if (r.p.q_len == 1) {
    kc::DecodeArgs d;
    d.p = r.p;
    d.dtype = r.dtype;
    d.q = r.q.data_ptr();
    d.k = r.k.data_ptr();
    d.v = r.v.data_ptr();
    d.out = out.data_ptr();
    d.lse = lse.data_ptr<float>();
    d.num_splits = kc::decode_num_splits(r.p.kv_len);
    const int64_t rows = r.p.batch * r.p.heads * r.p.q_len;
    auto part_ml = at::empty({2, rows, d.num_splits}, r.q.options().dtype(at::kFloat));
    auto part_acc = at::empty({rows, d.num_splits, r.p.head_dim}, r.q.options().dtype(at::kFloat));
    d.part_m = part_ml[0].data_ptr<float>();
    d.part_l = part_ml[1].data_ptr<float>();
    d.part_acc = part_acc.data_ptr<float>();
    kc::attention_decode_cuda(d, stream);
    return {out, lse};
  }
  kc::ForwardArgs f;
  f.p = r.p;
  f.dtype = r.dtype;
  f.q = r.q.data_ptr();
  f.k = r.k.data_ptr();
  f.v = r.v.data_ptr();
  f.out = out.data_ptr();
  f.lse = lse.data_ptr<float>();
  kc::attention_forward_cuda(f, stream);
  return {out, lse};
}

// FlashAttention-2 backward from the forward's out and lse: dq, dk, dv in the input dtype.
std::tuple<at::Tensor, at::Tensor, at::Tensor> backward(const at::Tensor& q_, const at::Tensor& k_,
                                                        const at::Tensor& v_, const at::Tensor& out_,
                                                        const at::Tensor& lse_, const at::Tensor& dout_,
                                                        const AttentionParams& a) {
  auto r = prepare(q_, k_, v_, a);
  const c10::cuda::CUDAGuard guard(r.q.device());
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream(r.q.device().index()).stream();
  const auto dt = r.q.scalar_type();
  TORCH_CHECK(out_.sizes() == r.q.sizes() && dout_.sizes() == r.q.sizes(), "fused_attention backward (CUDA): out ",
              out_.sizes(), " and dout ", dout_.sizes(), " must match q ", r.q.sizes());
  const auto out = out_.to(r.q.device(), dt).contiguous();
  const auto dout = dout_.to(r.q.device(), dt).contiguous();
  const auto lse = lse_.to(r.q.device(), at::kFloat).contiguous();
  auto dq = at::empty_like(r.q);
  auto dk = at::empty_like(r.k);
  auto dv = at::empty_like(r.v);
  auto dq_accum = at::zeros(r.q.sizes(), r.q.options().dtype(at::kFloat));
  auto rowdot = at::empty({r.p.batch, r.p.heads, r.p.q_len}, r.q.options().dtype(at::kFloat));
  kc::BackwardArgs b;
  b.p = r.p;
  b.dtype = r.dtype;
  b.q = r.q.data_ptr();
  b.k = r.k.data_ptr();
  b.v = r.v.data_ptr();
  b.out = out.data_ptr();
  b.dout = dout.data_ptr();
  b.lse = lse.data_ptr<float>();
  b.rowdot = rowdot.data_ptr<float>();
  b.dq_accum = dq_accum.data_ptr<float>();
  b.dq = dq.data_ptr();
  b.dk = dk.data_ptr();
  b.dv = dv.data_ptr();
  kc::attention_backward_cuda(b, stream);
  return {dq, dk, dv};
}

}  // namespace drope::ops::cuda_glue

#endif  // DROPE_WITH_CUDA

namespace drope::ops {

bool own_cuda_supports(const AttnCall& c, const char** why) {
  const char* r = nullptr;
  if (!backends::half_type(c.dtype)) r = "our CUDA kernels take bfloat16/float16 only";
  else if (c.head_dim != 64 && c.head_dim != 128) r = "our CUDA kernels take head dim 64 or 128";
  else if (c.key_start) r = "our CUDA kernels have no left padding";
  else if (c.alibi_trainable) r = "trainable ALiBi slopes need the reference's autograd";
  if (why) *why = r ? r : "";
  return r == nullptr;
}

namespace backends {

namespace {

const char* own_refuses(const AttnCall& c, const AttnPlan&) {
  const char* why = "";
  return own_cuda_supports(c, &why) ? nullptr : why;
}

Forward own_forward(const AttnPlan&, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                    const AttentionParams& p, const BackendOps&) {
#ifdef DROPE_WITH_CUDA
  const auto r = cuda_glue::forward(q, k, v, p);
  Forward f;
  f.out = r.out;
  f.lse = r.lse;
  f.state = {r.out, r.lse, {}, {}, {}};
  return f;
#else
  (void)q, (void)k, (void)v, (void)p;
  TORCH_CHECK(false, "attention: this build has no CUDA kernels");
#endif
}

AttentionGrads own_backward(const AttnPlan&, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const AttentionParams& p, const NativeState& s, const at::Tensor& dout, const BackendOps&) {
#ifdef DROPE_WITH_CUDA
  auto [dq, dk, dv] = cuda_glue::backward(q, k, v, s.out, s.lse, dout, p);
  return {dq, dk, dv};
#else
  (void)q, (void)k, (void)v, (void)p, (void)s, (void)dout;
  TORCH_CHECK(false, "attention: this build has no CUDA kernels");
#endif
}

}  // namespace

const AttnBackendDef& own_cuda_backend() {
  static const AttnBackendDef d{"own_cuda",  "our CUDA kernels", kAttnCuda, own_refuses,
                                own_forward, own_backward,       nullptr,   nullptr};
  return d;
}

}  // namespace backends

}  // namespace drope::ops
