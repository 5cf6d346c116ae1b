// CPU budget: cgroup quota parsing and the thread count chosen from affinity and quota.
#include <gtest/gtest.h>

#include "drope/core/cpu_budget.h"

using namespace drope;

TEST(CpuBudget, ParsesCgroupCpuMax) {
  EXPECT_EQ(parse_cpu_max("max 100000\n"), 0.0);
  EXPECT_DOUBLE_EQ(parse_cpu_max("150000 100000\n"), 1.5);
  EXPECT_DOUBLE_EQ(parse_cpu_max("50000 100000"), 0.5);
  EXPECT_DOUBLE_EQ(parse_cpu_max("400000 100000"), 4.0);
  for (const char* bad : {"", "abc", "100000", "-1 100000", "100000 0", "100000 -5", "nan 100000", "inf 1"})
    EXPECT_EQ(parse_cpu_max(bad), 0.0) << bad;
  EXPECT_EQ(parse_cpu_max(nullptr), 0.0);
}

TEST(CpuBudget, ThreadsFromAffinityAndQuota) {
  EXPECT_EQ(threads_for(16, 0), 16);   // no quota: the affinity mask
  EXPECT_EQ(threads_for(16, 1.5), 1);  // 1.5 CPUs: one thread, not two sharing 1.5
  EXPECT_EQ(threads_for(16, 4), 4);
  EXPECT_EQ(threads_for(2, 8), 2);     // a quota above the mask changes nothing
  EXPECT_EQ(threads_for(4, 0.2), 1);
  EXPECT_EQ(threads_for(0, 0), 1);
}

TEST(CpuBudget, ReadsThisProcess) {
  const CpuBudget b = cpu_budget();
  EXPECT_GE(b.affinity, 1);
  EXPECT_GE(b.threads, 1);
  EXPECT_LE(b.threads, b.affinity);
  EXPECT_NE(describe_cpu_budget().find("threads"), std::string::npos);
}
