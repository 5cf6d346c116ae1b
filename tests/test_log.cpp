// Logging: level and rank filters, the rank prefix, the run file's timestamps, progress lines on a pipe and
// on a terminal, and refused flag values.
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "drope/core/log.h"
#include "test_util.h"

using namespace drope;
namespace L = drope::logging;

namespace {

// Console streams in temporary files; the logger goes back to its defaults afterwards.
class Log : public ::testing::Test {
 protected:
  void SetUp() override {
    out_ = std::tmpfile();
    err_ = std::tmpfile();
    ASSERT_TRUE(out_ && err_);
  }
  void TearDown() override {
    L::init(L::Options{});
    std::fclose(out_);
    std::fclose(err_);
  }
  void init(L::Level level, int rank = 0, int world = 1, L::Ranks ranks = L::Ranks::kMain) {
    L::Options o;
    o.tool = "drope-test";
    o.level = level;
    o.rank = rank;
    o.world = world;
    o.ranks = ranks;
    o.out = out_;
    o.err = err_;
    L::init(o);
  }
  static std::string read(std::FILE* f) {
    std::fflush(f);
    std::rewind(f);
    std::string s;
    char buf[4096];
    for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) s.append(buf, n);
    return s;
  }
  std::string out() { return read(out_); }
  std::string err() { return read(err_); }
  void say_all() {
    L::trace("t {}", 0);
    L::debug("d {}", 1);
    L::info("i {}", 2);
    L::warn("w {}", 3);
    L::error("e {}", 4);
  }

  std::FILE* out_ = nullptr;
  std::FILE* err_ = nullptr;
};

}  // namespace

TEST_F(Log, LevelsFilterAndSplitStreams) {
  init(L::Level::kInfo);
  say_all();
  EXPECT_EQ(out(), "i 2\n");
  EXPECT_EQ(err(), "warning: w 3\nerror: e 4\n");
  EXPECT_FALSE(L::enabled(L::Level::kDebug));
  EXPECT_TRUE(L::enabled(L::Level::kInfo));
}

TEST_F(Log, TraceShowsEverythingAndWarnOnlyProblems) {
  init(L::Level::kTrace);
  say_all();
  EXPECT_EQ(out(), "trace: t 0\ndebug: d 1\ni 2\n");
  EXPECT_EQ(err(), "warning: w 3\nerror: e 4\n");
}

TEST_F(Log, WarnHidesInfoAndOffHidesAll) {
  init(L::Level::kWarn);  // --quiet
  say_all();
  EXPECT_EQ(out(), "");
  EXPECT_EQ(err(), "warning: w 3\nerror: e 4\n");
  init(L::Level::kOff);
  say_all();
  L::progress("p");
  EXPECT_FALSE(L::enabled(L::Level::kError));
  EXPECT_EQ(out(), "");
  EXPECT_EQ(err(), "warning: w 3\nerror: e 4\n");
}

TEST_F(Log, OnlyRankZeroSpeaksByDefault) {
  init(L::Level::kInfo, 1, 2);
  say_all();
  L::progress("p");
  EXPECT_EQ(out(), "");
  EXPECT_EQ(err(), "[rank 1] error: e 4\n");  // errors still come through, with whose they are
  init(L::Level::kInfo, 0, 2);
  L::info("main");
  EXPECT_EQ(out(), "main\n");
}

TEST_F(Log, AllRanksSpeakWithAPrefix) {
  init(L::Level::kInfo, 1, 2, L::Ranks::kAll);
  L::info("step {}", 1);
  L::warn("careful");
  L::progress("half");
  EXPECT_EQ(out(), "[rank 1] step 1\n[rank 1] half\n");
  EXPECT_EQ(err(), "[rank 1] warning: careful\n");
  init(L::Level::kInfo, 0, 2, L::Ranks::kAll);
  L::info("zero");
  EXPECT_NE(out().find("[rank 0] zero\n"), std::string::npos);
  init(L::Level::kInfo, 0, 1, L::Ranks::kAll);  // one process: nothing to tell apart
  L::info("alone");
  EXPECT_NE(out().find("\nalone\n"), std::string::npos);
}

TEST_F(Log, RunFileHasTimestampsAndKeepsInfoUnderQuiet) {
  const std::string dir = test::tmp_dir("log_file");
  init(L::Level::kWarn);
  const std::string path = L::add_run_file(dir);
  EXPECT_EQ(path, dir + "/drope-test.log");
  L::info("step {} | loss {:.2f}", 3, 1.5);
  L::debug("not in the file");
  L::warn("odd");
  L::flush();
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string text = ss.str();
  const std::regex line(R"(\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}\] \[(info|warning)\] (.*))");
  std::istringstream lines(text);
  std::vector<std::string> got;
  for (std::string l; std::getline(lines, l);) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(l, m, line)) << l;
    got.push_back(m[2]);
  }
  EXPECT_EQ(got, (std::vector<std::string>{"step 3 | loss 1.50", "odd"}));
  EXPECT_EQ(out(), "");  // the console keeps --quiet and has no timestamps
  EXPECT_EQ(err(), "warning: odd\n");
  // A second run in the same process writes only to its own file.
  const std::string dir2 = test::tmp_dir("log_file2");
  L::add_run_file(dir2);
  L::info("second run");
  L::flush();
  std::ifstream f1(path), f2(dir2 + "/drope-test.log");
  std::stringstream s1, s2;
  s1 << f1.rdbuf();
  s2 << f2.rdbuf();
  EXPECT_EQ(s1.str(), text);
  EXPECT_NE(s2.str().find("] [info] second run\n"), std::string::npos) << s2.str();
  // A directory that cannot exist (its parent is a file).
  test::expect_error([&] { L::add_run_file(path); }, {"drope-test.log", "cannot open the log file"});
}

TEST_F(Log, ProgressIsOneLinePerUpdateOnAPipe) {
  init(L::Level::kInfo);
  for (int i = 1; i <= 3; ++i) L::progress(fmt::format("  niah: {}/3", i));
  L::info("done");
  EXPECT_EQ(out(), "  niah: 1/3\n  niah: 2/3\n  niah: 3/3\ndone\n");
  L::progress("on stderr", err_);
  EXPECT_EQ(err(), "on stderr\n");
}

TEST_F(Log, ProgressIsRedrawnOnATerminal) {
  const int master = ::posix_openpt(O_RDWR | O_NOCTTY);
  ASSERT_GE(master, 0);
  ASSERT_EQ(::grantpt(master), 0);
  ASSERT_EQ(::unlockpt(master), 0);
  std::FILE* tty = std::fopen(::ptsname(master), "w");
  ASSERT_NE(tty, nullptr);
  ASSERT_TRUE(::isatty(::fileno(tty)));
  L::Options o;
  o.out = tty;
  o.err = tty;
  o.rank = 0;
  o.world = 1;
  L::init(o);
  L::progress("a 1/2");
  L::progress("a 2/2");
  L::info("next");
  std::fclose(tty);
  std::string got;
  char buf[256];
  for (ssize_t n; (n = ::read(master, buf, sizeof buf)) > 0;) got.append(buf, size_t(n));  // EIO once drained
  ::close(master);
  // Each update replaces the line; the next message first clears it. (The terminal turns \n into \r\n.)
  EXPECT_EQ(got, "\r\033[Ka 1/2\r\033[Ka 2/2\r\033[Knext\r\n");
}

TEST(LogFlags, BadValuesAreRefusedNamingTheFlag) {
  EXPECT_EQ(L::parse_level("debug"), L::Level::kDebug);
  EXPECT_EQ(L::parse_level("off"), L::Level::kOff);
  test::expect_error([] { L::parse_level("loud"); }, {"--log-level", "'loud'", "trace, debug, info, warn, error, off"});
  test::expect_error([] { L::parse_level("INFO"); }, {"--log-level", "'INFO'"});
  test::expect_error([] { L::parse_level(""); }, {"--log-level"});
  EXPECT_EQ(L::parse_ranks("all"), L::Ranks::kAll);
  EXPECT_EQ(L::parse_ranks("0"), L::Ranks::kMain);
  test::expect_error([] { L::parse_ranks("2"); }, {"--log-ranks", "'2'", "all"});
}

TEST(LogFlags, RankAndWorldFromTheLauncher) {
  const char* keys[] = {"RANK", "SLURM_PROCID", "WORLD_SIZE", "SLURM_NTASKS"};
  std::vector<std::pair<std::string, std::string>> saved;
  for (const char* k : keys) {
    if (const char* v = std::getenv(k)) saved.emplace_back(k, v);
    ::unsetenv(k);
  }
  EXPECT_EQ(L::rank_from_env(), 0);
  EXPECT_EQ(L::world_from_env(), 1);
  ::setenv("SLURM_PROCID", "3", 1);
  ::setenv("SLURM_NTASKS", "4", 1);
  EXPECT_EQ(L::rank_from_env(), 3);
  EXPECT_EQ(L::world_from_env(), 4);
  ::setenv("RANK", "1", 1);  // torchrun's wins
  ::setenv("WORLD_SIZE", "2", 1);
  EXPECT_EQ(L::rank_from_env(), 1);
  EXPECT_EQ(L::world_from_env(), 2);
  for (const char* k : keys) ::unsetenv(k);
  for (const auto& [k, v] : saved) ::setenv(k.c_str(), v.c_str(), 1);
}
