#include <filesystem>

#include <torch/torch.h>

#include "drope/config/model_config.h"
#include "drope/core/files.h"
#include "test_util.h"

using namespace drope;

TEST(ModelConfigs, ConfigsInTheRepositoryLoad) {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(std::string(DROPE_SOURCE_DIR) + "/configs/models")) {
    auto c = load_model_config_file(e.path().string());
    EXPECT_GT(c.num_layers, 0) << e.path();
    ++n;
  }
  EXPECT_GE(n, 5);
}
