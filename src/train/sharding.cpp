#include "drope/train/sharding.h"

#include <algorithm>

#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include "drope/core/error.h"
#include "drope/core/numbers.h"
#include "drope/train/recompute.h"

namespace drope::train {

// DROPE_SHARD_PREFETCH=0 gathers each block only when it runs (for A/B timing; bench/shard.py).
bool shard_prefetch_enabled() {
  return env_switch("DROPE_SHARD_PREFETCH", "1, prefetch the next block").value_or(true);
}

namespace {
// "model.layers.<i>." → i, else -1.
int64_t layer_of(const std::string& name) {
  static const std::string prefix = "model.layers.";
  if (name.compare(0, prefix.size(), prefix) != 0) return -1;
  int64_t v = 0;
  size_t i = prefix.size();
  if (i >= name.size() || name[i] < '0' || name[i] > '9') return -1;
  for (; i < name.size() && name[i] >= '0' && name[i] <= '9'; ++i) v = v * 10 + (name[i] - '0');
  return i < name.size() && name[i] == '.' ? v : -1;
}
}  // namespace

std::vector<ShardUnit> make_shard_units(const std::vector<std::string>& names, const std::vector<int64_t>& numels,
                                        int world) {
  if (world < 1) fail("shard units: world size {} < 1", world);
  std::map<int64_t, ShardUnit> blocks;
  ShardUnit rest;
  rest.name = "rest";
  for (size_t i = 0; i < names.size(); ++i) {
    const int64_t l = layer_of(names[i]);
    ShardUnit& u = l >= 0 ? blocks[l] : rest;
    if (l >= 0 && u.params.empty()) {
      u.name = "model.layers." + std::to_string(l);
      u.layer = l;
    }
    u.params.push_back(int64_t(i));
    u.offsets.push_back(u.numel);
    u.numel += numels[i];
  }
  std::vector<ShardUnit> out;
  for (auto& kv : blocks) out.push_back(std::move(kv.second));
  if (!rest.params.empty()) out.push_back(std::move(rest));
  for (auto& u : out) u.chunk = (u.numel + world - 1) / world;
  return out;
}

std::vector<OwnedPiece> owned_pieces(const std::vector<ShardUnit>& units, int rank) {
  std::vector<OwnedPiece> out;
  for (size_t k = 0; k < units.size(); ++k) {
    const auto& u = units[k];
    const int64_t lo = int64_t(rank) * u.chunk, hi = std::min(u.numel, lo + u.chunk);
    for (size_t j = 0; j < u.params.size(); ++j) {
      const int64_t a = u.offsets[j], b = (j + 1 < u.params.size() ? u.offsets[j + 1] : u.numel);
      const int64_t s = std::max(a, lo), e = std::min(b, hi);
      if (s < e) out.push_back({int64_t(k), u.params[j], s - a, e - s, s - lo});
    }
  }
  return out;
}

struct ShardedDataParallel::Impl {
  Distributed* dist = nullptr;
  DecoderLM model{nullptr};
  ShardMode mode = ShardMode::kNone;
  int64_t recompute_every = 0;
  int W = 1, rank = 0;
  std::vector<torch::Tensor> params;  // the model's parameters (module tensors; set_data re-points them)
  std::vector<std::string> names;
  std::vector<std::vector<int64_t>> shapes;
  std::vector<ShardUnit> units;
  std::vector<OwnedPiece> pieces;
  std::vector<int64_t> unit_of;       // parameter → unit
  std::vector<bool> sharded;          // unit → parameters stored as chunks (params mode blocks)
  std::vector<torch::Tensor> flat;    // unit → whole padded weights (replicated units)
  std::vector<torch::Tensor> master;  // unit → this rank's chunk of the weights (a view of flat, or owned)
  std::vector<torch::Tensor> grad;    // unit → this rank's chunk of the summed gradients
  std::vector<torch::Tensor> piece_views;  // piece → view of its master chunk (the optimizer's tensors)
  std::vector<torch::Tensor> piece_grads;  // piece → view of its gradient chunk
  std::unique_ptr<AdamW> adamw;
  std::unique_ptr<GradSync> allreduce;     // optimizer mode
  std::vector<std::shared_ptr<BlockHooks>> hooks;  // params mode: per block layer
  std::map<int64_t, int64_t> unit_of_layer;
  torch::TensorOptions opts;
  int64_t gathered_now = 0, gathered_peak = 0;  // bytes of whole blocks gathered at once (params mode)

  // Reduce-scatter of units whose gradients backward produced (grads mode: every unit; params mode: the
  // replicated rest), started in a fixed unit order on every rank so that the collectives match up.
  struct Pending {
    torch::Tensor out;
    Collective work;
    bool started = false;
  };
  std::vector<int64_t> hook_order;     // units reduced through accumulation hooks, in start order
  std::vector<int64_t> remaining;      // unit → parameters not yet accumulated this micro-batch
  std::vector<Pending> pending;        // unit → its reduce-scatter
  size_t next = 0;
  bool armed = false;

  int64_t padded(int64_t u) const { return units[u].chunk * W; }

  // The unit's gradients (zeros where a parameter has none) flattened, padded, reduce-scattered; .grad freed.
  void start_reduce(int64_t u, std::vector<torch::Tensor> grads) {
    torch::NoGradGuard ng;
    auto flatg = torch::zeros({padded(u)}, opts);
    const auto& U = units[u];
    for (size_t j = 0; j < U.params.size(); ++j) {
      const int64_t n = j + 1 < U.params.size() ? U.offsets[j + 1] - U.offsets[j] : U.numel - U.offsets[j];
      if (grads[j].defined()) flatg.narrow(0, U.offsets[j], n).copy_(grads[j].reshape({-1}));
    }
    auto& p = pending[u];
    p.out = torch::empty({U.chunk}, opts);
    p.work = dist->reduce_scatter(p.out, flatg);
    p.started = true;
  }
  std::vector<torch::Tensor> take_grads(int64_t u) {
    std::vector<torch::Tensor> g;
    for (int64_t i : units[u].params) {
      g.push_back(params[i].grad());
      if (params[i].grad().defined()) params[i].mutable_grad() = torch::Tensor();
    }
    return g;
  }
  void accumulated(int64_t i) {
    if (!armed) return;
    const int64_t u = unit_of[i];
    if (remaining[u] > 0) --remaining[u];
    while (next < hook_order.size() && remaining[hook_order[next]] == 0) {
      const int64_t v = hook_order[next++];
      start_reduce(v, take_grads(v));
    }
  }
  void finish_reduces() {
    armed = false;
    for (; next < hook_order.size(); ++next) start_reduce(hook_order[next], take_grads(hook_order[next]));
    torch::NoGradGuard ng;
    for (int64_t u : hook_order) finish_unit(u);
    next = 0;
  }
  void finish_unit(int64_t u) {
    auto& p = pending[u];
    if (!p.started) return;
    p.work.wait();
    grad[u].add_(p.out, 1.0 / W);
    p = Pending();
  }

  // Params mode prefetch: gathering a block starts the all-gather of the block expected next, so that its
  // transfer overlaps the current block's compute. Forward walks the blocks up and ends on the last, which
  // backward recomputes first; backward walks down and stops at the first, before the optimizer step (after
  // which a gathered copy would be stale: step() drops any prefetch). Every rank makes the same guesses, so
  // the collectives match; a wrong guess costs one wasted gather, never a wrong weight.
  struct Prefetch {
    int64_t unit = -1;
    torch::Tensor full;
    Collective work;
  };
  Prefetch prefetch;
  int64_t last_gathered = -1;
  int64_t prefetch_hits = 0, prefetch_wasted = 0;
  bool prefetch_enabled = true;
  std::vector<int64_t> sharded_units;  // ascending

  int64_t predict_next(int64_t u) const {
    const auto it = std::find(sharded_units.begin(), sharded_units.end(), u);
    if (it == sharded_units.end()) return -1;
    const bool first = it == sharded_units.begin(), last = it + 1 == sharded_units.end();
    const bool descending = last_gathered >= u;  // backward (or its start: the last block again)
    if (!descending) return last ? u : *(it + 1);
    return first ? -1 : *(it - 1);
  }
  void drop_prefetch() {
    if (prefetch.unit < 0) return;
    prefetch.work.wait();  // every rank started it: every rank finishes it
    gathered_now -= prefetch.full.numel() * 4;
    prefetch = Prefetch();
    ++prefetch_wasted;
  }
  torch::Tensor start_gather(int64_t u, Collective* work) {
    auto full = torch::empty({padded(u)}, opts);
    *work = dist->all_gather(full, master[u]);
    gathered_now += full.numel() * 4;
    gathered_peak = std::max(gathered_peak, gathered_now);
    return full;
  }
  void gather(int64_t u, bool prefetch_next = true) {
    torch::NoGradGuard ng;
    torch::Tensor full;
    if (prefetch.unit == u) {
      prefetch.work.wait();
      full = std::move(prefetch.full);
      prefetch = Prefetch();
      ++prefetch_hits;
    } else {
      drop_prefetch();
      Collective work;
      full = start_gather(u, &work);
      work.wait();
    }
    if (prefetch_next && prefetch_enabled) {
      const int64_t next = predict_next(u);
      last_gathered = u;
      if (next >= 0) {
        prefetch.unit = next;
        prefetch.full = start_gather(next, &prefetch.work);
      }
    }
    const auto& U = units[u];
    for (size_t j = 0; j < U.params.size(); ++j) {
      const int64_t i = U.params[j];
      params[i].set_data(full.narrow(0, U.offsets[j], numel_of(i)).view(shapes[i]));
    }
  }
  void release(int64_t u) {
    if (params[units[u].params.front()].numel() > 0) gathered_now -= padded(u) * 4;
    for (int64_t i : units[u].params) params[i].set_data(torch::empty({0}, opts));
  }
  int64_t numel_of(int64_t i) const {
    int64_t n = 1;
    for (auto s : shapes[i]) n *= s;
    return n;
  }
};

namespace {
struct UnitHook final : torch::autograd::PostAccumulateGradHook {
  UnitHook(ShardedDataParallel::Impl* s, int64_t i) : impl(s), index(i) {}
  void operator()(const torch::autograd::Variable&) override { impl->accumulated(index); }
  ShardedDataParallel::Impl* impl;
  int64_t index;
};
}  // namespace

ShardedDataParallel::ShardedDataParallel(Distributed& dist, DecoderLM model, ShardMode mode, const AdamWConfig& cfg,
                                         int64_t recompute_every)
    : impl_(std::make_unique<Impl>()) {
  auto& I = *impl_;
  I.dist = &dist;
  I.model = model;
  I.mode = mode;
  I.recompute_every = recompute_every;
  I.W = dist.world();
  I.rank = dist.rank();
  std::vector<int64_t> numels;
  for (auto& kv : model->named_parameters()) {
    I.names.push_back(kv.key());
    I.params.push_back(kv.value());
    I.shapes.push_back(kv.value().sizes().vec());
    numels.push_back(kv.value().numel());
    if (kv.value().scalar_type() != at::kFloat)
      fail("train.shard {}: parameter {} is {}, sharding keeps float32 weights", name_of(mode), kv.key(),
           c10::toString(kv.value().scalar_type()));
  }
  I.opts = I.params.front().options().requires_grad(false);
  I.units = make_shard_units(I.names, numels, I.W);
  I.pieces = owned_pieces(I.units, I.rank);
  I.unit_of.assign(I.params.size(), 0);
  for (size_t u = 0; u < I.units.size(); ++u) {
    for (int64_t i : I.units[u].params) I.unit_of[i] = int64_t(u);
    if (I.units[u].layer >= 0) I.unit_of_layer[I.units[u].layer] = int64_t(u);
  }
  torch::NoGradGuard ng;
  const size_t NU = I.units.size();
  I.flat.resize(NU);
  I.master.resize(NU);
  I.grad.resize(NU);
  I.sharded.assign(NU, false);
  I.pending.resize(NU);
  I.remaining.assign(NU, 0);
  for (size_t u = 0; u < NU; ++u) {
    const auto& U = I.units[u];
    auto full = torch::zeros({I.padded(u)}, I.opts);
    for (size_t j = 0; j < U.params.size(); ++j)
      full.narrow(0, U.offsets[j], I.numel_of(U.params[j])).copy_(I.params[U.params[j]].detach().reshape({-1}));
    I.sharded[u] = mode == ShardMode::kParams && U.layer >= 0;
    if (I.sharded[u]) {
      I.master[u] = full.narrow(0, int64_t(I.rank) * U.chunk, U.chunk).clone();
      for (int64_t i : U.params) I.params[i].set_data(torch::empty({0}, I.opts));
    } else {
      I.flat[u] = full;
      I.master[u] = full.narrow(0, int64_t(I.rank) * U.chunk, U.chunk);
      for (size_t j = 0; j < U.params.size(); ++j) {
        const int64_t i = U.params[j];
        I.params[i].set_data(full.narrow(0, U.offsets[j], I.numel_of(i)).view(I.shapes[i]));
      }
    }
    I.grad[u] = torch::zeros({U.chunk}, I.opts);
  }
  // The optimizer over the owned pieces, each with its parameter's weight-decay decision.
  AdamW probe(std::vector<std::pair<std::string, torch::Tensor>>{}, cfg);
  std::vector<AdamW::Piece> pcs;
  for (const auto& pc : I.pieces) {
    auto view = I.master[pc.unit].narrow(0, pc.at, pc.len);
    I.piece_views.push_back(view);
    I.piece_grads.push_back(I.grad[pc.unit].narrow(0, pc.at, pc.len));
    const bool decay = probe.decays(I.names[pc.param], torch::empty(I.shapes[pc.param], torch::kMeta));
    pcs.push_back({fmt::format("{}@{}", I.names[pc.param], pc.start), view, decay});
  }
  I.adamw = std::make_unique<AdamW>(AdamW::from_pieces(std::move(pcs), cfg));
  for (size_t u = 0; u < NU; ++u)
    if (I.sharded[u]) I.sharded_units.push_back(int64_t(u));
  I.prefetch_enabled = shard_prefetch_enabled();
  // Gradient reduction.
  if (mode == ShardMode::kOptimizer) {
    I.allreduce = std::make_unique<GradSync>(dist, I.params);
  } else {
    for (int64_t u = int64_t(NU) - 1; u >= 0; --u)  // backward finishes the last block first; the rest last
      if (!I.sharded[u] && I.units[u].layer >= 0) I.hook_order.push_back(u);
    for (size_t u = 0; u < NU; ++u)
      if (I.units[u].layer < 0) I.hook_order.push_back(int64_t(u));
    for (int64_t u : I.hook_order)
      for (int64_t i : I.units[u].params)
        torch::autograd::impl::set_post_acc_grad_hooks(I.params[i], std::make_unique<UnitHook>(&I, i));
  }
  if (mode == ShardMode::kParams) {
    for (size_t u = 0; u < NU; ++u) {
      if (!I.sharded[u]) continue;
      auto h = std::make_shared<BlockHooks>();
      const int64_t uu = int64_t(u);
      Impl* ip = &I;
      h->gather = [ip, uu] { ip->gather(uu); };
      h->release = [ip, uu] { ip->release(uu); };
      h->param_grads = [ip, uu](std::vector<torch::Tensor>&& g) {
        ip->start_reduce(uu, std::move(g));
        ip->finish_unit(uu);
      };
      I.hooks.push_back(h);
    }
  }
}

ShardedDataParallel::~ShardedDataParallel() {
  auto& I = *impl_;
  for (int64_t u : I.hook_order)
    for (int64_t i : I.units[u].params) torch::autograd::impl::set_post_acc_grad_hooks(I.params[i], nullptr);
}

BlockRunner ShardedDataParallel::block_runner() {
  Impl* ip = impl_.get();
  return [ip](size_t layer, DecoderLayerImpl& block, const torch::Tensor& x, const PositionContext& ctx) {
    auto it = ip->unit_of_layer.find(int64_t(layer));
    if (it != ip->unit_of_layer.end() && ip->sharded[it->second]) {
      size_t k = 0;  // hooks are in sharded-unit order
      for (int64_t u = 0; u < it->second; ++u) k += ip->sharded[u] ? 1 : 0;
      return checkpointed_block(block, x, ctx, ip->hooks[k]);
    }
    if (checkpoints_layer(ip->recompute_every, layer)) return checkpointed_block(block, x, ctx);
    return block.forward(x, ctx);
  };
}

void ShardedDataParallel::zero_grad() {
  torch::NoGradGuard ng;
  for (auto& g : impl_->grad) g.zero_();
  for (auto& p : impl_->params)
    if (p.grad().defined()) p.mutable_grad() = torch::Tensor();
}

void ShardedDataParallel::before_backward(bool last) {
  auto& I = *impl_;
  if (I.mode == ShardMode::kOptimizer) {
    if (last) I.allreduce->arm();
    return;
  }
  for (int64_t u : I.hook_order) I.remaining[u] = int64_t(I.units[u].params.size());
  I.next = 0;
  I.armed = true;
}

void ShardedDataParallel::after_backward(bool last) {
  auto& I = *impl_;
  if (I.mode != ShardMode::kOptimizer) {
    I.finish_reduces();
    return;
  }
  if (!last) return;
  I.allreduce->finish();  // every rank now has the averaged gradients; keep this rank's chunks
  torch::NoGradGuard ng;
  for (size_t u = 0; u < I.units.size(); ++u) {
    const auto& U = I.units[u];
    const int64_t lo = int64_t(I.rank) * U.chunk;
    for (size_t j = 0; j < U.params.size(); ++j) {
      const int64_t i = U.params[j], a = U.offsets[j], n = I.numel_of(i);
      const int64_t s = std::max(a, lo), e = std::min(a + n, lo + U.chunk);
      if (s < e && I.params[i].grad().defined())
        I.grad[u].narrow(0, s - lo, e - s).copy_(I.params[i].grad().reshape({-1}).narrow(0, s - a, e - s));
    }
    for (int64_t i : U.params)
      if (I.params[i].grad().defined()) I.params[i].mutable_grad() = torch::Tensor();
  }
}

double ShardedDataParallel::clip_grad_norm(double max_norm) {
  auto& I = *impl_;
  torch::NoGradGuard ng;
  double local = 0;
  for (const auto& g : I.grad) local += g.to(torch::kDouble).pow(2).sum().item<double>();
  const double norm = std::sqrt(I.dist->sum(local));
  if (max_norm > 0 && std::isfinite(norm)) {
    const double coef = max_norm / (norm + 1e-6);
    if (coef < 1)
      for (auto& g : I.grad) g.mul_(coef);
  }
  return norm;
}

void ShardedDataParallel::step(double lr) {
  auto& I = *impl_;
  torch::NoGradGuard ng;
  I.drop_prefetch();  // gathered before this step: stale after it
  I.last_gathered = -1;
  for (size_t k = 0; k < I.piece_views.size(); ++k) I.piece_views[k].mutable_grad() = I.piece_grads[k];
  I.adamw->step(lr);
  for (auto& v : I.piece_views) v.mutable_grad() = torch::Tensor();
  std::vector<Collective> work;
  std::vector<torch::Tensor> sent;
  for (size_t u = 0; u < I.units.size(); ++u) {
    if (I.sharded[u] || I.W == 1) continue;
    sent.push_back(I.master[u].clone());  // the chunk is a view of the gathered buffer: send a copy
    work.push_back(I.dist->all_gather(I.flat[u], sent.back()));
  }
  for (auto& w : work) w.wait();
}

int64_t ShardedDataParallel::steps_taken() const { return impl_->adamw->steps_taken(); }

void ShardedDataParallel::with_full_parameters(const std::function<void()>& fn) {
  auto& I = *impl_;
  I.drop_prefetch();
  for (size_t u = 0; u < I.units.size(); ++u)
    if (I.sharded[u]) I.gather(int64_t(u), /*prefetch_next=*/false);
  try {
    fn();
  } catch (...) {
    for (size_t u = 0; u < I.units.size(); ++u)
      if (I.sharded[u]) I.release(int64_t(u));
    throw;
  }
  for (size_t u = 0; u < I.units.size(); ++u)
    if (I.sharded[u]) I.release(int64_t(u));
}

std::vector<std::pair<std::string, torch::Tensor>> ShardedDataParallel::optimizer_pieces() const {
  return impl_->adamw->state_tensors();
}
const std::vector<ShardUnit>& ShardedDataParallel::units() const { return impl_->units; }
const std::vector<OwnedPiece>& ShardedDataParallel::pieces() const { return impl_->pieces; }
const std::vector<std::string>& ShardedDataParallel::names() const { return impl_->names; }
const std::vector<std::vector<int64_t>>& ShardedDataParallel::shapes() const { return impl_->shapes; }

void ShardedDataParallel::load_optimizer(
    const std::function<torch::Tensor(const std::string&, int64_t, int64_t, int64_t)>& read, int64_t steps,
    const std::string& source) {
  auto& I = *impl_;
  std::map<std::string, torch::Tensor> state;
  for (const auto& pc : I.pieces) {
    const std::string key = fmt::format("{}@{}", I.names[pc.param], pc.start);
    for (const char* kind : {"exp_avg", "exp_avg_sq"}) {
      auto t = read(kind, pc.param, pc.start, pc.len);
      if (t.numel() != pc.len)
        fail("{}: {} of {} [{}, {}) has {} elements", source, kind, I.names[pc.param], pc.start, pc.start + pc.len,
             t.numel());
      state[std::string(kind) + "." + key] = t.reshape({-1}).to(I.opts.device(), at::kFloat);
    }
  }
  I.adamw->load_state(state, steps, source);
}

ShardedDataParallel::Bytes ShardedDataParallel::bytes() const {
  const auto& I = *impl_;
  Bytes b;
  for (size_t u = 0; u < I.units.size(); ++u) {
    b.params += (I.sharded[u] ? I.master[u].numel() : I.flat[u].numel()) * 4;
    b.grads += I.grad[u].numel() * 4;
  }
  for (const auto& p : I.params)
    if (p.grad().defined()) b.grads += p.grad().numel() * int64_t(p.grad().element_size());
  for (const auto& kv : I.adamw->state_tensors()) b.optimizer += kv.second.numel() * int64_t(kv.second.element_size());
  b.gathered_peak = I.gathered_peak;
  b.prefetch_hits = I.prefetch_hits;
  b.prefetch_wasted = I.prefetch_wasted;
  return b;
}

}  // namespace drope::train
