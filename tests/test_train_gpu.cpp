// train.cuda_graphs on a GPU: the captured step trains as the eager one does. Skips without a CUDA device.
#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "drope/core/files.h"
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
