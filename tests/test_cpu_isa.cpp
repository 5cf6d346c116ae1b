// The CPU instruction-set override: parsing, refusal of levels the CPU lacks, and the level the kernels use.
// ctest runs the kernel-correctness tests once per level (isa.<level>.kernels, DROPE_CPU_ISA set); a level
// this CPU lacks skips the whole run with a message instead of dying of SIGILL.
#include <cstdlib>
#include <iostream>
#include <stdexcept>
#include <string>

#include <gtest/gtest.h>

#include "drope/kernels/cpu_isa.h"

using namespace drope::kernels;

namespace {

// Skips every test of the binary when DROPE_CPU_ISA names a level this CPU lacks (the ctest runs per level).
class RequestedIsa : public ::testing::Environment {
 public:
  void SetUp() override {
    const char* env = std::getenv("DROPE_CPU_ISA");
    if (!env) return;
    try {
      const Isa isa = cpu_isa();
      std::cout << "drope kernels run at " << isa_name(isa) << " (native " << isa_name(cpu_isa_native()) << ")\n";
    } catch (const std::invalid_argument& e) {
      if (std::string(e.what()).find("this CPU lacks") != std::string::npos) GTEST_SKIP() << e.what();
      FAIL() << e.what();
    }
  }
};
const auto* const kRequestedIsa = ::testing::AddGlobalTestEnvironment(new RequestedIsa);

}  // namespace

TEST(CpuIsa, ParsesLevelsAndRefusesOthers) {
  EXPECT_EQ(parse_cpu_isa("baseline"), Isa::kBase);
  EXPECT_EQ(parse_cpu_isa(""), cpu_isa_native());
  EXPECT_EQ(parse_cpu_isa("native"), cpu_isa_native());
  for (const char* bad : {"avx3", "AVX2", "sse", " avx2"}) {
    try {
      parse_cpu_isa(bad);
      ADD_FAILURE() << "accepted " << bad;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("DROPE_CPU_ISA"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("expected avx512, avx2, baseline or native"), std::string::npos) << e.what();
    }
  }
}

TEST(CpuIsa, RefusesLevelsTheCpuLacks) {
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
    if (cpu_supports(isa)) {
      EXPECT_EQ(parse_cpu_isa(isa_name(isa)), isa);
      continue;
    }
    try {
      parse_cpu_isa(isa_name(isa));
      ADD_FAILURE() << "accepted " << isa_name(isa) << " on a CPU without it";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("this CPU lacks"), std::string::npos) << e.what();
    }
  }
  // The levels are nested: a CPU with AVX-512 has AVX2 + FMA.
  if (cpu_supports(Isa::kAvx512)) EXPECT_TRUE(cpu_supports(Isa::kAvx2));
  EXPECT_TRUE(cpu_supports(Isa::kBase));
  EXPECT_TRUE(cpu_supports(cpu_isa_native()));
}

TEST(CpuIsa, KernelsUseTheRequestedLevel) {
  const char* env = std::getenv("DROPE_CPU_ISA");
  EXPECT_EQ(cpu_isa(), parse_cpu_isa(env ? env : ""));
}
