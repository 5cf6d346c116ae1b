// The attention backends' registry (ops/attention_registry.h): every backend named once and reachable from the
// dispatch table, the list of backends read from that table, and the one dispatch on CPU tensors: which backend it
// records, why, the forced switches, and that attention() returns exactly what the chosen backend computes.
#include <algorithm>
#include <map>
#include <set>
#include <string>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "drope/ops/attention.h"
#include "drope/ops/attention_registry.h"

using namespace drope;
using ops::AttnBackend;

namespace {

struct Qkv {
  torch::Tensor q, k, v;
};

// f throws a c10::Error whose message holds every needle.
template <typename F>
void expect_torch_error(F&& f, std::initializer_list<std::string> needles) {
  try {
    f();
    ADD_FAILURE() << "expected c10::Error";
  } catch (const c10::Error& e) {
    const std::string msg = e.what_without_backtrace();
    for (const auto& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << "message: " << msg << "\nmissing: " << n;
  }
}

Qkv inputs(int64_t T, torch::Dtype dtype = torch::kFloat) {
  return {torch::randn({2, 4, T, 8}).to(dtype), torch::randn({2, 2, 9, 8}).to(dtype),
          torch::randn({2, 2, 9, 8}).to(dtype)};
}

}  // namespace

TEST(AttentionRegistry, EveryBackendIsNamedOnceAndRouted) {
  std::set<std::string> names;
  for (const auto* d : ops::attn_backends()) {
    EXPECT_TRUE(names.insert(d->name).second) << d->name << " registered twice";
    EXPECT_NE(d->devices, 0u) << d->name;
    ASSERT_TRUE(d->refuses && d->forward) << d->name;
    AttnBackend parsed;
    ASSERT_TRUE(ops::parse_attn_backend(d->name, &parsed)) << d->name;
    EXPECT_EQ(&ops::attn_backend_def(parsed), d);
    bool routed = false;
    for (const auto& r : ops::attn_routes()) routed |= r.backend == d;
    EXPECT_TRUE(routed) << d->name << " has no row in the dispatch table";
  }
  for (const auto& r : ops::attn_routes()) EXPECT_NE(r.devices & r.backend->devices, 0u) << r.backend->name;
  EXPECT_GE(names.size(), 9u);
  AttnBackend b;
  EXPECT_FALSE(ops::parse_attn_backend("flash3", &b));
  expect_torch_error([] { ops::attn_backend_def(AttnBackend{"flash3"}); }, {"no backend is registered as flash3"});
}

TEST(AttentionRegistry, TheListingIsTheBackendsOfTheRoutes) {
  // Each backend of a row is listed once, in the order of the places its rows give (the same on each of them, no
  // two backends at one place), so the list cannot name a backend the routes do not, miss one, or reorder them.
  const auto& listed = ops::attn_backends();
  std::map<const ops::AttnBackendDef*, int> place;
  for (const auto& r : ops::attn_routes()) {
    const auto it = place.emplace(r.backend, r.listed).first;
    EXPECT_EQ(it->second, r.listed) << r.backend->name << ": its rows give different places";
  }
  ASSERT_EQ(listed.size(), place.size());
  for (size_t i = 0; i < listed.size(); ++i) {
    ASSERT_TRUE(place.count(listed[i])) << listed[i]->name << " is listed without a row";
    if (i > 0) EXPECT_LT(place[listed[i - 1]], place[listed[i]]) << listed[i - 1]->name << ", " << listed[i]->name;
  }
  // The order the bench's --impls and the test grids read, among the backends registered so far.
  const std::vector<std::string> order{"flash",    "mem_efficient", "cudnn",  "cudnn_graph", "sdpa",
                                       "own_cuda", "cpu_fused",     "decode", "reference"};
  std::vector<std::string> names;
  for (const auto* d : listed)
    if (std::find(order.begin(), order.end(), d->name) != order.end()) names.emplace_back(d->name);
  EXPECT_EQ(names, order);
}

TEST(AttentionRegistry, CpuDispatchRecordsBackendAndReason) {
  torch::manual_seed(1);
  const ops::AttentionParams p;
  auto t = inputs(5);
  auto plan = ops::attention_plan(t.q, t.k, t.v, p, /*training=*/false);
  EXPECT_EQ(plan.backend, AttnBackend::kCpuFused);
  EXPECT_STREQ(plan.reason, "our CPU kernel takes the call");
  auto one = inputs(1);
  EXPECT_EQ(ops::attention_plan(one.q, one.k, one.v, p, false).backend, AttnBackend::kDecode);
  EXPECT_EQ(ops::attention_plan(one.q, one.k, one.v, p, true).backend, AttnBackend::kCpuFused);
  auto half = inputs(5, torch::kHalf);
  EXPECT_EQ(ops::attention_plan(half.q, half.k, half.v, p, false).backend, AttnBackend::kReference);
  EXPECT_EQ(ops::attention_plan(t.q, t.k.to(torch::kDouble), t.v, p, false).backend, AttnBackend::kReference);
  auto padded = p;
  padded.key_start = torch::tensor({0, 3}, torch::kLong);
  EXPECT_EQ(ops::attention_plan(t.q, t.k, t.v, padded, false).backend, AttnBackend::kReference);
  {
    ops::ForceReferenceAttention force;
    plan = ops::attention_plan(t.q, t.k, t.v, p, false);
    EXPECT_EQ(plan.backend, AttnBackend::kReference);
    EXPECT_NE(std::string(plan.reason).find("forced"), std::string::npos);
  }
  {
    ops::ForceAttentionBackend force(AttnBackend::kFlash);  // a CUDA backend: CPU calls route as before
    EXPECT_EQ(ops::attention_plan(t.q, t.k, t.v, p, false).backend, AttnBackend::kCpuFused);
  }
  {
    ops::ForceAttentionBackend force(AttnBackend::kDecode);
    EXPECT_EQ(ops::attention_plan(t.q, t.k, t.v, p, true).backend, AttnBackend::kDecode);
  }
  {
    ops::ForceAttentionBackend force(AttnBackend::kCpuFused);
    expect_torch_error([&] { ops::attention(half.q, half.k, half.v, p); },
                       {"the forced backend cpu_fused cannot run this call", "float32, bfloat16 and float64"});
  }
}

TEST(AttentionRegistry, AttentionRunsTheChosenBackend) {
  torch::manual_seed(2);
  ops::AttentionParams p;
  p.window = 3;
  p.alibi_slopes = torch::tensor(ops::alibi_slopes(4), torch::kFloat);
  auto t = inputs(5);
  // The CPU kernel's own output, bit for bit.
  EXPECT_TRUE(torch::equal(ops::attention(t.q, t.k, t.v, p), ops::fused_attention(t.q, t.k, t.v, p).out));
  // Decoding: the reference's output, bit for bit, and not the kernel's.
  auto one = inputs(1);
  const auto ref = ops::reference_attention(one.q, one.k, one.v, p).out;
  EXPECT_TRUE(torch::equal(ops::attention(one.q, one.k, one.v, p), ref));
  // Gradients through the one autograd Function: the kernel's backward (its reductions may run in any order).
  auto q = t.q.clone().requires_grad_(), k = t.k.clone().requires_grad_(), v = t.v.clone().requires_grad_();
  EXPECT_EQ(ops::attention_plan(q, k, v, p, true).backend, AttnBackend::kCpuFused);
  const auto dout = torch::randn_like(t.q);
  ops::attention(q, k, v, p).backward(dout);
  const auto g = ops::fused_attention_grads(t.q, t.k, t.v, dout, p);
  EXPECT_TRUE(torch::allclose(q.grad(), g.dq, 1e-6, 1e-7));
  EXPECT_TRUE(torch::allclose(k.grad(), g.dk, 1e-6, 1e-7));
  EXPECT_TRUE(torch::allclose(v.grad(), g.dv, 1e-6, 1e-7));
}
