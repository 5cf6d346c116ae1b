#include <filesystem>

#include <torch/torch.h>

#include "drope/core/files.h"
#include "drope/model/drope.h"
#include "drope/train/quick.h"
#include "test_util.h"

using namespace drope;

namespace {
std::vector<int64_t> license_bytes() {
  std::vector<int64_t> out;
  for (const char* f : {"/usr/share/common-licenses/GPL-3", "/usr/share/common-licenses/Apache-2.0"})
    if (std::filesystem::exists(f))
      for (unsigned char c : read_file(f)) out.push_back(c);
  return out;
}
}  // namespace

TEST(QuickTrain, LossFallsWellBelowUnigramEntropyOnRealText) {
  auto tokens = license_bytes();
  ASSERT_GT(tokens.size(), 20000u) << "needs /usr/share/common-licenses (base-files)";
  const double h1 = train::unigram_entropy(tokens, 256);
  torch::set_num_threads(1);  // ctest runs tests in parallel on 2 cores
  auto cfg = model_preset("micro");
  cfg.max_position = 32;
  DecoderLM m(cfg);
  m->reset_parameters(0);
  train::QuickTrainOptions opt;
  opt.steps = 300;
  opt.batch = 16;
  opt.seq_len = 32;
  opt.lr = 1e-2;
  auto losses = train::train_lm(m, tokens, opt);
  double tail = 0;
  for (int i = 290; i < 300; ++i) tail += losses[i] / 10;
  EXPECT_GT(losses.front(), std::log(256.0) - 0.5);  // starts near uniform
  EXPECT_LT(tail, h1 - 0.5) << "unigram entropy " << h1;
  // DroPE keeps the weights: recalibration starts from a trained model, not from scratch.
  auto d = drop_positional(m, {"qk", false});
  const double ppl_d = train::perplexity(d, tokens, 32, 4);
  EXPECT_LT(std::log(ppl_d), std::log(256.0) - 0.5);
}

TEST(QuickTrain, ConfigsInTheRepositoryLoad) {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(std::string(DROPE_SOURCE_DIR) + "/configs/models")) {
    auto c = load_model_config_file(e.path().string());
    EXPECT_GT(c.num_layers, 0) << e.path();
    ++n;
  }
  EXPECT_GE(n, 5);
}
