#include <cmath>

#include <torch/torch.h>

#include "drope/model/positional.h"
#include "drope/model/rope_scaling.h"
#include "test_util.h"

using namespace drope;

TEST(RopeScaling, YarnSpecVectors) {
  auto a = yarn_correction_range(32, 1, 128, 1e4, 4096, true);
  EXPECT_EQ(a.low, 20);
  EXPECT_EQ(a.high, 46);
  auto b = yarn_correction_range(32, 1, 64, 1e4, 2048, true);
  EXPECT_EQ(b.low, 8);
  EXPECT_EQ(b.high, 21);
  EXPECT_NEAR(yarn_mscale(2), 1.0693, 5e-5);
  EXPECT_NEAR(yarn_mscale(4), 1.1386, 5e-5);
  EXPECT_NEAR(yarn_mscale(8), 1.2079, 5e-5);
  RopeScalingConfig s;
  s.type = RopeScalingType::kYarn;
  s.factor = 4;
  auto f = rope_frequencies(1e4, 64, s, 2048, 2048);
  auto base = rope_base_frequencies(1e4, 64);
  EXPECT_NEAR(f.attention_factor, 1.1386, 5e-5);
  for (int i = 0; i < 8; ++i) EXPECT_DOUBLE_EQ(f.inv_freq[i], base[i]);             // extrapolated
  for (int i = 21; i < 32; ++i) EXPECT_NEAR(f.inv_freq[i], base[i] / 4, 1e-15);     // interpolated
  EXPECT_GT(f.inv_freq[12], base[12] / 4);
  EXPECT_LT(f.inv_freq[12], base[12]);
}

TEST(RopeScaling, NtkBaseFormEqualsGammaForm) {
  for (double s : {2.0, 3.0, 4.0, 8.0}) {
    RopeScalingConfig c;
    c.type = RopeScalingType::kNtk;
    c.factor = s;
    const int64_t d = 64;
    auto f = rope_frequencies(1e4, d, c, 2048, 2048);
    auto base = rope_base_frequencies(1e4, d);
    for (int64_t m = 0; m < d / 2; ++m) {
      const double gamma = std::pow(s, -2.0 * double(m) / double(d - 2));
      EXPECT_NEAR(f.inv_freq[m] / base[m], gamma, 1e-12) << "s=" << s << " m=" << m;
    }
    EXPECT_NEAR(f.inv_freq[d / 2 - 1] / base[d / 2 - 1], 1.0 / s, 1e-12);  // lowest frequency fully interpolated
  }
}

TEST(RopeScaling, PiAndDynamic) {
  RopeScalingConfig pi;
  pi.type = RopeScalingType::kPi;
  pi.factor = 4;
  auto f = rope_frequencies(1e4, 32, pi, 128, 128);
  auto base = rope_base_frequencies(1e4, 32);
  for (size_t i = 0; i < base.size(); ++i) EXPECT_DOUBLE_EQ(f.inv_freq[i], base[i] / 4);
  RopeScalingConfig dyn;
  dyn.type = RopeScalingType::kDynamicNtk;
  dyn.factor = 2;
  auto short_seq = rope_frequencies(1e4, 32, dyn, 128, 100);
  for (size_t i = 0; i < base.size(); ++i) EXPECT_DOUBLE_EQ(short_seq.inv_freq[i], base[i]);
  auto long_seq = rope_frequencies(1e4, 32, dyn, 128, 512);
  const double theta = 1e4 * std::pow(2.0 * 512 / 128 - 1.0, 32.0 / 30.0);
  auto expect = rope_base_frequencies(theta, 32);
  for (size_t i = 0; i < base.size(); ++i) EXPECT_NEAR(long_seq.inv_freq[i], expect[i], 1e-15);
}

TEST(Rope, LogitsDependOnlyOnRelativePosition) {
  torch::manual_seed(0);
  const int64_t D = 32;
  auto inv = rope_base_frequencies(1e4, D);
  auto q = torch::randn({1, 1, 1, D}, torch::kDouble);
  auto k = torch::randn({1, 1, 1, D}, torch::kDouble);
  auto logit = [&](int64_t i, int64_t j) {
    auto [cq, sq] = rotary_table(inv, 1.0, i, 1, torch::kDouble);
    auto [ck, sk] = rotary_table(inv, 1.0, j, 1, torch::kDouble);
    return (apply_rotary(q, cq, sq) * apply_rotary(k, ck, sk)).sum().item<double>();
  };
  for (int64_t delta : {0, 1, 7, 100}) {
    const double ref = logit(10 + delta, 10);
    for (int64_t shift : {1, 13, 500})
      EXPECT_NEAR(logit(10 + delta + shift, 10 + shift), ref, 2e-3) << delta << " " << shift;
  }
  EXPECT_GT(std::abs(logit(11, 10) - logit(40, 10)), 1e-3);  // and it does depend on the distance
}
