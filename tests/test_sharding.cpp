// Sharded layout (units, owned pieces) and activation checkpointing (recomputed blocks) against the plain
// computation; the multi-process equivalence of every shard mode is in tests/py/test_sharding.py.
#include <random>

#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include "drope/model/transformer.h"
#include "drope/train/recompute.h"
#include "drope/train/sharding.h"
#include "test_util.h"

using namespace drope;
using namespace drope::train;

TEST(ShardLayout, PiecesOfAllRanksTileEveryParameterOnce) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 50; ++trial) {
    const int world = 1 + int(rng() % 5);
    std::vector<std::string> names;
    std::vector<int64_t> numels;
    const int layers = 1 + int(rng() % 3);
    names.push_back("model.embed_tokens.weight");
    numels.push_back(1 + rng() % 40);
    for (int l = 0; l < layers; ++l)
      for (const char* p : {"a.weight", "b.weight", "c.bias"}) {
        names.push_back("model.layers." + std::to_string(l) + "." + p);
        numels.push_back(1 + rng() % 17);
      }
    names.push_back("model.norm.weight");
    numels.push_back(1 + rng() % 9);
    const auto units = make_shard_units(names, numels, world);
    ASSERT_EQ(int(units.size()), layers + 1);
    EXPECT_EQ(units.back().name, "rest");
    for (int l = 0; l < layers; ++l) EXPECT_EQ(units[l].layer, l);
    std::vector<std::vector<int>> hits(names.size());
    for (size_t i = 0; i < names.size(); ++i) hits[i].assign(numels[i], 0);
    for (int r = 0; r < world; ++r) {
      int64_t owned = 0;
      for (const auto& pc : owned_pieces(units, r)) {
        ASSERT_GE(pc.start, 0);
        ASSERT_LE(pc.start + pc.len, numels[pc.param]);
        ASSERT_LE(pc.at + pc.len, units[pc.unit].chunk);
        for (int64_t e = pc.start; e < pc.start + pc.len; ++e) ++hits[pc.param][e];
        owned += pc.len;
      }
      int64_t bound = 0;
      for (const auto& u : units) bound += u.chunk;
      EXPECT_LE(owned, bound);
    }
    for (size_t i = 0; i < names.size(); ++i)
      for (int h : hits[i]) ASSERT_EQ(h, 1) << names[i];
  }
  EXPECT_THROW(make_shard_units({"x"}, {3}, 0), std::exception);
}

namespace {
// Loss and gradients of a 3-layer model with the given block runner (empty: plain forward).
std::pair<double, std::vector<torch::Tensor>> loss_and_grads(DecoderLM& m, const BlockRunner& runner, bool bf16) {
  m->zero_grad();
  torch::manual_seed(0);
  auto ids = torch::randint(0, m->config().vocab_size, {2, 17}, torch::kLong);
  ForwardOptions fo;
  fo.block_runner = runner;
  torch::Tensor loss;
  {
    if (bf16) {
      at::autocast::set_autocast_enabled(at::kCPU, true);
      at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
    }
    auto logits = m->forward(ids.narrow(1, 0, 16), fo);
    loss = torch::nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}).to(torch::kFloat),
                                                ids.narrow(1, 1, 16).reshape({-1}));
    if (bf16) {
      at::autocast::set_autocast_enabled(at::kCPU, false);
      at::autocast::clear_cache();
    }
  }
  loss.backward();
  std::vector<torch::Tensor> g;
  for (auto& p : m->parameters()) g.push_back(p.grad().clone());
  return {loss.item<double>(), g};
}
}  // namespace

TEST(ActivationCheckpointing, RecomputedBlocksGiveTheSameLossAndGradients) {
  auto cfg = model_preset("micro");
  cfg.num_layers = 3;
  for (bool bf16 : {false, true}) {
    DecoderLM m(cfg);
    m->reset_parameters(3);
    const auto plain = loss_and_grads(m, {}, bf16);
    for (int64_t every : {1, 2}) {
      int recomputed = 0;
      BlockRunner r = [&](size_t layer, DecoderLayerImpl& block, const torch::Tensor& x, const PositionContext& ctx) {
        if (!checkpoints_layer(every, layer)) return block.forward(x, ctx);
        ++recomputed;
        return checkpointed_block(block, x, ctx);
      };
      const auto ck = loss_and_grads(m, r, bf16);
      EXPECT_EQ(recomputed, every == 1 ? 3 : 1);
      EXPECT_EQ(ck.first, plain.first) << "bf16 " << bf16 << " every " << every;
      ASSERT_EQ(ck.second.size(), plain.second.size());
      for (size_t i = 0; i < ck.second.size(); ++i)
        EXPECT_TRUE(torch::allclose(ck.second[i], plain.second[i], 1e-5, bf16 ? 1e-6 : 1e-7))
            << "bf16 " << bf16 << " every " << every << " param " << i << " max diff "
            << (ck.second[i] - plain.second[i]).abs().max().item<double>();
    }
  }
  // A runner that recomputes with the wrong autocast state would differ: bf16 vs float32 losses differ here.
  DecoderLM m(cfg);
  m->reset_parameters(3);
  EXPECT_NE(loss_and_grads(m, {}, true).first, loss_and_grads(m, {}, false).first);
}

TEST(ActivationCheckpointing, NoGradForwardKeepsNoGraph) {
  auto cfg = model_preset("micro");
  DecoderLM m(cfg);
  m->reset_parameters(1);
  ForwardOptions fo;
  fo.block_runner = [](size_t, DecoderLayerImpl& block, const torch::Tensor& x, const PositionContext& ctx) {
    return checkpointed_block(block, x, ctx);
  };
  torch::NoGradGuard ng;
  auto ids = torch::randint(0, cfg.vocab_size, {1, 8}, torch::kLong);
  auto a = m->forward(ids, fo);
  EXPECT_FALSE(a.requires_grad());
  EXPECT_TRUE(torch::equal(a, m->forward(ids)));
}
