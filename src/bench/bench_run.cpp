// The drope-bench runners (bench/runners.h): attention, layers and generate.
#include "drope/bench/runners.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <fstream>
#include <functional>
#include <random>
#include <vector>

#include <ATen/Parallel.h>
#include <fmt/format.h>
#include <torch/cuda.h>
#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include "drope/core/cpu_budget.h"
#include "drope/core/error.h"
#include "drope/core/files.h"
#include "drope/core/log.h"
#include "drope/eval/generate.h"
#include "drope/io/model_io.h"
#include "drope/ops/layers.h"
#include "round_robin.h"

namespace drope::bench {

void run_attention(const AttentionRun& r) {
  AttentionBenchOptions opt = r.options;
  opt.dtype = r.dtype == "bfloat16" ? at::kBFloat16 : r.dtype == "float64" ? at::kDouble : at::kFloat;
  opt.backward = !r.forward_only;
  if (r.default_impls) opt.impls = default_attention_impls(opt.device);
  opt.log = [](const std::string& line) { logging::info("{}", line); };
  const auto res = run_attention_bench(opt);
  fmt::print("{}", format_attention_table(res));
  if (!r.json.empty()) {
    write_attention_bench_json(res, r.json);
    logging::info("wrote {}", r.json);
  }
}

namespace {

// One layer benchmark: the op on its inputs (fused, or composite under ops::ForceCompositeLayers).
struct LayerCase {
  std::string name;
  std::vector<torch::Tensor> inputs;
  std::function<torch::Tensor(const std::vector<torch::Tensor>&)> op;
};

std::vector<LayerCase> layer_cases(const LayersRun& lo, const torch::TensorOptions& opt) {
  torch::manual_seed(0);
  const int64_t B = lo.batch, T = lo.seq;
  auto angle = torch::rand({T, lo.head_dim / 2}, opt) * 6;
  auto cos = torch::cat({angle.cos(), angle.cos()}, -1), sin = torch::cat({angle.sin(), angle.sin()}, -1);
  auto rms_w = torch::randn({lo.hidden}, opt);
  return {
      {"rms_norm",
       {torch::randn({B, T, lo.hidden}, opt), rms_w},
       [](const std::vector<torch::Tensor>& t) { return ops::rms_norm(t[0], t[1], 1e-5); }},
      // q as the model passes it: a (B, T, H, D) projection viewed as (B, H, T, D).
      {"rotary",
       {torch::randn({B, T, lo.heads, lo.head_dim}, opt).transpose(1, 2)},
       [cos, sin](const std::vector<torch::Tensor>& t) { return ops::rotary(t[0], cos, sin); }},
      // The MLP's hidden activation silu(x·gateᵀ)·(x·upᵀ): ATen runs two GEMMs, silu and a product.
      {"swiglu",
       {torch::randn({B, T, lo.hidden}, opt), torch::randn({lo.ffn, lo.hidden}, opt) * 0.05,
        torch::randn({lo.ffn, lo.hidden}, opt) * 0.05},
       [](const std::vector<torch::Tensor>& t) { return ops::swiglu(t[0], t[1], {}, t[2], {}); }},
      // The attention's q, k and v projections (summed, so that one tensor comes out): three GEMMs in ATen.
      {"qkv_proj",
       {torch::randn({B, T, lo.hidden}, opt), torch::randn({lo.heads * lo.head_dim, lo.hidden}, opt) * 0.05,
        torch::randn({lo.kv_heads * lo.head_dim, lo.hidden}, opt) * 0.05,
        torch::randn({lo.kv_heads * lo.head_dim, lo.hidden}, opt) * 0.05},
       [](const std::vector<torch::Tensor>& t) {
         auto p = ops::linear_split(t[0], {t[1], t[2], t[3]});
         return p[0].sum(-1) + p[1].sum(-1) + p[2].sum(-1);
       }},
  };
}

// Median times of the fused and the ATen path, timed alternately (fused, ATen, fused, …).
std::array<double, 2> median_ms(int repeats, const std::function<void(bool composite)>& f) {
  const auto med = median_ms_round_robin(repeats, {[&] { f(false); },
                                                   [&] {
                                                     ops::ForceCompositeLayers force;
                                                     f(true);
                                                   }});
  return {med[0], med[1]};
}

// VmHWM, not ru_maxrss: Linux carries ru_maxrss across execve, so a child of a big parent (the Python
// benchmark driver) would report the parent's peak. -1 when unknown.
double peak_rss_kb() {
  double hwm_kb = -1;
  std::ifstream st("/proc/self/status");
  std::string k;
  while (st >> k)
    if (k == "VmHWM:") {
      st >> hwm_kb;
      break;
    }
  return hwm_kb;
}

}  // namespace

void run_layers(const LayersRun& lo) {
  if (lo.batch < 1 || lo.seq < 1 || lo.hidden < 1 || lo.heads < 1 || lo.kv_heads < 1 || lo.ffn < 1 || lo.head_dim < 2 ||
      lo.head_dim % 2 || lo.repeats < 1)
    fail("drope-bench layers: sizes and --repeats must be >= 1, --head-dim even");
  {
    // The cases' inputs, and during one case its outputs and gradients (the SwiGLU's gate|up the largest).
    const double elt = lo.dtype == "float64" ? 8 : 4, bt = double(lo.batch) * double(lo.seq);
    const double hd = double(lo.head_dim), proj = double(lo.heads + 2 * lo.kv_heads) * hd;
    const double inputs = 3 * bt * double(lo.hidden) + bt * double(lo.heads) * hd +
                          2 * double(lo.ffn) * double(lo.hidden) + proj * double(lo.hidden);
    const double per_case =
        3 * bt * std::max({double(lo.hidden), double(lo.heads) * hd, proj}) + 4 * bt * double(lo.ffn);
    check_memory_estimate(elt * (2 * inputs + per_case), "drope-bench layers with these sizes",
                          "use a smaller --batch, --seq, --hidden or --ffn");
  }
  if (lo.threads > 0) at::set_num_threads(lo.threads);
  const auto opt = torch::TensorOptions().dtype(lo.dtype == "float64" ? torch::kDouble : torch::kFloat);
  auto cases = layer_cases(lo, opt);
  nlohmann::json out = nlohmann::json::array();
  fmt::print(
      "batch {} x seq {}, hidden {}, heads {} ({} kv) x {}, ffn {}, {}, {} threads; median of {} alternating runs (ms)\n",
      lo.batch, lo.seq, lo.hidden, lo.heads, lo.kv_heads, lo.head_dim, lo.ffn, lo.dtype, at::get_num_threads(),
      lo.repeats);
  fmt::print("| op | fused fwd | ATen fwd | speed-up | fused fwd+bwd | ATen fwd+bwd | speed-up |\n"
             "|---|---:|---:|---:|---:|---:|---:|\n");
  for (auto& c : cases) {
    double t[2][2];  // [fused/aten][fwd/fwdbwd]
    const auto fwd = median_ms(lo.repeats, [&](bool) {
      torch::NoGradGuard ng;
      c.op(c.inputs);
    });
    std::vector<torch::Tensor> leaves;
    for (auto& x : c.inputs) leaves.push_back(x.detach().requires_grad_(true));
    auto g = torch::randn_like(c.op(leaves).detach());
    const auto both = median_ms(lo.repeats, [&](bool) {
      auto y = c.op(leaves);
      torch::autograd::grad({y}, leaves, {g});
    });
    for (int i = 0; i < 2; ++i) t[i][0] = fwd[i], t[i][1] = both[i];
    fmt::print("| {} | {:.3f} | {:.3f} | {:.2f}x | {:.3f} | {:.3f} | {:.2f}x |\n", c.name, t[0][0], t[1][0],
               t[1][0] / t[0][0], t[0][1], t[1][1], t[1][1] / t[0][1]);
    out.push_back({{"op", c.name},
                   {"fused_fwd_ms", t[0][0]},
                   {"aten_fwd_ms", t[1][0]},
                   {"fused_fwd_bwd_ms", t[0][1]},
                   {"aten_fwd_bwd_ms", t[1][1]}});
  }
  if (!lo.json.empty()) write_file_atomic(lo.json, out.dump(2) + "\n");
}

void run_generate(const GenerateRun& g) {
  if (g.context < 1 || g.new_tokens < 1 || g.repeats < 1) fail("--context, --new-tokens and --repeats must be >= 1");
  if (g.threads > 0) at::set_num_threads(g.threads);
  if (g.device == "cuda" && !torch::cuda::is_available())
    fail("drope-bench generate: --device cuda, but no CUDA device is available on this machine");
  auto model = io::load_model(g.model);
  model->to(torch::Device(g.device));
  model->eval();
  std::mt19937_64 rng(g.seed);
  std::vector<int32_t> prompt(size_t(g.context));
  for (auto& t : prompt) t = int32_t(rng() % uint64_t(model->config().vocab_size));
  eval::GenerateOptions o;
  o.prefill_chunk = g.chunk;
  o.stop_at_eos = false;
  // Best of `repeats` runs after a warm-up: prefill (prompt → first token) and decode (the one-token
  // steps after it) timed inside generate_tokens.
  o.max_new_tokens = g.new_tokens;
  double prefill = 1e300, decode = 1e300;
  std::vector<int32_t> all;
  for (int r = 0; r <= g.repeats; ++r) {
    eval::GenerateStats st;
    o.stats = &st;
    all = eval::generate_tokens(model, {prompt}, o, -1)[0].tokens;
    if (r == 0) continue;  // warm-up
    prefill = std::min(prefill, st.prefill_seconds);
    decode = std::min(decode, st.decode_seconds / double(std::max<int64_t>(1, st.decode_steps)));
  }
  const double hwm_kb = peak_rss_kb();
  nlohmann::json j = {{"impl", "drope"},
                      {"device", g.device},
                      {"context", g.context},
                      {"new_tokens", g.new_tokens},
                      {"threads", at::get_num_threads()},
                      {"prefill_s", prefill},
                      {"prefill_tok_s", double(g.context) / prefill},
                      {"decode_s_per_token", decode},
                      {"decode_tok_s", 1.0 / decode},
                      {"peak_rss_mb", hwm_kb / 1024.0},
                      {"tokens", all}};
  fmt::print("{}\n", j.dump());
  if (!g.json.empty()) write_file_atomic(g.json, j.dump(2) + "\n");
}

}  // namespace drope::bench
