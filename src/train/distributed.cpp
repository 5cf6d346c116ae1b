#include "drope/train/distributed.h"
#include "drope/core/environment.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <map>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <c10/util/Logging.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/cuda.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef DROPE_WITH_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include "drope/core/error.h"
#include "drope/core/numbers.h"

namespace drope::train {

namespace {

int env_int(const char* name, int def, int lo, int hi) {
  const char* v = env::get(name);
  if (!v) return def;
  const int64_t x = parse_count(v).value_or(-1);  // digits only, as launchers write them
  if (x < lo || x > hi) fail("environment variable {}='{}': expected an integer in [{}, {}]", name, v, lo, hi);
  return static_cast<int>(x);
}

}  // namespace

DistEnv read_dist_env() {
  DistEnv e;
  if (env::get("RANK") || env::get("WORLD_SIZE")) {
    if (!env::get("RANK") || !env::get("WORLD_SIZE")) fail("environment: RANK and WORLD_SIZE must be set together");
    e.world = env_int("WORLD_SIZE", 1, 1, 1 << 20);
    e.rank = env_int("RANK", 0, 0, e.world - 1);
    e.local_rank = env_int("LOCAL_RANK", e.rank, 0, 1 << 20);
    e.torchrun = env::get("TORCHELASTIC_RUN_ID") != nullptr || env::get("TORCHELASTIC_USE_AGENT_STORE") != nullptr;
    e.restart_count = env_int("TORCHELASTIC_RESTART_COUNT", 0, 0, 1 << 20);
  } else if (env::get("SLURM_PROCID") && env::get("SLURM_NTASKS")) {
    e.world = env_int("SLURM_NTASKS", 1, 1, 1 << 20);
    e.rank = env_int("SLURM_PROCID", 0, 0, e.world - 1);
    e.local_rank = env_int("SLURM_LOCALID", 0, 0, 1 << 20);
    e.slurm = true;
    e.restart_count = env_int("SLURM_RESTART_COUNT", 0, 0, 1 << 20);
  }
  // Read again when the process group is built; checked at start. LOCAL_RANK picks the CUDA device and
  // LOCAL_WORLD_SIZE the backend: a rank outside its node's count would share another's device unnoticed.
  const int local_world = env_int("LOCAL_WORLD_SIZE", 1, 1, 1 << 16);
  if (env::get("LOCAL_WORLD_SIZE") && env::get("LOCAL_RANK") && e.local_rank >= local_world)
    fail("environment: LOCAL_RANK={} must be below LOCAL_WORLD_SIZE={}", e.local_rank, local_world);
  e.single_rank_group = env_int("DROPE_DIST_SINGLE_RANK_GROUP", 0, 0, 1) == 1;
  if (e.single_rank_group && e.world == 1 && !env::get("MASTER_PORT"))
    fail("environment: DROPE_DIST_SINGLE_RANK_GROUP=1 needs MASTER_PORT (launch with torchrun)");
  if (const char* a = env::get("MASTER_ADDR")) e.master_addr = a;
  e.master_port = env_int("MASTER_PORT", 29500, 1, 65535);
  if (e.world > 1 && !env::get("MASTER_PORT") && !e.slurm)
    fail("environment: WORLD_SIZE={} but MASTER_PORT is not set (launch with torchrun)", e.world);
  return e;
}

struct Distributed::Impl {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<c10d::Backend> pg;
  std::string backend;
  torch::Device device{torch::kCPU};
  double timeout_s = 0;
};

namespace {
// The first line of an exception's message, without the C++ backtrace that c10 errors carry.
std::string first_line(const std::exception& e) {
  std::string detail = e.what();
  if (auto* ce = dynamic_cast<const c10::Error*>(&e)) detail = ce->what_without_backtrace();
  if (auto nl = detail.find('\n'); nl != std::string::npos) detail.resize(nl);
  return detail;
}

// Waits for a collective; a dead or hung peer becomes one clear error instead of a hang or a Gloo trace.
void wait(const DistEnv& env, double timeout_s, const c10::intrusive_ptr<c10d::Work>& work, const char* what) {
  try {
    work->wait();
  } catch (const std::exception& e) {
    const std::string detail = first_line(e);
    fail("rank {} of {}: {} failed: another rank died or did not answer within train.dist_timeout_s = {} s ({})",
         env.rank, env.world, what, timeout_s, detail);
  }
}
// c10d logs every failed attempt to reach the store, with a C++ backtrace, before it throws; the one-line
// error that follows says the same. Its logs stay off meanwhile unless TORCH_CPP_LOG_LEVEL asks for them.
class QuietC10Logs {
 public:
  QuietC10Logs() : saved_(FLAGS_caffe2_log_level) {
    if (!env::is_set("TORCH_CPP_LOG_LEVEL")) FLAGS_caffe2_log_level = 3;  // FATAL only
  }
  ~QuietC10Logs() { FLAGS_caffe2_log_level = saved_; }
  QuietC10Logs(const QuietC10Logs&) = delete;
  QuietC10Logs& operator=(const QuietC10Logs&) = delete;

 private:
  int saved_;
};

// The rendezvous store of this launch: a TCPStore at MASTER_ADDR:MASTER_PORT (this process serving it when
// `serve`), under a prefix per restart so that a restarted run never reads a previous attempt's keys.
c10::intrusive_ptr<c10d::Store> rendezvous_store(const DistEnv& e, bool serve, std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions so;
  so.port = static_cast<uint16_t>(e.master_port);
  so.isServer = serve;
  so.numWorkers = e.world;
  so.waitWorkers = false;
  so.timeout = timeout;
  return c10::make_intrusive<c10d::PrefixStore>(fmt::format("drope/{}", e.restart_count),
                                                c10::make_intrusive<c10d::TCPStore>(e.master_addr, so));
}

}  // namespace

Distributed::Distributed(const DistEnv& e, const torch::Device& device, double timeout_s, const Consensus& consensus)
    : env_(e), impl_(std::make_unique<Impl>()) {
  impl_->device = device;
  impl_->timeout_s = timeout_s;
  if (e.world == 1 && !e.single_rank_group) {
    impl_->backend = "none";
    return;
  }
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  try {
    const QuietC10Logs quiet;
    // torchrun's agent hosts the store; under Slurm rank 0 does.
    impl_->store = rendezvous_store(e, !e.torchrun && e.rank == 0, timeout);
  } catch (const std::exception& ex) {
    fail("rank {}: cannot reach the rendezvous store at {}:{} ({})", e.rank, e.master_addr, e.master_port,
         first_line(ex));
  }
  if (!consensus.empty() && e.world > 1) {
    const QuietC10Logs quiet;  // a timed-out wait is reported in one line below, not with c10's backtrace
    agree(consensus);
  }
  // NCCL refuses two ranks on one GPU (ncclCommInitRank: "Duplicate GPU detected"): ranks that share a device
  // (torchrun's LOCAL_WORLD_SIZE above the device count) use Gloo over the CUDA tensors instead.
  const int local_world = env_int("LOCAL_WORLD_SIZE", 1, 1, 1 << 16);
  const bool shared_gpu = device.is_cuda() && local_world > int(torch::cuda::device_count());
  if (device.is_cuda() && !shared_gpu) {
#ifdef DROPE_WITH_NCCL
    auto opts = c10d::ProcessGroupNCCL::Options::create();
    opts->timeout = timeout;
    impl_->pg = c10::make_intrusive<c10d::ProcessGroupNCCL>(impl_->store, e.rank, e.world, opts);
    impl_->backend = "nccl";
#else
    fail("this build has no NCCL support; train on CPU or rebuild with CUDA");
#endif
  } else {
    auto opts = c10d::ProcessGroupGloo::Options::create();
    opts->timeout = timeout;
    opts->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
    try {
      impl_->pg = c10::make_intrusive<c10d::ProcessGroupGloo>(impl_->store, e.rank, e.world, opts);
    } catch (const std::exception& ex) {
      fail("rank {} of {}: could not connect to the other ranks within train.dist_timeout_s = {} s ({})", e.rank,
           e.world, timeout_s, first_line(ex));
    }
    impl_->backend = "gloo";
  }
}

namespace {

std::vector<uint8_t> bytes_of(const std::string& s) { return {s.begin(), s.end()}; }
std::string string_of(const std::vector<uint8_t>& b) { return {b.begin(), b.end()}; }

std::string encode(const Consensus& c) {
  nlohmann::json j = nlohmann::json::array();
  std::set<std::string> keys;
  for (const auto& [k, v] : c) {
    TORCH_INTERNAL_ASSERT(keys.insert(k).second, "consensus key '", k, "' given twice");  // first_difference's map
    j.push_back({k, v});
  }
  return j.dump();
}

Consensus decode(const std::string& s) {
  Consensus c;
  for (const auto& kv : nlohmann::json::parse(s))
    c.emplace_back(kv.at(0).get<std::string>(), kv.at(1).get<std::string>());
  return c;
}

// The first key on which `theirs` (rank r) differs from `mine` (rank 0), as a sentence; empty when they agree.
std::string first_difference(const Consensus& mine, const Consensus& theirs, int r) {
  std::map<std::string, std::string> other(theirs.begin(), theirs.end());
  for (const auto& [k, v] : mine) {
    auto it = other.find(k);
    if (it == other.end()) return fmt::format("{} is '{}' on rank 0 but not set on rank {}", k, v, r);
    if (it->second != v) return fmt::format("{} is '{}' on rank 0 but '{}' on rank {}", k, v, it->second, r);
    other.erase(it);
  }
  if (!other.empty())
    return fmt::format("{} is '{}' on rank {} but not set on rank 0", other.begin()->first, other.begin()->second, r);
  return {};
}

std::atomic<bool> g_joined{false};     // this process published its consensus (or a failure) in the store
constexpr const char* kFailed = "(failed)";  // the one key of a rank's entry that says it could not start

// store.wait for `key` until `deadline`, in slices, so that SIGTERM or SIGINT ends a wait for the other ranks at
// once (say names what is awaited); at the deadline it throws what store.wait throws.
void wait_key(c10d::Store& store, const std::string& key, std::chrono::steady_clock::time_point deadline,
              const DistEnv& env, const std::string& what) {
  using std::chrono::milliseconds;
  for (;;) {
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now());
    try {
      store.wait({key}, std::clamp(left, milliseconds(1), milliseconds(500)));
      return;
    } catch (const c10::DistStoreError&) {
      if (stop_signal())
        fail("rank {} of {}: stopped by SIGTERM or SIGINT while waiting for {}", env.rank, env.world, what);
      if (left <= milliseconds(500)) throw;
    }
  }
}
}  // namespace

std::atomic<bool>& stop_signal() {
  static std::atomic<bool> stop{false};
  return stop;
}

void tell_peers_start_failed(const std::string& error) {
  if (g_joined.exchange(true)) return;
  try {
    const DistEnv e = read_dist_env();
    // Without torchrun rank 0 hosts the store: failing before it exists, it has nobody to tell.
    if (e.world == 1 || (e.rank == 0 && !e.torchrun)) return;
    const QuietC10Logs quiet;
    auto store = rendezvous_store(e, false, std::chrono::seconds(5));
    if (store->add(fmt::format("consensus/joined/{}", e.rank), 1) > 1) return;  // another process is this rank
    const std::string why = fmt::format("rank {} could not start: {}", e.rank, error);
    if (e.rank == 0) store->set("consensus/verdict", bytes_of("failed:" + why));  // the others wait for rank 0's
    else store->set(fmt::format("consensus/{}", e.rank), bytes_of(encode({{kFailed, why}})));
  } catch (const std::exception&) {
  }
}

// Before the process group exists: every rank publishes what must agree; rank 0 compares each rank's with its own
// and publishes one verdict that every rank reads. A mismatched WORLD_SIZE cannot form a process group, so this
// goes through the rendezvous store alone.
void Distributed::agree(const Consensus& mine) {
  auto& store = *impl_->store;
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(impl_->timeout_s * 1000));
  const std::string verdict_key = "consensus/verdict";
  // A second process with the same RANK (a rank started twice) would otherwise take the first one's place in the
  // process group, or fail at its first collective saying that another rank died.
  g_joined = true;
  if (store.add(fmt::format("consensus/joined/{}", env_.rank), 1) > 1)
    fail("rank {} of {}: another process already joined this run as rank {} (a rank started twice, or two "
         "processes given RANK={})",
         env_.rank, env_.world, env_.rank, env_.rank);
  store.set(fmt::format("consensus/{}", env_.rank), bytes_of(encode(mine)));
  const auto refuse = [&](const std::string& why) {
    fail("rank {} of {}: ranks disagree before the first step: {}; start every rank with the same config, flags, "
         "environment and binary, on files every rank sees the same (run.out_dir, data and run.init on a shared "
         "filesystem)",
         env_.rank, env_.world, why);
  };
  if (env_.rank == 0) {
    std::string verdict;
    int failed = -1;  // a rank that could not start: it never reads the verdict
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (int r = 1; r < env_.world && verdict.empty(); ++r) {
      const std::string key = fmt::format("consensus/{}", r);
      try {
        wait_key(store, key, deadline, env_, fmt::format("rank {}", r));
      } catch (const c10::Error&) {  // a signal's stop is ours (drope::Error) and goes through
        verdict = fmt::format(
            "missing:rank {} did not arrive within train.dist_timeout_s = {} s (it died before its first step, or it "
            "was started with another WORLD_SIZE, MASTER_ADDR, MASTER_PORT or restart count than rank 0's {}: "
            "TORCHELASTIC_RESTART_COUNT or SLURM_RESTART_COUNT)",
            r, impl_->timeout_s, env_.restart_count);
        break;
      }
      const Consensus theirs = decode(string_of(store.get(key)));
      if (theirs.size() == 1 && theirs[0].first == kFailed) {
        verdict = "failed:" + theirs[0].second;
        failed = r;
        break;
      }
      const std::string why = first_difference(mine, theirs, r);
      if (!why.empty()) verdict = "differ:" + why;
    }
    store.set(verdict_key, bytes_of(verdict.empty() ? std::string("ok") : verdict));
    if (!verdict.empty()) {
      // Rank 0 may host the store: it stays until every rank that arrived has read the verdict (bounded).
      for (int r = 1; r < env_.world; ++r) {
        if (r == failed || !store.check({fmt::format("consensus/{}", r)})) continue;
        try {
          store.wait({fmt::format("consensus/seen/{}", r)}, std::min(timeout, std::chrono::milliseconds(10000)));
        } catch (const std::exception&) {
        }
      }
    }
    if (verdict.rfind("missing:", 0) == 0) fail("rank 0 of {}: {}", env_.world, verdict.substr(8));
    if (verdict.rfind("failed:", 0) == 0) fail("rank 0 of {}: {}", env_.world, verdict.substr(7));
    if (!verdict.empty()) refuse(verdict.substr(7));
    return;
  }
  std::string verdict;
  try {
    wait_key(store, verdict_key, std::chrono::steady_clock::now() + timeout, env_, "rank 0's comparison of the ranks");
    verdict = string_of(store.get(verdict_key));
    store.set(fmt::format("consensus/seen/{}", env_.rank), bytes_of("1"));
  } catch (const c10::Error&) {  // a signal's stop is ours (drope::Error) and goes through
    fail("rank {} of {}: rank 0 did not compare the ranks' settings within train.dist_timeout_s = {} s (rank 0 died "
         "or never started, or the ranks were started with different WORLD_SIZE values or restart counts "
         "(TORCHELASTIC_RESTART_COUNT or SLURM_RESTART_COUNT): this rank's is {})",
         env_.rank, env_.world, impl_->timeout_s, env_.restart_count);
  }
  if (verdict == "ok") return;
  if (verdict.rfind("missing:", 0) == 0) fail("rank {} of {}: {}", env_.rank, env_.world, verdict.substr(8));
  if (verdict.rfind("failed:", 0) == 0) fail("rank {} of {}: {}", env_.rank, env_.world, verdict.substr(7));
  refuse(verdict.substr(7));
}

Distributed::~Distributed() = default;

std::string Distributed::backend() const { return impl_->backend; }

bool Distributed::grouped() const { return impl_->pg.defined(); }

double Distributed::mean(double v) {
  if (!grouped()) return v;
  std::vector<torch::Tensor> t{torch::full({1}, v, torch::TensorOptions().dtype(torch::kDouble).device(impl_->device))};
  wait(env_, impl_->timeout_s, impl_->pg->allreduce(t), "all-reduce");
  return t[0].item<double>() / env_.world;
}

void Distributed::broadcast(const std::vector<torch::Tensor>& tensors) {
  if (!grouped()) return;
  for (const auto& t : tensors) {
    std::vector<torch::Tensor> v{t};
    wait(env_, impl_->timeout_s, impl_->pg->broadcast(v), "broadcast");
  }
}

void Distributed::barrier() {
  if (!grouped()) return;
  wait(env_, impl_->timeout_s, impl_->pg->barrier(), "barrier");
}

double Distributed::sum(double v) { return mean(v) * env_.world; }

std::vector<int> Distributed::ranks_where(bool flag) {
  std::vector<int> out;
  if (!grouped()) {
    if (flag) out.push_back(env_.rank);
    return out;
  }
  // (world): a 1 at each rank whose flag is set, summed over ranks
  std::vector<torch::Tensor> t{
      torch::zeros({env_.world}, torch::TensorOptions().dtype(torch::kDouble).device(impl_->device))};
  if (flag) t[0][env_.rank].fill_(1.0);
  wait(env_, impl_->timeout_s, impl_->pg->allreduce(t), "all-reduce");
  const auto host = t[0].cpu();
  for (int r = 0; r < env_.world; ++r)
    if (host.data_ptr<double>()[r] != 0) out.push_back(r);
  return out;
}

void Collective::wait() {
  if (wait_) {
    auto w = std::move(wait_);
    wait_ = nullptr;
    w();
  }
}

Collective Distributed::reduce_scatter(const torch::Tensor& out, const torch::Tensor& in) {
  TORCH_CHECK(in.numel() == out.numel() * env_.world, "reduce_scatter: input ", in.numel(), " != world x ",
              out.numel());
  Collective c;
  if (!grouped()) {
    out.copy_(in);
    return c;
  }
  if (impl_->backend == "gloo" && in.is_cuda()) {  // Gloo has no reduce-scatter of CUDA tensors: through the host
    auto o = torch::empty(out.sizes(), out.options().device(torch::kCPU)), i = in.to(torch::kCPU);
    wait(env_, impl_->timeout_s, impl_->pg->_reduce_scatter_base(o, i), "gradient reduce-scatter");
    out.copy_(o);
    return c;
  }
  auto o = out, i = in;
  auto work = impl_->pg->_reduce_scatter_base(o, i);
  c.wait_ = [work, env = env_, t = impl_->timeout_s] { wait(env, t, work, "gradient reduce-scatter"); };
  return c;
}

Collective Distributed::all_gather(const torch::Tensor& out, const torch::Tensor& in) {
  TORCH_CHECK(out.numel() == in.numel() * env_.world, "all_gather: output ", out.numel(), " != world x ", in.numel());
  Collective c;
  if (!grouped()) {
    out.copy_(in);
    return c;
  }
  if (impl_->backend == "gloo" && in.is_cuda()) {  // Gloo has no all-gather of CUDA tensors: through the host
    auto o = torch::empty(out.sizes(), out.options().device(torch::kCPU)), i = in.to(torch::kCPU);
    wait(env_, impl_->timeout_s, impl_->pg->_allgather_base(o, i), "parameter all-gather");
    out.copy_(o);
    return c;
  }
  auto o = out, i = in;
  auto work = impl_->pg->_allgather_base(o, i);
  c.wait_ = [work, env = env_, t = impl_->timeout_s] { wait(env, t, work, "parameter all-gather"); };
  return c;
}

// ---- GradSync ------------------------------------------------------------------------------------------

struct GradSync::State {
  Distributed* dist = nullptr;
  std::vector<torch::Tensor> params;
  std::vector<int64_t> bucket_of;                // param index → bucket
  std::vector<std::vector<int64_t>> members;     // bucket → param indices
  std::vector<int64_t> pending;                  // bucket → parameters not yet accumulated
  std::vector<torch::Tensor> flat;               // bucket → buffer being reduced
  std::vector<c10::intrusive_ptr<c10d::Work>> work;
  int64_t next = 0;                              // next bucket to start
  bool armed = false;
  int64_t started_in_backward = 0;

  // Flattens bucket b's gradients (zeros for parameters without one) and starts its all-reduce.
  void start(int64_t b) {
    torch::NoGradGuard ng;
    std::vector<torch::Tensor> parts;
    for (int64_t i : members[b]) {
      const auto& g = params[i].grad();
      parts.push_back(g.defined() ? g.reshape({-1}) : torch::zeros({params[i].numel()}, params[i].options()));
    }
    std::vector<torch::Tensor> v{torch::cat(parts)};
    work[b] = dist->impl_->pg->allreduce(v);
    flat[b] = v[0];
  }
  void accumulated(int64_t i) {
    if (!armed) return;
    const int64_t b = bucket_of[i];
    if (pending[b] > 0) --pending[b];
    while (next < int64_t(members.size()) && pending[next] == 0) {
      start(next++);
      ++started_in_backward;
    }
  }
};

namespace {
struct AccumulatedHook final : torch::autograd::PostAccumulateGradHook {
  AccumulatedHook(std::weak_ptr<GradSync::State> s, int64_t i) : state(std::move(s)), index(i) {}
  void operator()(const torch::autograd::Variable&) override {
    if (auto s = state.lock()) s->accumulated(index);
  }
  std::weak_ptr<GradSync::State> state;
  int64_t index;
};
}  // namespace

GradSync::GradSync(Distributed& dist, std::vector<torch::Tensor> params, int64_t bucket_bytes)
    : state_(std::make_shared<State>()) {
  auto& st = *state_;
  st.dist = &dist;
  st.params = std::move(params);
  if (!dist.grouped()) return;
  st.bucket_of.assign(st.params.size(), 0);
  int64_t bytes = 0;
  for (int64_t i = int64_t(st.params.size()) - 1; i >= 0; --i) {
    const auto& p = st.params[i];
    if (st.members.empty() || (bytes > 0 && bytes + int64_t(p.nbytes()) > bucket_bytes) ||
        st.params[st.members.back().front()].scalar_type() != p.scalar_type()) {
      st.members.emplace_back();
      bytes = 0;
    }
    st.members.back().push_back(i);
    st.bucket_of[i] = int64_t(st.members.size()) - 1;
    bytes += int64_t(p.nbytes());
  }
  st.flat.resize(st.members.size());
  st.work.resize(st.members.size());
  st.pending.assign(st.members.size(), 0);
  for (size_t i = 0; i < st.params.size(); ++i)
    torch::autograd::impl::set_post_acc_grad_hooks(st.params[i], std::make_unique<AccumulatedHook>(state_, int64_t(i)));
}

GradSync::~GradSync() {
  for (const auto& p : state_->params)
    if (state_->dist->grouped()) torch::autograd::impl::set_post_acc_grad_hooks(p, nullptr);
}

int64_t GradSync::buckets() const { return int64_t(state_->members.size()); }

void GradSync::arm() {
  auto& st = *state_;
  if (!st.dist->grouped()) return;
  for (size_t b = 0; b < st.members.size(); ++b) st.pending[b] = int64_t(st.members[b].size());
  st.next = 0;
  st.started_in_backward = 0;
  st.armed = true;
}

void GradSync::finish() {
  auto& st = *state_;
  if (!st.dist->grouped()) return;
  st.armed = false;
  overlapped_ = st.started_in_backward;
  const int64_t nb = int64_t(st.members.size());
  for (; st.next < nb; ++st.next) st.start(st.next);  // parameters without gradients, or not armed
  torch::NoGradGuard ng;
  const auto& env = st.dist->env();
  for (int64_t b = 0; b < nb; ++b) {
    wait(env, st.dist->impl_->timeout_s, st.work[b], "gradient all-reduce");
    st.flat[b].div_(env.world);
    int64_t off = 0;
    for (int64_t i : st.members[b]) {
      auto& p = st.params[i];
      const int64_t n = p.numel();
      if (p.grad().defined()) p.mutable_grad().copy_(st.flat[b].narrow(0, off, n).view_as(p));
      off += n;
    }
    st.work[b].reset();
    st.flat[b] = torch::Tensor();
  }
  st.next = 0;
}

}  // namespace drope::train
