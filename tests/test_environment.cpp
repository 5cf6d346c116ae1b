// The environment variables' one declaration: lookups, the test-fault switch, and the generated docs table.
#include <gtest/gtest.h>

#include <cstdlib>
#include <set>
#include <stdexcept>
#include <string>

#include "drope/core/environment.h"
#include "drope/core/error.h"
#include "drope/core/numbers.h"

namespace {

// Sets (or, with nullptr, unsets) a variable for one scope and restores what was there.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    value ? ::setenv(name, value, 1) : ::unsetenv(name);
  }
  ~ScopedEnv() { had_ ? ::setenv(name_, old_.c_str(), 1) : ::unsetenv(name_); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};

}  // namespace

TEST(Environment, EveryNameDeclaredOnceWithItsText) {
  std::set<std::string> names;
  size_t faults = 0;
  for (const auto& v : drope::env::variables()) {
    EXPECT_TRUE(names.insert(v.name).second) << v.name << " declared twice";
    EXPECT_GT(std::string(v.values).size(), 0u) << v.name;
    EXPECT_GT(std::string(v.unset).size(), 0u) << v.name;
    EXPECT_GT(std::string(v.effect).size(), 0u) << v.name;
    const bool fault_name = std::string(v.name).rfind("DROPE_FAULT_", 0) == 0;
    EXPECT_EQ(fault_name, v.kind == drope::env::Kind::kTestFault) << v.name;
    faults += fault_name;
    EXPECT_EQ(drope::env::find(v.name), &v);
  }
  EXPECT_EQ(faults, 4u);
  EXPECT_GT(names.size(), 30u);
  EXPECT_EQ(drope::env::find("DROPE_NOT_A_VARIABLE"), nullptr);
}

TEST(Environment, UndeclaredNameIsAProgrammingError) {
  EXPECT_THROW(drope::env::get("DROPE_NOT_A_VARIABLE"), std::logic_error);
  EXPECT_THROW(drope::env_switch("DROPE_NOT_A_VARIABLE"), std::logic_error);
}

TEST(Environment, EmptyReadsAsUnset) {
  ScopedEnv e("DROPE_PEAK_FILE", "");
  EXPECT_EQ(drope::env::get("DROPE_PEAK_FILE"), nullptr);
  ScopedEnv f("DROPE_PEAK_FILE", "/tmp/roof.json");
  EXPECT_STREQ(drope::env::get("DROPE_PEAK_FILE"), "/tmp/roof.json");
}

TEST(Environment, FaultHooksNeedTheTestSwitch) {
  ScopedEnv hook("DROPE_FAULT_NAN_AT_STEP", "4,5");
  for (const char* off : {static_cast<const char*>(nullptr), "", "0", "yes"}) {
    ScopedEnv sw("DROPE_TEST_FAULTS", off);
    EXPECT_FALSE(drope::env::test_faults_enabled()) << (off ? off : "unset");
    EXPECT_EQ(drope::env::get("DROPE_FAULT_NAN_AT_STEP"), nullptr);
    EXPECT_EQ(drope::env::ignored_test_faults(), "DROPE_FAULT_NAN_AT_STEP");
  }
  ScopedEnv sw("DROPE_TEST_FAULTS", "1");
  EXPECT_TRUE(drope::env::test_faults_enabled());
  EXPECT_STREQ(drope::env::get("DROPE_FAULT_NAN_AT_STEP"), "4,5");
  EXPECT_EQ(drope::env::ignored_test_faults(), "");
}

TEST(Environment, TestSwitchValueIsValidated) {
  ScopedEnv sw("DROPE_TEST_FAULTS", "yes");
  try {
    drope::env_switch("DROPE_TEST_FAULTS");
    FAIL() << "expected an error";
  } catch (const drope::Error& e) {
    EXPECT_NE(std::string(e.what()).find("DROPE_TEST_FAULTS='yes': expected 0 or 1"), std::string::npos) << e.what();
  }
}

TEST(Environment, MarkdownTableListsEveryVariable) {
  const std::string table = drope::env::markdown_table();
  for (const auto& v : drope::env::variables())
    EXPECT_NE(table.find(std::string("| `") + v.name + "` |"), std::string::npos) << v.name;
  EXPECT_EQ(table.rfind("| variable | accepts | unset | what it does |\n|---|---|---|---|\n", 0), 0u);
}

namespace {

// The message check_environment() fails with, or "" when it passes.
std::string environment_error() {
  try {
    drope::check_environment();
  } catch (const drope::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Environment, SwitchesAreExactlyTheZeroOneVariables) {
  for (const auto& v : drope::env::variables())
    EXPECT_EQ(std::string(v.values) == "`0`, `1`", v.check == drope::env::Check::kSwitch) << v.name;
}

TEST(Environment, StartCheckRefusesBadValues) {
  ScopedEnv faults("DROPE_TEST_FAULTS", nullptr);
  EXPECT_EQ(environment_error(), "");
  struct Case {
    const char* name;
    const char* value;
    bool ok;
  };
  const Case cases[] = {
      {"OMP_NUM_THREADS", "4", true},
      {"OMP_NUM_THREADS", "4,2", true},
      {"OMP_NUM_THREADS", "abc", false},
      {"OMP_NUM_THREADS", "0", false},
      {"OMP_NUM_THREADS", " 4, 2 ", true},
      {"OMP_NUM_THREADS", "4,", false},
      {"OMP_NUM_THREADS", "4,,2", false},
      {"OMP_NUM_THREADS", "-1", false},
      {"OMP_NUM_THREADS", "99999999999", false},
      {"OMP_WAIT_POLICY", "passive", true},
      {"OMP_WAIT_POLICY", "ACTIVE", true},
      {"OMP_WAIT_POLICY", "sleep", false},
      {"DROPE_SHARD_PREFETCH", "on", false},
      {"DROPE_SHARD_PREFETCH", "0", true},
  };
  for (const Case& c : cases) {
    ScopedEnv e(c.name, c.value);
    const std::string error = environment_error();
    if (c.ok) {
      EXPECT_EQ(error, "") << c.name << "=" << c.value;
    } else {
      EXPECT_NE(error.find(std::string("environment variable ") + c.name + "='" + c.value + "': expected "),
                std::string::npos)
          << c.name << "=" << c.value << ": " << error;
    }
  }
}

TEST(Environment, FaultHooksAreCheckedOnlyWhenOn) {
  const char* const bad[][2] = {{"DROPE_FAULT_NAN_AT_STEP", "0"},
                                {"DROPE_FAULT_NAN_AT_STEP", "4, 5"},
                                {"DROPE_FAULT_NAN_WEIGHTS_AT_STEP", "-2"},
                                {"DROPE_FAULT_KILL_RANK_IN_CHECKPOINT", "1"},
                                {"DROPE_FAULT_KILL_RANK_IN_CHECKPOINT", "1:0"},
                                {"DROPE_FAULT_KILL_RANK_IN_CHECKPOINT", "a:3"}};
  for (const auto& b : bad) {
    ScopedEnv hook(b[0], b[1]);
    {
      ScopedEnv off("DROPE_TEST_FAULTS", nullptr);  // ignored (and reported as ignored), not refused
      EXPECT_EQ(environment_error(), "") << b[0] << "=" << b[1];
    }
    ScopedEnv on("DROPE_TEST_FAULTS", "1");
    EXPECT_NE(environment_error().find(std::string(b[0]) + "='" + b[1] + "': expected "), std::string::npos)
        << b[0] << "=" << b[1];
  }
  ScopedEnv on("DROPE_TEST_FAULTS", "1");
  ScopedEnv steps("DROPE_FAULT_NAN_AT_STEP", "4,5");
  ScopedEnv kill("DROPE_FAULT_KILL_RANK_IN_CHECKPOINT", "0:3");
  EXPECT_EQ(environment_error(), "");
}
