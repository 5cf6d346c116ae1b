#include "drope/ops/attention.h"

#include <cmath>

#include "attention_internal.h"
#include "drope/ops/attention_registry.h"

namespace drope::ops {

namespace {

void check_shapes(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const AttentionParams& p) {
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, "attention: q, k, v must be 4-D (B, H, T, D), got ",
              q.sizes(), ", ", k.sizes(), ", ", v.sizes());
  TORCH_CHECK(k.sizes() == v.sizes(), "attention: k and v shapes differ: ", k.sizes(), " vs ", v.sizes());
  TORCH_CHECK(q.size(0) == k.size(0) && q.size(3) == k.size(3), "attention: batch/head-dim mismatch: q ", q.sizes(),
              ", k ", k.sizes());
  TORCH_CHECK(k.size(1) > 0 && q.size(1) % k.size(1) == 0, "attention: query heads (", q.size(1),
              ") must be a multiple of kv heads (", k.size(1), ")");
  const int64_t T = q.size(2), S = k.size(2);
  const int64_t off = p.q_offset < 0 ? S - T : p.q_offset;
  TORCH_CHECK(off >= 0, "attention: more queries (", T, ") than keys (", S, ") without a query offset");
  TORCH_CHECK(p.window >= 0, "attention: window must be >= 0");
  if (p.alibi_slopes.defined())
    TORCH_CHECK(p.alibi_slopes.dim() == 1 && p.alibi_slopes.size(0) == q.size(1),
                "attention: alibi_slopes must have one slope per query head");
  if (p.key_start.defined())
    TORCH_CHECK(p.key_start.dim() == 1 && p.key_start.size(0) == q.size(0) && p.key_start.scalar_type() == at::kLong,
                "attention: key_start must be int64 with one entry per batch row");
}

// Additive (T, S) bias for head-independent masking; −inf where masked.
at::Tensor mask_bias(int64_t T, int64_t S, int64_t off, const AttentionParams& p, const at::TensorOptions& opt) {
  auto qpos = at::arange(off, off + T, opt.dtype(at::kLong)).unsqueeze(1);  // (T, 1)
  auto kpos = at::arange(0, S, opt.dtype(at::kLong)).unsqueeze(0);          // (1, S)
  auto allowed = at::ones({T, S}, opt.dtype(at::kBool));
  if (p.causal) allowed = allowed & (kpos <= qpos);
  if (p.window > 0) allowed = allowed & (kpos > qpos - p.window);
  return at::zeros({T, S}, opt).masked_fill(allowed.logical_not(), -std::numeric_limits<double>::infinity());
}

// Scaled, biased, masked logits (B, H, T, S) of a validated call.
at::Tensor logits(const at::Tensor& q, const at::Tensor& k, const AttentionParams& p) {
  const int64_t H = q.size(1), Hkv = k.size(1), T = q.size(2), S = k.size(2), D = q.size(3);
  const auto cdt = q.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  auto qc = q.to(cdt);
  auto kc = k.to(cdt);
  const double scale = p.scale > 0 ? p.scale : 1.0 / std::sqrt(double(D));
  // GQA without copying keys: the G = H / H_kv query heads of kv head j are heads jG..jG+G−1, so q viewed as
  // (B, H_kv, G·T, D) meets each kv head once: (B, H_kv, G·T, S) = (B, H, T, S).
  const int64_t B = q.size(0);
  auto s = at::matmul(qc.reshape({B, Hkv, (H / Hkv) * T, D}), kc.transpose(-2, -1)).view({B, H, T, S}) * scale;
  const int64_t off = p.q_offset < 0 ? S - T : p.q_offset;
  auto opt = qc.options();
  if (p.alibi_slopes.defined()) {
    auto qpos = at::arange(off, off + T, opt).unsqueeze(1);
    auto kpos = at::arange(0, S, opt).unsqueeze(0);
    auto dist = (qpos - kpos);                                               // (T, S) = i − j
    s = s - p.alibi_slopes.to(opt).view({1, H, 1, 1}) * dist.view({1, 1, T, S});
  }
  s = s + mask_bias(T, S, off, p, opt);
  if (p.key_start.defined()) {  // left padding: keys before each row's first real token are invisible
    auto kpos = at::arange(0, S, opt.dtype(at::kLong)).view({1, 1, 1, S});
    auto pad = kpos < p.key_start.to(kpos.device()).view({-1, 1, 1, 1});  // (B, 1, 1, S)
    s = s.masked_fill(pad, -std::numeric_limits<double>::infinity());
  }
  return s;
}

}  // namespace

AttentionOutput detail::reference_attention_unchecked(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                                      const AttentionParams& p) {
  const int64_t H = q.size(1), Hkv = k.size(1);
  auto s = logits(q, k, p);                          // (B, H, T, S)
  auto lse = at::logsumexp(s, -1);                   // (B, H, T)
  auto probs = at::exp(s - lse.unsqueeze(-1));       // fully masked rows give NaN, as softmax would
  auto vc = v.to(s.scalar_type());
  const int64_t B = q.size(0), T = q.size(2), S = k.size(2), D = q.size(3);
  auto out = at::matmul(probs.reshape({B, Hkv, (H / Hkv) * T, S}), vc).view({B, H, T, D}).to(q.scalar_type());
  return {out, lse.to(at::kFloat)};
}

AttentionOutput reference_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                    const AttentionParams& p) {
  check_shapes(q, k, v, p);
  return detail::reference_attention_unchecked(q, k, v, p);
}

at::Tensor reference_attention_probs(const at::Tensor& q, const at::Tensor& k, const AttentionParams& p) {
  check_shapes(q, k, k, p);
  return at::softmax(logits(q, k, p), -1);
}

void check_attention_shapes(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const AttentionParams& p) {
  check_shapes(q, k, v, p);
}

at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const AttentionParams& p) {
  check_shapes(q, k, v, p);
  const auto plan = detail::plan_call(q, k, v, p, detail::needs_grad(q, k, v), /*reference_force=*/true);
  return run_attention(plan, q, k, v, p);
}

std::vector<double> alibi_slopes(int64_t n) {
  TORCH_CHECK(n > 0, "alibi_slopes: need at least one head");
  auto pow2 = [](int64_t m) {
    std::vector<double> s(m);
    const double start = std::pow(2.0, -8.0 / double(m));
    for (int64_t k = 0; k < m; ++k) s[k] = std::pow(start, double(k + 1));
    return s;
  };
  int64_t c = 1;
  while (c * 2 <= n) c *= 2;
  auto slopes = pow2(c);
  if (c < n) {
    auto extra = pow2(2 * c);
    for (int64_t i = 0; i < n - c; ++i) slopes.push_back(extra[2 * i]);
  }
  return slopes;
}

}  // namespace drope::ops
