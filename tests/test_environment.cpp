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
