#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "attention_cases.h"
#include "drope/kernels/attention_cpu.h"
#include "drope/kernels/attention_math.h"
#include "drope/model/transformer.h"
#include "drope/ops/attention.h"
#include "test_util.h"

using namespace drope;

namespace {

using Case = test::AttentionCase;

struct Inputs {
  torch::Tensor q, k, v, g;  // g: weights of the scalar loss sum(out · g)
};

Inputs random_inputs(const Case& c) {
  return {torch::randn({c.B, c.H, c.T, c.D}, torch::kDouble), torch::randn({c.B, c.Hkv, c.S, c.D}, torch::kDouble),
          torch::randn({c.B, c.Hkv, c.S, c.D}, torch::kDouble), torch::randn({c.B, c.H, c.T, c.D}, torch::kDouble)};
}

struct Result {
  torch::Tensor out, dq, dk, dv;
};

// Output and gradients of sum(out · g) through ops::attention (fused unless `reference`), inputs cast to dtype.
Result run(const Inputs& in, const Case& c, torch::Dtype dtype, bool reference) {
  auto q = in.q.to(dtype).requires_grad_(), k = in.k.to(dtype).requires_grad_(), v = in.v.to(dtype).requires_grad_();
  const auto p = c.params();
  torch::Tensor out;
  if (reference) out = ops::reference_attention(q, k, v, p).out;
  else out = ops::attention(q, k, v, p);
  auto loss = (out.to(torch::kDouble) * in.g).sum();
  auto grads = torch::autograd::grad({loss}, {q, k, v});
  return {out.detach().to(torch::kDouble), grads[0].to(torch::kDouble), grads[1].to(torch::kDouble),
          grads[2].to(torch::kDouble)};
}

double max_err(const torch::Tensor& a, const torch::Tensor& b) { return (a - b).abs().max().item<double>(); }

// Runs ATen (and the kernel) on `n` threads (default one) while alive, then restores the previous count.
class IntraOpThreads {
 public:
  explicit IntraOpThreads(int n = 1) : threads_(at::get_num_threads()) { at::set_num_threads(n); }
  ~IntraOpThreads() { at::set_num_threads(threads_); }

 private:
  int threads_;
};

std::vector<Case> option_grid() {
  std::vector<Case> cases;
  // (T, S, q_offset, D): square with two partial tiles, decode T = 1, short queries at the end of a long
  // cache, queries in the middle of the keys, more than two tiles each way (the last one big enough to
  // be spread over threads).
  const int64_t shapes[][4] = {{70, 70, -1, 12}, {1, 77, -1, 16},   {13, 90, -1, 8},
                               {10, 40, 7, 24},  {131, 131, -1, 8}, {131, 150, -1, 64}};
  for (bool causal : {true, false})
    for (int64_t window : {0, 5})
      for (bool alibi : {false, true})
        for (int64_t Hkv : {4, 2, 1})
          for (double scale : {0.0, 0.37})
            for (const auto& s : shapes) {
              const bool big = s[3] == 64;
              if (big && scale != 0.0) continue;  // the big shape once per option set keeps the test fast
              Case c;
              c.B = big ? 1 : 2;
              c.H = 4;
              c.Hkv = Hkv;
              c.T = s[0];
              c.S = s[1];
              c.q_offset = s[2];
              c.D = s[3];
              c.causal = causal;
              c.window = window;
              c.alibi = alibi;
              c.scale = scale;
              cases.push_back(c);
            }
  return cases;
}

}  // namespace

TEST(FusedAttentionMath, BandsMatchVisibility) {
  for (bool causal : {true, false})
    for (int64_t window : {0, 1, 3, 7})
      for (int64_t off : {0, 4, 9}) {
        kernels::AttnParams<float> p;
        p.q_len = 12;
        p.kv_len = 21;
        p.q_offset = off;
        p.causal = causal;
        p.window = window;
        for (int64_t t0 = 0; t0 < p.q_len; ++t0)
          for (int64_t t1 = t0 + 1; t1 <= p.q_len; ++t1)
            for (int64_t j0 = 0; j0 < p.kv_len; ++j0)
              for (int64_t j1 = j0 + 1; j1 <= p.kv_len; ++j1) {
                bool any = false;
                for (int64_t t = t0; t < t1; ++t)
                  for (int64_t j = j0; j < j1; ++j) any = any || kernels::key_visible(p, off + t, j);
                ASSERT_EQ(kernels::tile_fully_masked(p, off + t0, off + t1, j0, j1), !any)
                    << causal << " " << window << " " << off << " " << t0 << " " << t1 << " " << j0 << " " << j1;
              }
        for (int64_t j0 = 0; j0 < p.kv_len; ++j0)
          for (int64_t j1 = j0 + 1; j1 <= p.kv_len; ++j1) {
            int64_t lo, hi;
            kernels::query_band(p, j0, j1, &lo, &hi);
            for (int64_t t = 0; t < p.q_len; ++t) {
              bool any = false;
              for (int64_t j = j0; j < j1; ++j) any = any || kernels::key_visible(p, off + t, j);
              ASSERT_EQ(any, t >= lo && t < hi) << causal << " " << window << " " << off << " " << j0 << " " << j1;
            }
          }
      }
}

TEST(FusedAttention, Float64MatchesReferenceForEveryOption) {
  // Hundreds of small ATen calls: one thread avoids OpenMP contention on a busy machine (the threaded
  // kernel paths are covered by the float32 and bfloat16 tests).
  IntraOpThreads one_thread;
  torch::manual_seed(3);
  for (const auto& c : option_grid()) {
    const auto in = random_inputs(c);
    ASSERT_TRUE(ops::uses_fused_attention(in.q, in.k, in.v, c.params()));
    const auto want = run(in, c, torch::kDouble, true);
    const auto got = run(in, c, torch::kDouble, false);
    EXPECT_LT(max_err(got.out, want.out), 1e-10) << c.str();
    EXPECT_LT(max_err(got.dq, want.dq), 1e-10) << c.str();
    EXPECT_LT(max_err(got.dk, want.dk), 1e-10) << c.str();
    EXPECT_LT(max_err(got.dv, want.dv), 1e-10) << c.str();
    const auto lse_ref = ops::reference_attention(in.q, in.k, in.v, c.params()).lse;
    const auto lse = ops::fused_attention(in.q, in.k, in.v, c.params()).lse;
    ASSERT_EQ(lse.scalar_type(), torch::kFloat);
    EXPECT_LT(max_err(lse.to(torch::kDouble), lse_ref.to(torch::kDouble)), 1e-5) << c.str();
  }
}

TEST(FusedAttention, BothBackwardSchedulesMatchReference) {
  IntraOpThreads one_thread;  // as above; the float32 test runs both schedules threaded
  torch::manual_seed(8);
  int n = 0;
  for (const auto& c : option_grid()) {
    if (n++ % 3 != 0) continue;  // a third of the grid covers every option
    const auto in = random_inputs(c);
    const auto want = run(in, c, torch::kDouble, true);
    const auto p = c.params();
    for (auto schedule : {kernels::BackwardSchedule::kTwoPass, kernels::BackwardSchedule::kPerKVHead}) {
      const auto g = ops::fused_attention_grads(in.q, in.k, in.v, in.g, p, schedule);
      EXPECT_LT(max_err(g.dq, want.dq), 1e-10) << c.str();
      EXPECT_LT(max_err(g.dk, want.dk), 1e-10) << c.str();
      EXPECT_LT(max_err(g.dv, want.dv), 1e-10) << c.str();
    }
  }
}

TEST(FusedAttention, EveryWorkItemRunsOnceWhateverTheThreadCount) {
  // The kernel's threads (LibTorch's OpenMP team) take work items one at a time: on 1, 2 or 5 threads the
  // forward output is the same bits (each item writes its own rows), the gradients agree to rounding (the
  // key/value partial sums may meet in another order), and all of them match the float64 reference.
  torch::manual_seed(6);
  Case c;
  c.B = 2;
  c.H = 4;
  c.Hkv = 2;
  c.T = 131;
  c.S = 131;
  c.D = 32;
  c.window = 40;
  const auto in = random_inputs(c);
  const auto exact = run(in, c, torch::kDouble, true);
  std::vector<Result> got;
  for (int threads : {1, 2, 5}) {
    IntraOpThreads guard(threads);
    got.push_back(run(in, c, torch::kFloat, false));
  }
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_TRUE(torch::equal(got[i].out, got[0].out)) << "threads run " << i;
    EXPECT_LT(max_err(got[i].out, exact.out), 1e-4) << "threads run " << i;
    EXPECT_LT(max_err(got[i].dq, exact.dq), 1e-3) << "threads run " << i;
    EXPECT_LT(max_err(got[i].dk, exact.dk), 1e-3) << "threads run " << i;
    EXPECT_LT(max_err(got[i].dv, exact.dv), 1e-3) << "threads run " << i;
  }
}

TEST(FusedAttention, Float32NoWorseThanReference) {
  torch::manual_seed(4);
  std::vector<Case> cases;
  for (int64_t D : {64, 40, 16})
    for (bool alibi : {false, true})
      for (int64_t window : {0, 37}) {
        Case c;
        c.B = 1;
        c.H = 4;
        c.Hkv = D == 64 ? 1 : 2;
        c.T = 150;
        c.S = D == 16 ? 171 : 150;
        c.D = D;
        c.alibi = alibi;
        c.window = window;
        c.causal = D != 40;
        cases.push_back(c);
      }
  for (const auto& c : cases) {
    auto in = random_inputs(c);
    in.q = in.q * 2;  // sharper softmax
    const auto exact = run(in, c, torch::kDouble, true);
    const auto ref = run(in, c, torch::kFloat, true);
    const auto got = run(in, c, torch::kFloat, false);
    const std::pair<torch::Tensor Result::*, const char*> fields[] = {
        {&Result::out, "out"}, {&Result::dq, "dq"}, {&Result::dk, "dk"}, {&Result::dv, "dv"}};
    for (const auto& [f, name] : fields) {
      const double e_ref = max_err(ref.*f, exact.*f), e_got = max_err(got.*f, exact.*f);
      EXPECT_LE(e_got, 2 * e_ref + 1e-6) << name << " " << c.str() << " reference error " << e_ref;
    }
  }
}

TEST(FusedAttention, BFloat16NoWorseThanLibTorch) {
  torch::manual_seed(5);
  for (bool alibi : {false, true})
    for (int64_t window : {0, 20})
      for (int64_t Hkv : {4, 1}) {
        Case c;
        c.B = 1;
        c.H = 4;
        c.Hkv = Hkv;
        c.T = 100;
        c.S = 120;
        c.D = 64;
        c.alibi = alibi;
        c.window = window;
        const auto p = c.params();
        const auto in = random_inputs(c);
        const auto q = in.q.to(torch::kBFloat16), k = in.k.to(torch::kBFloat16), v = in.v.to(torch::kBFloat16);
        const auto exact =
            ops::reference_attention(q.to(torch::kDouble), k.to(torch::kDouble), v.to(torch::kDouble), p).out;
        const auto got = ops::attention(q, k, v, p);
        ASSERT_EQ(got.scalar_type(), torch::kBFloat16);
        // LibTorch's bf16 attention: SDPA with the equivalent dense additive mask.
        auto logits_mask = torch::zeros({1, c.H, c.T, c.S}, torch::kDouble);  // (1, H, T, S)
        {
          const int64_t off = c.S - c.T;
          auto qpos = torch::arange(off, off + c.T, torch::kDouble).unsqueeze(1);
          auto kpos = torch::arange(0, c.S, torch::kDouble).unsqueeze(0);
          auto visible = (kpos <= qpos);
          if (c.window > 0) visible = visible & (kpos > qpos - c.window);
          logits_mask = logits_mask.masked_fill(visible.logical_not(), -INFINITY);
          if (c.alibi) logits_mask = logits_mask - p.alibi_slopes.view({1, c.H, 1, 1}) * (qpos - kpos);
        }
        const auto kr = k.repeat_interleave(c.H / Hkv, 1), vr = v.repeat_interleave(c.H / Hkv, 1);
        const auto sdpa = at::scaled_dot_product_attention(q, kr, vr, logits_mask.to(torch::kBFloat16));
        const auto ref_bf16 = ops::reference_attention(q, k, v, p).out;
        const double e_got = max_err(got.to(torch::kDouble), exact);
        const double e_sdpa = max_err(sdpa.to(torch::kDouble), exact);
        const double e_ref = max_err(ref_bf16.to(torch::kDouble), exact);
        EXPECT_LE(e_got, 2 * e_sdpa + 1e-3) << c.str() << " sdpa error " << e_sdpa;
        EXPECT_LE(e_got, 2 * e_ref + 1e-3) << c.str() << " reference bf16 error " << e_ref;
      }
}

// LibTorch's bf16 attention for a case: SDPA with the case's visibility and ALiBi bias as a dense additive mask,
// GQA by repeating the KV heads; output and gradients of sum(out · g) in float64. Empty when a query row sees no key
// (SDPA's row is NaN there, ours zero).
std::optional<Result> sdpa_bf16(const Inputs& in, const Case& c) {
  const int64_t off = c.q_offset < 0 ? c.S - c.T : c.q_offset;
  auto mask = torch::zeros({1, c.H, c.T, c.S}, torch::kDouble);
  auto a = mask.accessor<double, 4>();
  const auto slopes = ops::alibi_slopes(c.H);
  for (int64_t t = 0; t < c.T; ++t) {
    bool any = false;
    for (int64_t j = 0; j < c.S; ++j) {
      const int64_t i = off + t;
      const bool visible = (!c.causal || j <= i) && (c.window == 0 || j > i - c.window);
      any = any || visible;
      for (int64_t h = 0; h < c.H; ++h)
        a[0][h][t][j] = !visible ? -INFINITY : c.alibi ? -slopes[size_t(h)] * double(i - j) : 0.0;
    }
    if (!any) return std::nullopt;
  }
  auto q = in.q.to(torch::kBFloat16).requires_grad_(), k = in.k.to(torch::kBFloat16).requires_grad_(),
       v = in.v.to(torch::kBFloat16).requires_grad_();
  const int64_t G = c.H / c.Hkv;
  const auto out = at::scaled_dot_product_attention(q, k.repeat_interleave(G, 1), v.repeat_interleave(G, 1),
                                                    mask.to(torch::kBFloat16), 0.0, false,
                                                    c.scale > 0 ? std::optional<double>(c.scale) : std::nullopt);
  auto grads = torch::autograd::grad({(out.to(torch::kDouble) * in.g).sum()}, {q, k, v});
  return Result{out.detach().to(torch::kDouble), grads[0].to(torch::kDouble), grads[1].to(torch::kDouble),
                grads[2].to(torch::kDouble)};
}

TEST(FusedAttention, BFloat16ForwardBackwardNoWorseThanSdpa) {
  // On a CPU with AMX tiles the bf16 GEMMs of the kernel run on them (bf16 operands, float32 accumulation), else in
  // float32 FMAs. The forward is within 2× of SDPA-bf16's error against float64 (or of the error of storing the
  // exact result in bf16, when SDPA's is smaller) on every option of the grid; the gradients within 2.5×: SDPA with
  // a mask differentiates float32 intermediates it saved, while the fused backward forms each row's Σ dO·O from
  // the stored bf16 output (as flash attention does), which costs up to 2.4× SDPA's error on two cells of the grid
  // (non-causal with a window or ALiBi), on the FMA path and the tiles alike.
  IntraOpThreads one_thread;
  torch::manual_seed(8);
  int compared = 0;
  for (const auto& c : option_grid()) {
    const auto in = random_inputs(c);
    const auto ref = sdpa_bf16(in, c);
    if (!ref) continue;
    const auto exact = run(in, c, torch::kDouble, true);
    const auto got = run(in, c, torch::kBFloat16, false);
    const std::pair<torch::Tensor Result::*, const char*> fields[] = {
        {&Result::out, "out"}, {&Result::dq, "dq"}, {&Result::dk, "dk"}, {&Result::dv, "dv"}};
    for (const auto& [f, name] : fields) {
      const double e_sdpa = max_err(*ref.*f, exact.*f), e_got = max_err(got.*f, exact.*f);
      const double e_round = max_err((exact.*f).to(torch::kBFloat16).to(torch::kDouble), exact.*f);
      const double factor = std::string(name) == "out" ? 2.0 : 2.5;
      EXPECT_LE(e_got, factor * std::max(e_sdpa, e_round) + 1e-3)
          << name << " " << c.str() << " sdpa bf16 error " << e_sdpa << ", bf16 rounding " << e_round;
    }
    ++compared;
  }
  EXPECT_GT(compared, 50);
}

TEST(FusedAttention, CentralDifferenceGradients) {
  torch::manual_seed(6);
  Case c;
  c.B = 1;
  c.H = 2;
  c.Hkv = 1;
  c.T = 5;
  c.S = 7;
  c.D = 3;
  c.window = 4;
  c.alibi = true;
  c.scale = 0.37;
  const auto in = random_inputs(c);
  const auto p = c.params();
  const auto analytic = run(in, c, torch::kDouble, false);
  const double h = 1e-6;
  auto loss = [&](const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
    return (ops::fused_attention(q, k, v, p).out * in.g).sum().item<double>();
  };
  const torch::Tensor* grads[] = {&analytic.dq, &analytic.dk, &analytic.dv};
  for (int which = 0; which < 3; ++which) {
    auto x = std::vector<torch::Tensor>{in.q.clone(), in.k.clone(), in.v.clone()};
    auto flat = x[which].view(-1);
    auto g = grads[which]->reshape(-1);
    for (int64_t e = 0; e < flat.numel(); ++e) {
      const double x0 = flat[e].item<double>();
      flat[e] = x0 + h;
      const double up = loss(x[0], x[1], x[2]);
      flat[e] = x0 - h;
      const double down = loss(x[0], x[1], x[2]);
      flat[e] = x0;
      EXPECT_NEAR(g[e].item<double>(), (up - down) / (2 * h), 1e-7) << "input " << which << " element " << e;
    }
  }
}

TEST(FusedAttention, ModelLogitsMatchReference) {
  torch::manual_seed(7);
  for (const std::string type : {"rope", "alibi", "rnope-swa"}) {
    auto cfg = model_preset("micro");
    cfg.num_layers = 4;
    cfg.positional.type = parse_name<PositionalType>(type, "test");
    cfg.positional.window = type == "rnope-swa" ? 4 : 0;
    DecoderLM m(cfg);
    const auto ids = torch::randint(0, cfg.vocab_size, {2, 37});
    auto fused = m->forward(ids);
    fused.pow(2).mean().backward();
    std::vector<torch::Tensor> fused_grads;
    for (const auto& t : m->parameters()) fused_grads.push_back(t.grad().clone());
    m->zero_grad();
    torch::Tensor ref;
    {
      ops::ForceReferenceAttention force;
      ref = m->forward(ids);
      ref.pow(2).mean().backward();
    }
    EXPECT_LT(max_err(fused.detach(), ref.detach()), 1e-5) << type;
    const auto params = m->parameters();
    for (size_t i = 0; i < params.size(); ++i) {
      const double scale = std::max(1e-3, params[i].grad().abs().max().item<double>());
      EXPECT_LT(max_err(fused_grads[i], params[i].grad()) / scale, 1e-4) << type << " parameter " << i;
    }
  }
}

TEST(FusedAttention, DispatchesOnlySupportedInputs) {
  auto q = torch::randn({1, 2, 4, 8}), k = torch::randn({1, 2, 4, 8});
  ops::AttentionParams p;
  EXPECT_TRUE(ops::uses_fused_attention(q, k, k, p));
  EXPECT_TRUE(ops::uses_fused_attention(q.to(torch::kBFloat16), k.to(torch::kBFloat16), k.to(torch::kBFloat16), p));
  EXPECT_FALSE(ops::uses_fused_attention(q.to(torch::kHalf), k.to(torch::kHalf), k.to(torch::kHalf), p));
  EXPECT_FALSE(ops::uses_fused_attention(q, k.to(torch::kDouble), k, p));
  p.alibi_slopes = torch::ones({2}).requires_grad_();
  EXPECT_FALSE(ops::uses_fused_attention(q, k, k, p));
  {
    ops::ForceReferenceAttention force;
    EXPECT_FALSE(ops::uses_fused_attention(q, k, k, {}));
  }
  EXPECT_TRUE(ops::uses_fused_attention(q, k, k, {}));
  EXPECT_THROW(ops::fused_attention(q, torch::randn({1, 3, 4, 8}), torch::randn({1, 3, 4, 8}), {}), c10::Error);
}
