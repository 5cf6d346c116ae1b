#include "drope/bench/attention_bench.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <map>
#include <new>
#include <optional>
#include <thread>

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <fmt/format.h>
#include <torch/autograd.h>
#include <torch/cuda.h>
#include <torch/version.h>
#include <nlohmann/json.hpp>

#include "drope/core/cpu_budget.h"
#include "drope/core/error.h"
#include "drope/core/files.h"
#include "drope/kernels/cpu_isa.h"
#include "drope/ops/attention.h"
#include "drope/ops/attention_plan.h"
#include "drope/ops/attention_registry.h"

#ifdef DROPE_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace drope::bench {

namespace {

using Clock = std::chrono::steady_clock;
constexpr double kMiB = 1024.0 * 1024.0;
constexpr double kGiB = 1024.0 * kMiB;

const std::vector<std::string> kCases{"causal", "alibi", "window", "gqa"};
const std::vector<std::string> kImpls{"ours", "sdpa", "sdpa_mask", "reference"};

// Resident set size now, from /proc/self/statm (bytes); −1 where unavailable.
long long rss_bytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return -1;
  long long size = 0, resident = 0;
  const int n = std::fscanf(f, "%lld %lld", &size, &resident);
  std::fclose(f);
  if (n != 2) return -1;
  return resident * static_cast<long long>(sysconf(_SC_PAGESIZE));
}

long long maxrss_bytes() {
  rusage ru{};
  if (getrusage(RUSAGE_SELF, &ru) != 0) return -1;
  return static_cast<long long>(ru.ru_maxrss) * 1024;  // Linux: kilobytes
}

// Samples the RSS every ~1 ms on a background thread; stop() returns the peak growth over the start (MiB).
class RssSampler {
 public:
  RssSampler() : base_(rss_bytes()), peak_(base_) {
    if (base_ < 0) return;
    thread_ = std::thread([this] {
      while (!stop_.load(std::memory_order_relaxed)) {
        update(rss_bytes());
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    });
  }
  ~RssSampler() { stop(); }
  RssSampler(const RssSampler&) = delete;
  RssSampler& operator=(const RssSampler&) = delete;

  double stop() {
    if (thread_.joinable()) {
      stop_ = true;
      thread_.join();
    }
    if (base_ < 0) return -1;
    update(rss_bytes());
    return double(peak_.load() - base_) / kMiB;
  }

 private:
  void update(long long r) {
    long long p = peak_.load();
    while (r > p && !peak_.compare_exchange_weak(p, r)) {
    }
  }
  long long base_;
  std::atomic<long long> peak_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

std::string cpu_device() {
  std::ifstream in("/proc/cpuinfo");
  std::string line, model = "unknown CPU";
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      auto pos = line.find(':');
      if (pos != std::string::npos) model = line.substr(pos + 2);
      break;
    }
  }
  return fmt::format("CPU: {} ({} logical cores); {}; {}", model, std::thread::hardware_concurrency(),
                     kernels::describe_cpu_levels(), describe_cpu_budget());
}

size_t elt_size(at::ScalarType t) { return c10::elementSize(t); }

// Peak CUDA caching-allocator bytes: reset the peak and return the current bytes, then the peak growth
// in MiB. (-1 without CUDA support in this build.)
double gpu_memory_reset(bool cuda) {
#ifdef DROPE_WITH_CUDA
  if (cuda) {
    const auto dev = c10::cuda::current_device();
    c10::cuda::CUDACachingAllocator::resetPeakStats(dev);
    const auto st = c10::cuda::CUDACachingAllocator::getDeviceStats(dev);
    return double(st.allocated_bytes[size_t(c10::CachingAllocator::StatType::AGGREGATE)].current);
  }
#endif
  (void)cuda;
  return 0;
}

double gpu_memory_peak(double base) {
#ifdef DROPE_WITH_CUDA
  const auto st = c10::cuda::CUDACachingAllocator::getDeviceStats(c10::cuda::current_device());
  return (double(st.allocated_bytes[size_t(c10::CachingAllocator::StatType::AGGREGATE)].peak) - base) / kMiB;
#else
  (void)base;
  return -1;
#endif
}

std::string gpu_device() {
#ifdef DROPE_WITH_CUDA
  const auto* prop = at::cuda::getCurrentDeviceProperties();
  return fmt::format("CUDA: {} ({} SMs, {:.0f} GiB)", prop->name, prop->multiProcessorCount,
                     double(prop->totalGlobalMem) / double(1 << 30));
#else
  return "CUDA";
#endif
}

bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

// The forced backend an implementation names, if it names one.
std::optional<ops::AttnBackend> forced_backend(const std::string& impl) {
  ops::AttnBackend b;
  if (contains(attention_backend_impls(), impl) && ops::parse_attn_backend(impl.c_str(), &b)) return b;
  return std::nullopt;
}

bool dense_bias_impl(const std::string& impl) { return impl == "mem_efficient" || impl == "cudnn"; }

// One (case, T) setup: inputs, our params and what the baselines need.
struct Setup {
  std::string name;
  int64_t H = 0, Hkv = 0, T = 0;
  ops::AttentionParams p;
  std::vector<double> slopes;  // ALiBi
  bool sdpa_native = false;    // SDPA expresses it without a mask (is_causal, enable_gqa)
  bool mask_per_head = false;  // the dense mask is (1, H, T, S) rather than (T, S)
  double flops_fwd = 0;
};

Setup make_setup(const AttentionBenchOptions& o, const std::string& name, int64_t T) {
  Setup s;
  s.name = name;
  s.T = T;
  s.H = o.heads;
  s.Hkv = name == "gqa" ? o.gqa_kv_heads : o.heads;
  s.p.causal = true;
  const double B = double(o.batch), H = double(o.heads), D = double(o.head_dim), t = double(T);
  s.flops_fwd = 4.0 * B * H * t * t * D / 2.0;  // causal
  if (name == "alibi") {
    s.slopes = ops::alibi_slopes(o.heads);
    s.p.alibi_slopes = at::tensor(s.slopes, at::kDouble).to(at::kFloat);
    s.mask_per_head = true;
  } else if (name == "window") {
    s.p.window = o.window;
    s.flops_fwd = 4.0 * B * H * t * double(std::min(o.window, T)) * D;
  } else {
    s.sdpa_native = true;  // causal, gqa
  }
  return s;
}

// The dense additive mask users build for SDPA today: 0 where visible, −inf where masked, ALiBi bias
// −slope·(i − j) per head. (T, S), or (1, H, T, S) for ALiBi; dtype of the inputs.
at::Tensor dense_mask(const Setup& s, at::ScalarType dtype, const std::string& device) {
  const int64_t T = s.T, S = s.T;
  auto opt = at::TensorOptions().dtype(at::kFloat).device(device);
  auto qpos = at::arange(0, T, opt).unsqueeze(1);
  auto kpos = at::arange(0, S, opt).unsqueeze(0);
  auto dist = qpos - kpos;  // (T, S) = i − j
  auto allowed = dist.ge(0);
  if (s.p.window > 0) allowed = allowed & dist.lt(double(s.p.window));
  const double ninf = -std::numeric_limits<double>::infinity();
  at::Tensor m;
  if (s.mask_per_head) {
    auto slopes = s.p.alibi_slopes.to(opt).view({1, s.H, 1, 1});
    m = (-slopes * dist.view({1, 1, T, S})).masked_fill_(allowed.logical_not().view({1, 1, T, S}), ninf);
  } else {
    m = at::zeros({T, S}, opt).masked_fill_(allowed.logical_not(), ninf);
  }
  return m.to(dtype);
}

struct Inputs {
  at::Tensor q, k, v, g;
};

Inputs make_inputs(const AttentionBenchOptions& o, const Setup& s) {
  auto opt = at::TensorOptions().dtype(o.dtype).device(o.device);
  Inputs in;
  in.q = at::randn({o.batch, s.H, s.T, o.head_dim}, opt);
  in.k = at::randn({o.batch, s.Hkv, s.T, o.head_dim}, opt);
  in.v = at::randn({o.batch, s.Hkv, s.T, o.head_dim}, opt);
  in.g = at::randn({o.batch, s.H, s.T, o.head_dim}, opt);
  return in;
}

using AttnFn = std::function<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&)>;

AttnFn make_fn(const std::string& impl, const Setup& s, const at::Tensor& mask) {
  const bool gqa = s.H != s.Hkv;
  if (const auto b = forced_backend(impl))  // the guard is thread-local; autograd's backward keeps the choice
    return [p = s.p, b = *b](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
      ops::ForceAttentionBackend force(b);
      return ops::attention(q, k, v, p);
    };
  if (impl == "ours")
    return
        [p = s.p](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) { return ops::attention(q, k, v, p); };
  if (impl == "sdpa")
    return [gqa](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
      return at::scaled_dot_product_attention(q, k, v, std::nullopt, 0.0, /*is_causal=*/true, std::nullopt, gqa);
    };
  if (impl == "sdpa_mask")
    return [gqa, mask](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
      return at::scaled_dot_product_attention(q, k, v, mask, 0.0, /*is_causal=*/false, std::nullopt, gqa);
    };
  return [p = s.p](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
    return ops::reference_attention(q, k, v, p).out;
  };
}

// Analytic extra memory (bytes) and a one-word description.
std::pair<double, std::string> analytic_memory(const AttentionBenchOptions& o, const Setup& s,
                                               const std::string& impl) {
  const double B = double(o.batch), H = double(s.H), T = double(s.T), D = double(o.head_dim);
  const double out_lse = B * H * T * (D * double(elt_size(o.dtype)) + 4.0);
  const double mask = (s.mask_per_head ? H : 1.0) * T * T * double(elt_size(o.dtype));
  const double logits = B * H * T * T * (o.dtype == at::kDouble ? 8.0 : 4.0);
  if (impl == "ours" || impl == "sdpa" || impl == "flash" || impl == "own_cuda" || impl == "cudnn_graph")
    return {out_lse, "O(T·D)"};
  if (impl == "sdpa_mask") return {out_lse + mask, s.mask_per_head ? "O(T·S·H) mask" : "O(T·S) mask"};
  if (dense_bias_impl(impl)) {  // the plan's dense additive bias for ALiBi / windows (causal: a mask type)
    if (s.name == "alibi" || s.name == "window")
      return {out_lse + mask, s.mask_per_head ? "O(T·S·H) bias" : "O(T·S) bias"};
    return {out_lse, "O(T·D)"};
  }
  return {logits, "O(T·S·H)"};
}

// Estimated peak extra memory for the skip decision: the analytic buffers times how many are alive at once.
double estimated_bytes(const AttentionBenchOptions& o, const Setup& s, const std::string& impl, bool backward) {
  const auto [bytes, _] = analytic_memory(o, s, impl);
  if (impl == "ours" || impl == "sdpa" || impl == "flash" || impl == "own_cuda" || impl == "cudnn_graph")
    return bytes * (backward ? 6.0 : 1.0);
  if (dense_bias_impl(impl))
    return bytes * (backward ? 6.0 : 1.0) + 2.0 * (bytes - analytic_memory(o, s, "ours").first);
  if (impl == "sdpa_mask") {
    const double mask_f32 = (s.mask_per_head ? double(s.H) : 1.0) * double(s.T) * double(s.T) * 4.0;
    return bytes + 2.0 * mask_f32;  // float32 build temporaries
  }
  return bytes * (backward ? 5.0 : 3.0);  // logits, scaled/biased copies, probabilities; autograd keeps several
}

// CUDA: the plan backend that runs this call for `impl` (ours: the default choice; a backend impl: the forced
// one), or "" with `why` when the forced backend cannot run it. Empty for sdpa, sdpa_mask and reference.
std::string planned_backend(const std::string& impl, const Setup& s, const Inputs& in, bool training,
                            std::string* why) {
  const auto forced = forced_backend(impl);
  if (impl != "ours" && !forced) return "";
  std::optional<ops::ForceAttentionBackend> force;
  if (forced) force.emplace(*forced);
  try {
    return ops::attn_backend_name(ops::cuda_attention_plan(in.q, in.k, in.v, s.p, training).backend);
  } catch (const c10::Error& e) {
    std::string msg = e.what_without_backtrace();
    if (auto nl = msg.find('\n'); nl != std::string::npos) msg.resize(nl);
    const std::string marker = "cannot run this call: ";
    if (auto pos = msg.find(marker); pos != std::string::npos) msg = msg.substr(pos + marker.size());
    *why = msg.empty() ? "the backend cannot run this call" : msg;
    return "";
  }
}

struct Ctx {
  const AttentionBenchOptions& o;
  // Last successful measurement per (case, impl, mode): (forward FLOPs, median ms), for the budget prediction.
  std::map<std::string, std::pair<double, double>> last;
  std::map<std::string, bool> budget_stopped;
};

std::string key(const Setup& s, const std::string& impl, bool bwd) {
  return s.name + "/" + impl + (bwd ? "/fb" : "/f");
}

void log(const AttentionBenchOptions& o, const std::string& line) {
  if (o.log) o.log(line);
}

// Times `fn` in one mode; fills m. Returns the last forward output (forward mode only).
at::Tensor measure(Ctx& c, const Setup& s, const std::string& impl, bool bwd, const AttnFn& fn, const Inputs& in,
                   Measurement& m, std::optional<double> fwd_ms_hint) {
  const auto& o = c.o;
  const auto k = key(s, impl, bwd);
  m.flops = s.flops_fwd * (bwd ? 3.5 : 1.0);
  if (o.device == "cuda") {
    std::string why;
    m.backend = planned_backend(impl, s, in, bwd, &why);
    if (!why.empty()) {
      m.status = "n/a: " + why;
      log(o, fmt::format("  {:<7} T={:<6} {:<13} {:<8} {}", s.name, s.T, impl, bwd ? "fwd+bwd" : "fwd", m.status));
      return {};
    }
  }
  m.est_bytes = estimated_bytes(o, s, impl, bwd);
  if (m.est_bytes > o.max_mem_gb * kGiB) {
    m.status = "skipped (memory)";
    return {};
  }
  if (c.budget_stopped[k]) {
    m.status = "skipped (budget)";
    return {};
  }
  // Predict this measurement's time from the previous length (FLOP ratio), or from the forward (×3.5).
  double predicted_ms = -1;
  if (auto it = c.last.find(k); it != c.last.end()) predicted_ms = it->second.second * s.flops_fwd / it->second.first;
  else if (bwd && fwd_ms_hint) predicted_ms = *fwd_ms_hint * 3.5;
  if (predicted_ms > 0 && predicted_ms * double(o.warmup + o.repeats) > o.max_seconds * 1000.0) {
    m.status = "skipped (budget)";
    c.budget_stopped[k] = true;
    return {};
  }

  at::Tensor q = in.q, kk = in.k, v = in.v;
  if (bwd) {
    q = in.q.detach().requires_grad_(true);
    kk = in.k.detach().requires_grad_(true);
    v = in.v.detach().requires_grad_(true);
  }
  at::Tensor last_out;
  auto once = [&]() {
    if (bwd) {
      auto out = fn(q, kk, v);
      auto loss = (out * in.g).sum();
      auto grads = torch::autograd::grad({loss}, {q, kk, v});
      (void)grads;
    } else {
      at::NoGradGuard ng;
      last_out = fn(q, kk, v);
    }
  };
  const bool cuda = o.device == "cuda";
  // GPU work is asynchronous: wait for it before reading the clock.
  auto sync = [&] {
    if (cuda) torch::cuda::synchronize();
  };
  const long long maxrss0 = maxrss_bytes();
  RssSampler sampler;
  const double gpu_base = gpu_memory_reset(cuda);
  try {
    const auto t_start = Clock::now();
    for (int i = 0; i < o.warmup; ++i) once();
    sync();
    std::vector<double> ms;
    for (int i = 0; i < o.repeats; ++i) {
      const auto t0 = Clock::now();
      once();
      sync();
      ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
      const double spent = std::chrono::duration<double>(Clock::now() - t_start).count();
      if (spent + ms.back() / 1000.0 > o.max_seconds && i + 1 < o.repeats) break;  // keep the budget
    }
    std::sort(ms.begin(), ms.end());
    m.runs = int(ms.size());
    m.min_ms = ms.front();
    m.max_ms = ms.back();
    m.median_ms = ms.size() % 2 ? ms[ms.size() / 2] : 0.5 * (ms[ms.size() / 2 - 1] + ms[ms.size() / 2]);
    m.tflops = m.flops / (m.median_ms / 1000.0) / 1e12;
    m.status = "ok";
    c.last[k] = {s.flops_fwd, m.median_ms};
  } catch (const c10::Error& e) {
    m.status = "error: " + std::string(e.what_without_backtrace()).substr(0, 200);
  } catch (const std::bad_alloc&) {
    m.status = "error: out of memory";
  } catch (const std::exception& e) {
    m.status = std::string("error: ") + e.what();
  }
  m.peak_rss_mb = sampler.stop();
  if (cuda) m.peak_rss_mb = gpu_memory_peak(gpu_base);  // device memory is what matters on a GPU
  const long long maxrss1 = maxrss_bytes();
  if (maxrss0 >= 0 && maxrss1 >= 0) m.maxrss_growth_mb = double(maxrss1 - maxrss0) / kMiB;
  log(o, fmt::format("  {:<7} T={:<6} {:<10} {:<8} {}", s.name, s.T, impl, bwd ? "fwd+bwd" : "fwd",
                     m.ok() ? fmt::format("{:.2f} ms ({:.3f} TFLOP/s, peak RSS +{:.0f} MiB)", m.median_ms, m.tflops,
                                          m.peak_rss_mb)
                            : m.status));
  return last_out;
}

// One implementation of a (case, T): its row, the function timed and the dense mask it needs.
struct Slot {
  BenchRow row;
  AttnFn fn;
  at::Tensor mask;
  bool runs = true;  // false: not applicable (its row is final)
  std::vector<Measurement> fwd, fwdbwd;  // one per round
};

Slot make_slot(const AttentionBenchOptions& opt, const Setup& s, const std::string& impl) {
  Slot sl;
  auto& row = sl.row;
  row.case_name = s.name;
  row.impl = impl;
  row.T = s.T;
  row.kv_heads = s.Hkv;
  std::tie(row.analytic_bytes, row.analytic_note) = analytic_memory(opt, s, impl);
  if (impl == "sdpa" && !s.sdpa_native) {
    row.fwd.status = row.fwdbwd.status = "n/a";
    row.analytic_note = "n/a";
    row.analytic_bytes = -1;
    sl.runs = false;
    return sl;
  }
  if (!opt.forward) row.fwd.status = "not run";
  if (!opt.backward) row.fwdbwd.status = "not run";
  if (impl == "sdpa_mask") {
    const bool any = (opt.forward && estimated_bytes(opt, s, impl, false) <= opt.max_mem_gb * kGiB) ||
                     (opt.backward && estimated_bytes(opt, s, impl, true) <= opt.max_mem_gb * kGiB);
    if (any) sl.mask = dense_mask(s, opt.dtype, opt.device);
  }
  sl.fn = make_fn(impl, s, sl.mask);
  return sl;
}

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// A slot's measurement over rounds: the first round's numbers, the time the median of the rounds' medians, the
// extremes over all runs, and each round's time over ours's in that round. Not ok if any round was not.
Measurement combine(const std::vector<Measurement>& rounds, const std::vector<Measurement>* ours) {
  Measurement m = rounds.front();
  if (rounds.size() == 1) return m;
  for (size_t i = 0; i < rounds.size(); ++i) {
    const auto& x = rounds[i];
    if (!x.ok()) return x;
    m.round_ms.push_back(x.median_ms);
    m.min_ms = std::min(m.min_ms, x.min_ms);
    m.max_ms = std::max(m.max_ms, x.max_ms);
    if (i > 0) m.runs += x.runs;
    if (ours && i < ours->size() && (*ours)[i].ok()) m.ratio_ours.push_back(x.median_ms / (*ours)[i].median_ms);
  }
  m.median_ms = median_of(m.round_ms);
  m.tflops = m.flops / (m.median_ms / 1000.0) / 1e12;
  return m;
}

// Every implementation of one (case, T), in turn, once per round; rows with medians over rounds and per-round
// ratios to ours; rounds in which a measurement's runs swung more than busy_spread flagged in r.busy.
void run_case(Ctx& c, AttentionBenchResult& r, const std::string& cname, int64_t T) {
  const auto& opt = c.o;
  const Setup s = make_setup(opt, cname, T);
  const Inputs in = make_inputs(opt, s);
  std::vector<Slot> slots;
  for (const auto& impl : opt.impls) slots.push_back(make_slot(opt, s, impl));
  at::Tensor ours_out;
  for (int round = 0; round < opt.rounds; ++round) {
    std::string busy;
    for (auto& sl : slots) {
      if (!sl.runs) continue;
      std::optional<double> fwd_ms;
      if (opt.forward) {
        Measurement m;
        auto out = measure(c, s, sl.row.impl, false, sl.fn, in, m, std::nullopt);
        if (m.ok()) fwd_ms = m.median_ms;
        if (round == 0 && out.defined()) {
          if (sl.row.impl == "ours") {
            ours_out = out;
            sl.row.max_abs_diff = 0;
          } else if (ours_out.defined()) {
            sl.row.max_abs_diff = (out.to(at::kDouble) - ours_out.to(at::kDouble)).abs().max().item<double>();
          }
        }
        sl.fwd.push_back(m);
      }
      if (opt.backward) {
        Measurement m;
        measure(c, s, sl.row.impl, true, sl.fn, in, m, fwd_ms);
        sl.fwdbwd.push_back(m);
      }
      for (const auto* v : {&sl.fwd, &sl.fwdbwd})
        if (!v->empty() && v->back().ok() && v->back().max_ms > opt.busy_spread * v->back().min_ms && busy.empty())
          busy = fmt::format("{} T={} round {} ({} {} spread {:.2f})", cname, T, round + 1, sl.row.impl,
                             v == &sl.fwd ? "fwd" : "fwd+bwd", v->back().max_ms / v->back().min_ms);
    }
    if (opt.rounds > 1 && !busy.empty()) r.busy.push_back(busy);
  }
  const Slot* ours = nullptr;
  for (const auto& sl : slots)
    if (sl.row.impl == "ours") ours = &sl;
  for (auto& sl : slots) {
    if (sl.runs) {
      if (!sl.fwd.empty()) sl.row.fwd = combine(sl.fwd, ours ? &ours->fwd : nullptr);
      if (!sl.fwdbwd.empty()) sl.row.fwdbwd = combine(sl.fwdbwd, ours ? &ours->fwdbwd : nullptr);
    }
    r.rows.push_back(sl.row);
  }
}

void validate(const AttentionBenchOptions& o) {
  if (o.lengths.empty()) fail("attention bench: no lengths given");
  if (o.device != "cpu" && o.device != "cuda")
    fail("attention bench: --device must be cpu or cuda, got '{}'", o.device);
  if (o.device == "cuda" && !torch::cuda::is_available())
    fail("attention bench: --device cuda, but no CUDA device is available on this machine");
#ifndef DROPE_WITH_CUDA
  if (o.device == "cuda" && o.dtype != at::kFloat && o.dtype != at::kDouble)
    fail("attention bench: this build has no CUDA kernels (built without nvcc); 'ours' would run the reference");
#endif
  for (const auto& i : o.impls) {
    if (!forced_backend(i)) continue;
    if (o.device != "cuda")
      fail("attention bench: --impls {} names a CUDA attention backend of the plan (flash, mem_efficient, cudnn, "
           "own_cuda); it needs --device cuda (on {} use ours, sdpa, sdpa_mask, reference)",
           i, o.device);
#ifndef DROPE_WITH_CUDA
    fail("attention bench: --impls {} needs a build with CUDA kernels (this one was built without nvcc)", i);
#endif
  }
  for (auto T : o.lengths)
    if (T <= 0 || T > (int64_t(1) << 22)) fail("attention bench: --lengths must be in [1, 4194304], got {}", T);
  if (o.batch <= 0 || o.heads <= 0 || o.head_dim <= 0)
    fail("attention bench: batch, heads and head dim must be positive");
  if (o.batch > 4096 || o.heads > 4096 || o.head_dim > 1024)
    fail("attention bench: --batch and --heads must be at most 4096 and --head-dim at most 1024, got {}, {}, {}",
         o.batch, o.heads, o.head_dim);
  // q, k, v, out and their gradients (8 tensors of B·H·T·D) must fit in this machine's available memory before
  // anything is allocated (--max-mem-gb then skips single measurements, e.g. a dense mask, that do not fit).
  const double elt = o.dtype == at::kDouble ? 8 : o.dtype == at::kFloat ? 4 : 2;
  const double avail_gb = double(available_memory_bytes()) / double(1 << 30);
  for (auto T : o.lengths) {
    const double gb = 8 * double(o.batch) * double(o.heads) * double(T) * double(o.head_dim) * elt / double(1 << 30);
    if (avail_gb > 0 && o.device == "cpu" && gb > avail_gb)
      fail("attention bench: --lengths {} needs {:.1f} GB for q, k, v, out and their gradients alone, more than the "
           "{:.1f} GB of memory available",
           T, gb, avail_gb);
  }
  if (o.gqa_kv_heads <= 0 || o.heads % o.gqa_kv_heads != 0)
    fail("attention bench: heads ({}) must be a multiple of the GQA kv heads ({})", o.heads, o.gqa_kv_heads);
  if (o.window <= 0) fail("attention bench: --window must be positive, got {}", o.window);
  if (o.dtype != at::kFloat && o.dtype != at::kBFloat16 && o.dtype != at::kDouble)
    fail("attention bench: dtype must be float32, bfloat16 or float64");
  if (o.repeats < 1) fail("attention bench: --repeats must be >= 1, got {}", o.repeats);
  if (o.rounds < 1 || o.rounds > 1000) fail("attention bench: --rounds must be in [1, 1000], got {}", o.rounds);
  if (o.warmup < 0) fail("attention bench: --warmup must be >= 0, got {}", o.warmup);
  if (!(o.max_seconds > 0)) fail("attention bench: --max-seconds must be positive");
  if (!(o.max_mem_gb > 0)) fail("attention bench: --max-mem-gb must be positive");
  if (o.cases.empty() || o.impls.empty()) fail("attention bench: need at least one case and one implementation");
  for (const auto& c : o.cases)
    if (!contains(kCases, c)) fail("attention bench: unknown case '{}' (causal, alibi, window, gqa)", c);
  for (const auto& i : o.impls)
    if (!contains(kImpls, i) && !forced_backend(i))
      fail("attention bench: unknown implementation '{}' (ours, sdpa, sdpa_mask, reference; on CUDA also flash, "
           "mem_efficient, cudnn, cudnn_graph, own_cuda)",
           i);
  if (!o.forward && !o.backward) fail("attention bench: nothing to measure (neither forward nor backward)");
}

std::string dtype_name(at::ScalarType t) {
  return t == at::kFloat ? "float32" : t == at::kBFloat16 ? "bfloat16" : t == at::kDouble ? "float64" : "?";
}

std::string mb(double bytes) {
  if (bytes < 0) return "-";
  if (bytes >= kGiB) return fmt::format("{:.2f} GiB", bytes / kGiB);
  return fmt::format("{:.1f} MiB", bytes / kMiB);
}

std::string case_title(const AttentionBenchOptions& o, const std::string& c) {
  if (c == "causal") return "plain causal";
  if (c == "alibi") return "causal + ALiBi (slopes per head; SDPA needs a (1,H,T,T) additive mask)";
  if (c == "window") return fmt::format("causal + sliding window W={} (SDPA needs a (T,T) additive mask)", o.window);
  return fmt::format("causal GQA {}:1 (H={}, H_kv={}; SDPA enable_gqa=true)", o.heads / o.gqa_kv_heads, o.heads,
                     o.gqa_kv_heads);
}

}  // namespace

const std::vector<std::string>& attention_backend_impls() {
  // The registry's CUDA backends, forced one at a time (sdpa and reference have rows of their own).
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const auto* b : ops::attn_backends())
      if ((b->devices & ops::kAttnCuda) && !contains(kImpls, b->name)) v.emplace_back(b->name);
    return v;
  }();
  return names;
}

std::vector<std::string> default_attention_impls(const std::string& device) {
  if (device != "cuda") return kImpls;
  std::vector<std::string> v{"ours"};
  for (const auto& b : attention_backend_impls()) v.push_back(b);
  for (const char* i : {"sdpa", "sdpa_mask", "reference"}) v.emplace_back(i);
  return v;
}

AttentionBenchResult run_attention_bench(const AttentionBenchOptions& opt) {
  validate(opt);
  AttentionBenchResult r;
  r.options = opt;
  r.device = opt.device == "cuda" ? gpu_device() : cpu_device();
  r.torch_version = TORCH_VERSION;
  r.threads = at::get_num_threads();
  r.notes = {
      "time: median of the timed runs (wall clock, ms); TFLOP/s from the analytic FLOPs 4·B·H·T·S_eff·D "
      "(S_eff = T/2 causal, min(W,T) window), backward counted ×2.5 (fwd+bwd ×3.5)",
      "fwd+bwd: forward then backward of sum(out·g) w.r.t. q, k, v (torch::autograd::grad)",
      "mem analytic: extra memory of the method — ours/sdpa out+lse O(T·D); sdpa_mask adds the dense mask "
      "(built once outside the timed region); reference one float32 (B,H,T,S) logits buffer (its peak is several)",
      "peak RSS: measured — resident set sampled every ~1 ms during warmup+repeats, peak minus RSS at start "
      "(JSON also has maxrss_growth_mb: getrusage ru_maxrss growth, 0 when below the process's earlier peak)",
      "ours×: time of this implementation / time of ours (>1: ours is faster)",
      "max|Δ|: max abs difference of the forward output against ours",
      fmt::format("skipped (memory): estimated peak extra memory > --max-mem-gb {}; skipped (budget): predicted time "
                  "(from the previous length) × (warmup+repeats) > --max-seconds {}",
                  opt.max_mem_gb, opt.max_seconds),
  };
  Ctx c{r.options, {}, {}};
  at::manual_seed(0);
  for (const auto& cname : opt.cases)
    for (auto T : opt.lengths) run_case(c, r, cname, T);
  return r;
}

std::string format_attention_table(const AttentionBenchResult& r) {
  const auto& o = r.options;
  std::string out;
  out += fmt::format("drope-bench attention — {} | torch {} | {} threads | B={} H={} D={} {} | warmup {} repeats {}\n",
                     r.device, r.torch_version, r.threads, o.batch, o.heads, o.head_dim, dtype_name(o.dtype), o.warmup,
                     o.repeats);
  auto time_cell = [](const Measurement& m) -> std::string {
    if (m.ok()) return fmt::format("{:.2f}", m.median_ms);
    if (m.status.rfind("skipped (budget)", 0) == 0) return "skip(budget)";
    if (m.status.rfind("skipped (memory)", 0) == 0) return "skip(mem)";
    if (m.status.rfind("error", 0) == 0) return "error";
    if (m.status.rfind("n/a", 0) == 0) return "n/a";
    return m.status;
  };
  auto tf_cell = [](const Measurement& m) { return m.ok() ? fmt::format("{:.3f}", m.tflops) : std::string("-"); };
  auto rss_cell = [](const Measurement& m) {
    return m.ok() && m.peak_rss_mb >= 0 ? fmt::format("{:.0f} MiB", m.peak_rss_mb) : std::string("-");
  };
  // CUDA: the plan backend that ran each measurement (fwd/fwd+bwd) as a last column.
  const bool cuda = o.device == "cuda";
  auto backend_cell = [&](const BenchRow& row) -> std::string {
    if (!cuda) return "";
    const auto& f = row.fwd.backend;
    const auto& b = row.fwdbwd.backend;
    if (f.empty() && b.empty()) return "  -";
    return "  " + (f == b || b.empty() ? f : f.empty() ? b : f + "/" + b);
  };
  const std::string header =
      fmt::format("{:>6}  {:<10} {:>12} {:>8} {:>12} {:>8} {:>7} {:>7}  {:>20} {:>9} {:>9} {:>9}{}\n", "T", "impl",
                  "fwd ms", "TFLOP/s", "fwd+bwd ms", "TFLOP/s", "ours×f", "ours×fb", "mem analytic",
                  cuda ? "mem fwd" : "RSS fwd", cuda ? "mem f+b" : "RSS f+b", "max|Δ|", cuda ? "  backend f/fb" : "");
  std::vector<std::string> errors;
  for (const auto& cname : o.cases) {
    out += fmt::format("\n== {}: {}\n", cname, case_title(o, cname));
    out += header;
    for (auto T : o.lengths) {
      const BenchRow* ours = nullptr;
      for (const auto& row : r.rows)
        if (row.case_name == cname && row.T == T && row.impl == "ours") ours = &row;
      for (const auto& row : r.rows) {
        if (row.case_name != cname || row.T != T) continue;
        auto ratio = [&](const Measurement& m, const Measurement* mo) -> std::string {
          if (!mo || !mo->ok() || !m.ok()) return "-";
          return fmt::format("{:.2f}", m.median_ms / mo->median_ms);
        };
        const std::string mem =
            row.analytic_bytes < 0 ? "-" : fmt::format("{} {}", mb(row.analytic_bytes), row.analytic_note);
        out += fmt::format(
            "{:>6}  {:<10} {:>12} {:>8} {:>12} {:>8} {:>7} {:>7}  {:>20} {:>9} {:>9} {:>9}{}\n", T, row.impl,
            time_cell(row.fwd), tf_cell(row.fwd), time_cell(row.fwdbwd), tf_cell(row.fwdbwd),
            ratio(row.fwd, ours ? &ours->fwd : nullptr), ratio(row.fwdbwd, ours ? &ours->fwdbwd : nullptr), mem,
            rss_cell(row.fwd), rss_cell(row.fwdbwd),
            row.max_abs_diff >= 0 ? fmt::format("{:.1e}", row.max_abs_diff) : std::string("-"), backend_cell(row));
        for (const auto* m : {&row.fwd, &row.fwdbwd})
          if (m->status.rfind("error", 0) == 0)
            errors.push_back(fmt::format("{} T={} {}: {}", cname, T, row.impl, m->status));
          else if (m->status.rfind("n/a: ", 0) == 0)  // a forced CUDA backend that cannot run the call
            errors.push_back(
                fmt::format("{} T={} {} {}: {}", cname, T, row.impl, m == &row.fwd ? "fwd" : "fwd+bwd", m->status));
      }
    }
  }
  if (o.rounds > 1) {
    out +=
        fmt::format("\nper-round time / ours (median [range] over {} interleaved rounds), fwd | fwd+bwd:\n", o.rounds);
    auto stats = [](const Measurement& m) -> std::string {
      if (m.ratio_ours.empty()) return "-";
      const auto [lo, hi] = std::minmax_element(m.ratio_ours.begin(), m.ratio_ours.end());
      return fmt::format("{:.2f} [{:.2f}–{:.2f}]", median_of(m.ratio_ours), *lo, *hi);
    };
    for (const auto& row : r.rows)
      if (row.impl != "ours" && (row.fwd.ok() || row.fwdbwd.ok()))
        out +=
            fmt::format("  {} T={} {}: {} | {}\n", row.case_name, row.T, row.impl, stats(row.fwd), stats(row.fwdbwd));
    out += r.busy.empty() ? "  busy rounds: none\n" : "";
    for (const auto& b : r.busy) out += "  busy: " + b + "\n";
  }
  out += "\nnotes:\n";
  for (const auto& n : r.notes) out += "  - " + n + "\n";
  for (const auto& e : errors) out += "  ! " + e + "\n";
  return out;
}

std::string attention_bench_json(const AttentionBenchResult& r) {
  using nlohmann::json;
  const auto& o = r.options;
  auto meas = [](const Measurement& m) {
    json j{{"status", m.status}, {"flops", m.flops}, {"est_bytes", m.est_bytes}};
    if (!m.backend.empty()) j["backend"] = m.backend;
    if (m.ok()) {
      j["median_ms"] = m.median_ms;
      j["min_ms"] = m.min_ms;
      j["max_ms"] = m.max_ms;
      if (!m.round_ms.empty()) j["round_ms"] = m.round_ms;
      if (!m.ratio_ours.empty()) j["round_ratio_vs_ours"] = m.ratio_ours;
      j["runs"] = m.runs;
      j["tflops"] = m.tflops;
    }
    if (m.peak_rss_mb >= 0) j["peak_rss_growth_mb"] = m.peak_rss_mb;
    if (m.maxrss_growth_mb >= 0) j["maxrss_growth_mb"] = m.maxrss_growth_mb;
    return j;
  };
  json rows = json::array();
  for (const auto& row : r.rows) {
    json j{{"case", row.case_name},
           {"impl", row.impl},
           {"T", row.T},
           {"S", row.T},
           {"kv_heads", row.kv_heads},
           {"analytic_extra_bytes", row.analytic_bytes},
           {"analytic_note", row.analytic_note},
           {"fwd", meas(row.fwd)},
           {"fwdbwd", meas(row.fwdbwd)}};
    if (row.max_abs_diff >= 0) j["max_abs_diff_vs_ours"] = row.max_abs_diff;
    rows.push_back(std::move(j));
  }
  json j{{"benchmark", "attention"},
         {"device", r.device},
         {"torch_version", r.torch_version},
         {"threads", r.threads},
         {"options",
          {{"lengths", o.lengths},
           {"batch", o.batch},
           {"heads", o.heads},
           {"gqa_kv_heads", o.gqa_kv_heads},
           {"head_dim", o.head_dim},
           {"window", o.window},
           {"dtype", dtype_name(o.dtype)},
           {"repeats", o.repeats},
           {"rounds", o.rounds},
           {"warmup", o.warmup},
           {"max_seconds", o.max_seconds},
           {"max_mem_gb", o.max_mem_gb},
           {"cases", o.cases},
           {"impls", o.impls}}},
         {"notes", r.notes},
         {"busy_rounds", r.busy},
         {"rows", rows}};
  return j.dump(2) + "\n";
}

void write_attention_bench_json(const AttentionBenchResult& r, const std::string& path) {
  write_file_atomic(path, attention_bench_json(r));
}

}  // namespace drope::bench
