// Every environment variable drope's libraries and tools read, declared once: name, accepted values, what
// unset means and what it does. This module is the only code that reads the environment (a test checks the sources),
// and the table of docs/training.md ("Environment variables") is generated from it. Safe before main: the table is a
// constant array and nothing here allocates until a caller asks for text.
#pragma once

#include <cstddef>
#include <string>

namespace drope::env {

enum class Kind {
  kDrope,     // drope's own switches: kernel, layer and run choices, for A/B timing and for emulating another CPU
  kStandard,  // set by launchers (torchrun, Slurm) or read the way other libraries read them (OpenMP, glibc, oneDNN)
  kInternal,  // set by drope itself for its own child process
  kTestFault  // fault-injection hooks for the tests: read only while DROPE_TEST_FAULTS=1
};

// How a tool checks a variable's value when it starts (drope::check_environment), before anything reads it: a typo
// in a switch read only mid-run, or only on a CPU or GPU that has the feature, would otherwise change nothing
// silently. kNone: checked where it is read (paths, launcher integers, other libraries' own syntax).
enum class Check {
  kNone,
  kSwitch,      // `0` or `1`
  kThreadList,  // OpenMP's thread counts: positive integers, comma-separated for nested levels
  kWaitPolicy,  // OpenMP's `PASSIVE` or `ACTIVE`, in any case
  kSteps,       // comma-separated step numbers >= 1
  kRankStep     // `RANK:STEP`, both digits
};

struct Variable {
  const char* name;
  const char* values;  // what it accepts
  const char* unset;   // what unset (or empty) means
  const char* effect;  // one line
  Kind kind;
  Check check = Check::kNone;
};

// The declared variables, in the order the docs list them.
const Variable* begin();
const Variable* end();
struct Table {
  const Variable* begin() const { return env::begin(); }
  const Variable* end() const { return env::end(); }
};
inline Table variables() { return {}; }

// The declaration of `name`, or nullptr when it is not declared.
const Variable* find(const char* name);

// The value of declared variable `name`: nullptr when unset or empty, and for a test-fault hook unless
// DROPE_TEST_FAULTS=1. An undeclared name is a programming error: std::logic_error.
const char* get(const char* name);
inline bool is_set(const char* name) { return get(name) != nullptr; }

// Whether DROPE_TEST_FAULTS=1 turns the DROPE_FAULT_* hooks on (any other value leaves them off; the tools refuse
// a value other than 0 or 1 at start).
bool test_faults_enabled();

// The test-fault hooks that are set while DROPE_TEST_FAULTS is not 1 (and so are ignored), comma-separated; empty
// when there are none.
std::string ignored_test_faults();

// The generated table of docs/training.md.
std::string markdown_table();

}  // namespace drope::env
