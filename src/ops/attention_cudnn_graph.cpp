// The cudnn_graph backend: cuDNN's SDPA node through cudnn-frontend graphs (src/ops/cudnn_graph.cpp, CUDA builds
// with the frontend's headers), its attributes (cudnn_graph_args, attention_plan.h) and its glue: layout
// (B, H, T, D), K/V read as they are (GQA native), keys sliced to key_len.
#include <cmath>
#include <string>

#include "attention_common.h"
#include "cudnn_graph.h"

namespace drope::ops {

std::vector<float> cudnn_alibi_slopes(int64_t heads) {
  // get_alibi_slope's float32 arithmetic, step by step.
  std::vector<float> s;
  if (heads <= 0) return s;
  const int n = 1 << static_cast<int>(std::log2(static_cast<double>(heads)));
  for (int i = 0; i < n; ++i) s.push_back(float(i + 1.0));
  for (int64_t i = 0; i < 2 * (heads - n); i += 2) s.push_back(static_cast<float>(i + 1) * 0.5f);
  for (float& e : s) {
    e *= -8.0f;
    e /= static_cast<float>(n);
    e = std::pow(2.0f, e);
  }
  return s;
}

bool alibi_matches_cudnn(const float* slopes, int64_t heads) {
  const auto ref = cudnn_alibi_slopes(heads);
  for (int64_t h = 0; h < heads; ++h)
    if (!(std::fabs(double(slopes[h]) - double(ref[size_t(h)])) <= 1e-6 * double(ref[size_t(h)]))) return false;
  return heads > 0;
}

CudnnGraphArgs cudnn_graph_args(const AttnCall& c) {
  CudnnGraphArgs a;
  const AttnGeometry g = attn_geometry(c);
  if (!backends::half_type(c.dtype)) return backends::refuse(a, "cuDNN graph attention takes bfloat16/float16 only");
  if (c.sm < 80) return backends::refuse(a, "cuDNN graph attention needs sm80 or newer");
  if (c.head_dim % 8 != 0 || c.head_dim > 128)
    return backends::refuse(a, "cuDNN graph attention needs head dim % 8 == 0 and <= 128");
  if (const char* why = backends::common_reject(c, g)) return backends::refuse(a, why);
  if (c.key_start) return backends::refuse(a, "left padding (cuDNN's padding mask hides keys on the right)");
  const int64_t T = c.q_len, L = g.key_len, o = c.q_offset;
  a.key_len = L;
  a.q_heads = c.heads;
  a.kv_heads = c.kv_heads;
  a.scale = c.scale;
  if (c.alibi) {
    if (!c.alibi_builtin) return backends::refuse(a, "the ALiBi slopes are not cuDNN's built-in ones");
    // cuDNN adds slope·(col − row) and takes ALiBi only with right bound 0, top-left: row r is our query r,
    // at position r, only when the queries start at position 0 (then the bias is ours exactly, stats included).
    if (!g.causal) return backends::refuse(a, "cuDNN's ALiBi needs the causal mask");
    if (o != 0) return backends::refuse(a, "cuDNN's ALiBi is top-left aligned: the queries must start at position 0");
    a.alibi = true;
  }
  if (c.window > 0 && T > L) return backends::refuse(a, "cuDNN's sliding window needs no more queries than keys");
  // Our query r sits at position i = o + r; the alignment puts row r's diagonal at column r + base, so our
  // diagonal lies d = o − base columns right of it: causal j ≤ i is c ≤ r + base + d (right bound d), the window
  // j > i − W is c > r + base − (W − d) (left bound W − d).
  int64_t base = 0;
  if (o != 0 && T <= L && (g.causal || c.window > 0)) {
    a.align = DiagonalAlign::kBottomRight;  // KV-cache chunks: d = delta, 0 unless queries pass the last key
    base = L - T;
  }
  const int64_t d = o - base;
  if (g.causal) a.right_bound = d;
  if (c.window > 0) {
    a.left_bound = c.window - d;
    if (a.left_bound < 1)
      return backends::refuse(a, "the window's lower bound lies past cuDNN's diagonal (left bound < 1)");
  }
  if (c.training && T == 1 && L == 1) return backends::refuse(a, "cuDNN's SDPA backward refuses s_q = s_kv = 1");
  a.ok = true;
  return a;
}

namespace backends {

namespace {

Forward graph_forward(const AttnPlan& plan, const at::Tensor& q_, const at::Tensor& k_, const at::Tensor& v_,
                      const AttentionParams&, const BackendOps& ops) {
  const CudnnGraphArgs& a = plan.cudnn_graph;
  const auto q = unit_d(q_), k = unit_d(k_).narrow(2, 0, a.key_len), v = unit_d(v_).narrow(2, 0, a.key_len);
  auto o = ops.cudnn_graph_fwd({q, k, v, a});
  Forward f;
  f.state = {o.out, o.stats, {}, {}, {}};
  f.out = o.out;
  // Our logits are cuDNN's (ALiBi only with the queries at position 0), so the stats are our log-sum-exp.
  f.lse = acc_lse(o.stats.reshape({q.size(0), q.size(1), q.size(2)}), q);
  return f;
}

AttentionGrads graph_backward(const AttnPlan& plan, const at::Tensor& q_, const at::Tensor& k_, const at::Tensor& v_,
                              const AttentionParams&, const NativeState& s, const at::Tensor& dout,
                              const BackendOps& ops) {
  const CudnnGraphArgs& a = plan.cudnn_graph;
  const int64_t S = k_.size(2);
  const auto q = unit_d(q_), k = unit_d(k_).narrow(2, 0, a.key_len), v = unit_d(v_).narrow(2, 0, a.key_len);
  auto [dq, dk, dv] = ops.cudnn_graph_bwd({unit_d(dout), q, k, v, s.out, s.lse, a});
  return {dq, pad_keys(dk, S), pad_keys(dv, S)};
}

void bind_graph(BackendOps& o) {
#ifdef DROPE_WITH_CUDNN_FRONTEND
  o.cudnn_graph_fwd = cudnn_graph::forward;
  o.cudnn_graph_bwd = cudnn_graph::backward;
#else
  (void)o;
#endif
}

const char* graph_refuses(const AttnCall& c, const AttnPlan& p) {
  if (!c.cudnn_graph) return "this build has no cuDNN graphs (cudnn-frontend)";
  return refusal(p.cudnn_graph);
}

// Whether cuDNN builds the graphs of the plan (check_support, cached per shape); *why: its reason.
bool graph_builds(const AttnPlan& plan, const at::Tensor& q, const at::Tensor& k, bool training, std::string* why) {
#ifdef DROPE_WITH_CUDNN_FRONTEND
  return cudnn_graph::supported(q, k, plan.cudnn_graph, training, why);
#else
  (void)q, (void)k, (void)plan, (void)training;
  *why = "this build has no cuDNN graphs";
  return false;
#endif
}

}  // namespace

const AttnBackendDef& cudnn_graph_backend() {
  static const AttnBackendDef d{"cudnn_graph", "cuDNN graph",  kAttnCuda,  graph_refuses,
                                graph_forward, graph_backward, bind_graph, graph_builds};
  return d;
}

}  // namespace backends

}  // namespace drope::ops
