// Training on a GPU: the captured step (train.cuda_graphs) trains as the eager one does; the chunked loss queues
// without a host synchronisation. Skips without a CUDA device.
#include <cmath>
#include <string>
#include <vector>

#include <c10/cuda/CUDAFunctions.h>
#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include "drope/core/files.h"
#include "drope/ops/loss.h"
#include "drope/train/run_config.h"
#include "drope/train/trainer.h"
#include "test_util.h"

using namespace drope;
using namespace drope::train;

namespace {

std::vector<std::pair<int64_t, double>> train_losses(const std::string& name, bool graphs) {
  const std::string dir = test::tmp_dir(name);
  write_file_atomic(dir + "/cfg.yaml",
                    "run: {name: g, out_dir: " + dir +
                        "/run, seed: 3}\n"
                        "model: {preset: micro, max_position: 64}\n"
                        "data: {text: /usr/share/common-licenses/GPL-3, seq_len: 64, batch_size: 8}\n"
                        "optim: {lr: 3.0e-3}\n"
                        "schedule: {type: cosine, warmup: 2, steps: 10}\n"
                        "train: {steps: 10, log_every: 1, eval_batches: 1, device: cuda, dtype: bfloat16, "
                        "chunked_loss: false}\n");
  auto cfg = load_run_config(dir + "/cfg.yaml", {graphs ? "train.cuda_graphs=true" : "train.cuda_graphs=false"});
  TrainOptions o;
  o.quiet = true;
  o.run_yaml = run_config_to_yaml(cfg);
  return Trainer(cfg, o).run().losses;
}

}  // namespace

TEST(CudaGraphsGpu, CapturedStepTrainsAsTheEagerStep) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const auto eager = train_losses("cuda_graphs_off", false);
  const auto graphs = train_losses("cuda_graphs_on", true);
  ASSERT_EQ(eager.size(), 10u);
  ASSERT_EQ(graphs.size(), eager.size());
  for (size_t i = 0; i < eager.size(); ++i) {
    EXPECT_EQ(graphs[i].first, eager[i].first);
    EXPECT_TRUE(std::isfinite(graphs[i].second));
    // The same kernels on the same data: equal up to the order of floating-point reductions.
    EXPECT_NEAR(graphs[i].second, eager[i].second, 2e-2 * std::max(1.0, std::abs(eager[i].second)))
        << "step " << eager[i].first;
  }
  EXPECT_LT(graphs.back().second, graphs.front().second);  // it learns
}

// The chunked LM-head loss on CUDA: forward and backward queue without a host synchronisation (the token count
// stays on the device; CUDA's sync-debug mode turns any .item() into an error), and the loss and gradients equal
// the float64 CPU reference of the full logits.
TEST(LinearCrossEntropyGpu, NoHostSyncAndMatchesFloat64) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  torch::manual_seed(5);
  const int64_t N = 300, C = 64, V = 1000;
  auto h = torch::randn({N, C}, torch::kDouble), w = torch::randn({V, C}, torch::kDouble) * 0.2;
  auto y = torch::randint(0, V, {N}, torch::kLong);
  y.index_put_({torch::indexing::Slice(0, 20)}, -100);
  auto hr = h.clone().requires_grad_(true), wr = w.clone().requires_grad_(true);
  auto ref = torch::nn::functional::cross_entropy(hr.matmul(wr.t()), y);
  ref.backward();
  for (bool fused : {true, false}) {
    auto hc = h.to(torch::kCUDA, torch::kFloat).requires_grad_(true);
    auto wc = w.to(torch::kCUDA, torch::kFloat).requires_grad_(true);
    auto yc = y.to(torch::kCUDA);
    torch::cuda::synchronize();
    auto& sync = c10::cuda::warning_state();
    const auto mode = sync.get_sync_debug_mode();
    sync.set_sync_debug_mode(c10::cuda::SyncDebugMode::L_ERROR);
    at::Tensor loss;
    EXPECT_NO_THROW({
      loss = ops::linear_cross_entropy(hc, wc, yc, -100, 64, fused);
      loss.backward();
    }) << "fused "
       << fused;
    sync.set_sync_debug_mode(mode);
    EXPECT_NEAR(loss.item<double>(), ref.item<double>(), 1e-4) << "fused " << fused;
    EXPECT_LT((hc.grad().cpu().to(torch::kDouble) - hr.grad()).abs().max().item<double>(), 1e-5) << fused;
    EXPECT_LT((wc.grad().cpu().to(torch::kDouble) - wr.grad()).abs().max().item<double>(), 1e-5) << fused;
  }
}
