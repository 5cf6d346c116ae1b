// The counting CPU allocator behind DROPE_TRACK_TENSOR_MEMORY (drope/train/tensor_memory.h): live and peak bytes
// of CPU tensors, against the sizes we allocate.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>

#include "drope/core/error.h"
#include "drope/train/tensor_memory.h"

using drope::train::tensor_memory;

TEST(TensorMemory, CountsLiveAndPeakBytesOfCpuTensors) {
  auto before_install = torch::ones({1000});  // allocated by LibTorch's own allocator: never counted
  drope::train::install_tensor_memory_tracker();
  EXPECT_FALSE(drope::train::install_tensor_memory_tracker());  // the second call is a no-op
  ASSERT_TRUE(tensor_memory().has_value());
  const int64_t base = tensor_memory()->live;
  drope::train::reset_tensor_memory_peak();
  {
    auto a = torch::ones({1000}, torch::kFloat32);
    EXPECT_EQ(tensor_memory()->live, base + 4000);
    auto b = torch::empty({250, 4}, torch::kFloat64);
    EXPECT_EQ(tensor_memory()->live, base + 4000 + 8000);
    b = torch::Tensor();
    EXPECT_EQ(tensor_memory()->live, base + 4000);
    auto c = a * 2;  // an op's output goes through the same allocator
    EXPECT_EQ(tensor_memory()->live, base + 8000);
    EXPECT_EQ(tensor_memory()->peak, base + 12000);
    // the data is usable and aligned as LibTorch's own (64 bytes)
    EXPECT_EQ(reinterpret_cast<uintptr_t>(c.data_ptr()) % 64, 0u);
    EXPECT_FLOAT_EQ(c.sum().item<float>(), 2000.0f);
  }
  EXPECT_EQ(tensor_memory()->live, base);
  EXPECT_EQ(tensor_memory()->peak, base + 12000);
  before_install = torch::Tensor();  // freed by its own deleter: the counter does not move
  EXPECT_EQ(tensor_memory()->live, base);
  drope::train::reset_tensor_memory_peak();
  EXPECT_EQ(tensor_memory()->peak, base);
}

TEST(TensorMemory, EnvironmentValueIsValidated) {
  setenv("DROPE_TRACK_TENSOR_MEMORY", "yes", 1);
  try {
    drope::train::install_tensor_memory_tracker_from_env();
    FAIL() << "expected an error";
  } catch (const drope::Error& e) {
    EXPECT_NE(std::string(e.what()).find("DROPE_TRACK_TENSOR_MEMORY"), std::string::npos);
  }
  unsetenv("DROPE_TRACK_TENSOR_MEMORY");
}
