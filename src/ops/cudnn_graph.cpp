// cuDNN's SDPA node through cudnn-frontend graphs (cudnn_graph.h). Only in CUDA builds that found the
// frontend's headers (DROPE_WITH_CUDNN_FRONTEND); the frontend loads libcudnn.so.9 at run time
// (NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING): the one LibTorch's CUDA library has already loaded.
#ifdef DROPE_WITH_CUDNN_FRONTEND

#include "cudnn_graph.h"

#include <dlfcn.h>

#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include <cudnn_frontend.h>

namespace cudnn_frontend {
void* cudnn_dlhandle = nullptr;  // the frontend's dynamic loading reads cuDNN's symbols from here
}  // namespace cudnn_frontend

namespace drope::ops::cudnn_graph {

namespace fe = cudnn_frontend;

namespace {

enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV };

// cuDNN as LibTorch's CUDA library loaded it (RTLD_NOLOAD), else by its soname.
void load_cudnn() {
  static std::once_flag once;
  std::call_once(once, [] {
    void* h = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_NOLOAD);
    if (!h) h = dlopen("libcudnn.so.9", RTLD_NOW);
    TORCH_CHECK(h, "cuDNN graphs: cannot load libcudnn.so.9: ", dlerror());
    fe::cudnn_dlhandle = h;
  });
}

// One cuDNN handle per thread and device, bound to the current stream before each use.
cudnnHandle_t handle_for(const at::Tensor& t) {
  load_cudnn();
  thread_local std::unordered_map<int, cudnnHandle_t> handles;
  const int dev = t.device().index();
  auto it = handles.find(dev);
  if (it == handles.end()) {
    cudnnHandle_t h = nullptr;
    TORCH_CHECK(fe::detail::create_handle(&h) == CUDNN_STATUS_SUCCESS, "cuDNN graphs: cudnnCreate failed");
    it = handles.emplace(dev, h).first;
  }
  TORCH_CHECK(fe::detail::set_stream(it->second, at::cuda::getCurrentCUDAStream(dev).stream()) == CUDNN_STATUS_SUCCESS,
              "cuDNN graphs: cudnnSetStream failed");
  return it->second;
}

std::vector<int64_t> dims4(const at::Tensor& t) { return t.sizes().vec(); }
std::vector<int64_t> strides4(const at::Tensor& t) { return t.strides().vec(); }
std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& d) {
  return {d[1] * d[2] * d[3], d[2] * d[3], d[3], 1};
}

template <typename Attr>
void set_masks(Attr& o, const CudnnGraphArgs& a) {
  o.set_attn_scale(static_cast<float>(a.scale));
  if (a.alibi) o.set_alibi_mask(true);
  o.set_diagonal_alignment(a.align == DiagonalAlign::kBottomRight ? fe::DiagonalAlignment_t::BOTTOM_RIGHT
                                                                  : fe::DiagonalAlignment_t::TOP_LEFT);
  if (a.right_bound >= 0) o.set_diagonal_band_right_bound(static_cast<int>(a.right_bound));
  if (a.left_bound >= 0) o.set_diagonal_band_left_bound(static_cast<int>(a.left_bound));
}

// A built graph (or why it could not be built) and its workspace size.
struct Entry {
  std::shared_ptr<fe::graph::Graph> graph;
  int64_t workspace = 0;
  bool ok = false;
  std::string why;
};

// validate → operation graph → heuristics → check_support → plans; the first failure's message.
void finish(Entry& e, cudnnHandle_t h) {
  auto step = [&](fe::error_t st, const char* what) {
    if (st.is_good()) return true;
    e.why = std::string(what) + ": " + st.get_message();
    return false;
  };
  auto& g = *e.graph;
  e.ok = step(g.validate(), "validate") && step(g.build_operation_graph(h), "build_operation_graph") &&
         step(g.create_execution_plans({fe::HeurMode_t::A}), "create_execution_plans") &&
         step(g.check_support(h), "check_support") &&
         step(g.build_plans(fe::BuildPlanPolicy_t::HEURISTICS_CHOICE), "build_plans") &&
         step(g.get_workspace_size(e.workspace), "get_workspace_size");
}

fe::DataType_t io_type(const at::Tensor& t) {
  return t.scalar_type() == at::kHalf ? fe::DataType_t::HALF : fe::DataType_t::BFLOAT16;
}

std::shared_ptr<fe::graph::Tensor_attributes> input(fe::graph::Graph& g, const char* name, int64_t uid,
                                                    const std::vector<int64_t>& d, const std::vector<int64_t>& s) {
  return g.tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(d).set_stride(s));
}

// Cache key: direction, dtype, device, every dim and stride the graph was built for, and the attributes.
std::vector<int64_t> key_of(int64_t dir, const at::Tensor& q, const std::vector<std::vector<int64_t>>& shapes,
                            const CudnnGraphArgs& a) {
  std::vector<int64_t> k{
      dir, int64_t(q.scalar_type()), q.device().index(), a.alibi, int64_t(a.align), a.right_bound, a.left_bound};
  int64_t bits = 0;
  static_assert(sizeof(double) == sizeof(int64_t));
  std::memcpy(&bits, &a.scale, sizeof bits);
  k.push_back(bits);
  for (const auto& s : shapes) k.insert(k.end(), s.begin(), s.end());
  return k;
}

std::mutex cache_mu;
std::map<std::vector<int64_t>, std::shared_ptr<Entry>> cache;

// The forward graph for q (B, H, T, D), k/v (B, H_kv, key_len, D) with their strides; out contiguous.
std::shared_ptr<Entry> forward_graph(const at::Tensor& q, const std::vector<int64_t>& ks,
                                     const std::vector<int64_t>& kd, const std::vector<int64_t>& vs,
                                     const CudnnGraphArgs& a) {
  const auto qd = dims4(q), qs = strides4(q);
  const auto key = key_of(0, q, {qd, qs, kd, ks, vs}, a);
  std::lock_guard<std::mutex> lock(cache_mu);
  auto& slot = cache[key];
  if (slot) return slot;
  auto e = std::make_shared<Entry>();
  e->graph = std::make_shared<fe::graph::Graph>();
  auto& g = *e->graph;
  g.set_io_data_type(io_type(q))
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  auto Q = input(g, "Q", kQ, qd, qs);
  auto K = input(g, "K", kK, kd, ks);
  auto V = input(g, "V", kV, kd, vs);
  auto o = fe::graph::SDPA_attributes().set_name("drope_sdpa").set_generate_stats(true);
  set_masks(o, a);
  auto [O, Stats] = g.sdpa(Q, K, V, o);
  O->set_output(true).set_uid(kO).set_dim(qd).set_stride(contiguous_strides(qd));
  Stats->set_output(true)
      .set_uid(kStats)
      .set_data_type(fe::DataType_t::FLOAT)
      .set_dim({qd[0], qd[1], qd[2], 1})
      .set_stride({qd[1] * qd[2], qd[2], 1, 1});
  finish(*e, handle_for(q));
  slot = e;
  return e;
}

// The backward graph: dO and O contiguous like q's shape, stats (B, H, T, 1); dq, dk, dv contiguous.
std::shared_ptr<Entry> backward_graph(const at::Tensor& q, const std::vector<int64_t>& kd,
                                      const std::vector<int64_t>& ks, const std::vector<int64_t>& vs,
                                      const std::vector<int64_t>& os, const std::vector<int64_t>& dos,
                                      const CudnnGraphArgs& a) {
  const auto qd = dims4(q), qs = strides4(q);
  const auto key = key_of(1, q, {qd, qs, kd, ks, vs, os, dos}, a);
  std::lock_guard<std::mutex> lock(cache_mu);
  auto& slot = cache[key];
  if (slot) return slot;
  auto e = std::make_shared<Entry>();
  e->graph = std::make_shared<fe::graph::Graph>();
  auto& g = *e->graph;
  g.set_io_data_type(io_type(q))
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  auto Q = input(g, "Q", kQ, qd, qs);
  auto K = input(g, "K", kK, kd, ks);
  auto V = input(g, "V", kV, kd, vs);
  auto O = input(g, "O", kO, qd, os);
  auto dO = input(g, "dO", kDO, qd, dos);
  auto Stats = g.tensor(fe::graph::Tensor_attributes()
                            .set_name("Stats")
                            .set_uid(kStats)
                            .set_dim({qd[0], qd[1], qd[2], 1})
                            .set_stride({qd[1] * qd[2], qd[2], 1, 1})
                            .set_data_type(fe::DataType_t::FLOAT));
  auto o = fe::graph::SDPA_backward_attributes().set_name("drope_sdpa_backward");
  set_masks(o, a);
  auto [dQ, dK, dV] = g.sdpa_backward(Q, K, V, O, dO, Stats, o);
  dQ->set_output(true).set_uid(kDQ).set_dim(qd).set_stride(contiguous_strides(qd));
  dK->set_output(true).set_uid(kDK).set_dim(kd).set_stride(contiguous_strides(kd));
  dV->set_output(true).set_uid(kDV).set_dim(kd).set_stride(contiguous_strides(kd));
  finish(*e, handle_for(q));
  slot = e;
  return e;
}

void run(const Entry& e, const at::Tensor& like, std::unordered_map<int64_t, void*>& pack, const char* who) {
  auto h = handle_for(like);
  auto ws = at::empty({std::max<int64_t>(e.workspace, 1)}, like.options().dtype(at::kByte));
  auto st = e.graph->execute(h, pack, ws.data_ptr());
  TORCH_CHECK(st.is_good(), "cuDNN graph ", who, ": ", st.get_message());
}

}  // namespace

bool supported(const at::Tensor& q, const at::Tensor& k, const CudnnGraphArgs& args, bool training, std::string* why) {
  const c10::cuda::CUDAGuard guard(q.device());
  const auto qd = dims4(q);
  const std::vector<int64_t> kd{k.size(0), k.size(1), args.key_len, k.size(3)};
  const auto ks = strides4(k);
  const auto cs = contiguous_strides(qd);
  try {
    auto f = forward_graph(q, ks, kd, ks, args);
    if (!f->ok) {
      *why = "forward " + f->why;
      return false;
    }
    if (training) {
      auto b = backward_graph(q, kd, ks, ks, cs, cs, args);
      if (!b->ok) {
        *why = "backward " + b->why;
        return false;
      }
    }
  } catch (const std::exception& e) {  // the frontend throws when cuDNN cannot be loaded
    *why = e.what();
    return false;
  }
  return true;
}

backends::CudnnGraphFwdOut forward(const backends::CudnnGraphFwdIn& in) {
  const c10::cuda::CUDAGuard guard(in.q.device());
  auto e = forward_graph(in.q, strides4(in.k), dims4(in.k), strides4(in.v), in.args);
  TORCH_CHECK(e->ok, "cuDNN graph forward: ", e->why);
  const int64_t B = in.q.size(0), H = in.q.size(1), T = in.q.size(2);
  auto out = at::empty(in.q.sizes(), in.q.options().memory_format(at::MemoryFormat::Contiguous));
  auto stats = at::empty({B, H, T, 1}, in.q.options().dtype(at::kFloat));
  std::unordered_map<int64_t, void*> pack{{kQ, in.q.data_ptr()},
                                          {kK, in.k.data_ptr()},
                                          {kV, in.v.data_ptr()},
                                          {kO, out.data_ptr()},
                                          {kStats, stats.data_ptr()}};
  run(*e, in.q, pack, "forward");
  return {out, stats};
}

backends::Grads3 backward(const backends::CudnnGraphBwdIn& in) {
  const c10::cuda::CUDAGuard guard(in.q.device());
  const auto out = in.out.contiguous(), dout = in.dout.contiguous(), stats = in.stats.contiguous();
  auto e = backward_graph(in.q, dims4(in.k), strides4(in.k), strides4(in.v), strides4(out), strides4(dout), in.args);
  TORCH_CHECK(e->ok, "cuDNN graph backward: ", e->why);
  auto dq = at::empty(in.q.sizes(), in.q.options().memory_format(at::MemoryFormat::Contiguous));
  auto dk = at::empty(in.k.sizes(), in.k.options().memory_format(at::MemoryFormat::Contiguous));
  auto dv = at::empty(in.v.sizes(), in.v.options().memory_format(at::MemoryFormat::Contiguous));
  std::unordered_map<int64_t, void*> pack{{kQ, in.q.data_ptr()}, {kK, in.k.data_ptr()},  {kV, in.v.data_ptr()},
                                          {kO, out.data_ptr()},  {kDO, dout.data_ptr()}, {kStats, stats.data_ptr()},
                                          {kDQ, dq.data_ptr()},  {kDK, dk.data_ptr()},   {kDV, dv.data_ptr()}};
  run(*e, in.q, pack, "backward");
  return {dq, dk, dv};
}

}  // namespace drope::ops::cudnn_graph

#endif  // DROPE_WITH_CUDNN_FRONTEND
