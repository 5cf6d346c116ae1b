// Never delete what we did not create: our temporaries have a name only we produce (with our pid), only
// those of dead processes are cleaned, and a non-empty directory that is not ours is never replaced.
// Also the strict parts of a checkpoint's state.json. Torch-free.
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "drope/core/files.h"
#include "drope/train/checkpoint_state.h"
#include "test_util.h"

namespace fs = std::filesystem;
using drope::test::expect_error;
using drope::test::tmp_dir;

namespace {

// The pid of a process that has exited (and been reaped).
pid_t dead_pid() {
  const pid_t p = ::fork();
  if (p == 0) ::_exit(0);
  int st = 0;
  ::waitpid(p, &st, 0);
  return p;
}

void touch(const fs::path& p, const std::string& text = "user data") { std::ofstream(p) << text; }

}  // namespace

TEST(FileSafety, TempNamesCarryOurMarkAndPid) {
  const std::string t = drope::temp_path_for("/some/dir/model.safetensors");
  const std::string name = fs::path(t).filename().string();
  EXPECT_EQ(fs::path(t).parent_path(), fs::path("/some/dir"));
  EXPECT_EQ(name.rfind(".drope-tmp-" + std::to_string(::getpid()) + "-", 0), 0u) << name;
  EXPECT_NE(name.find(".model.safetensors"), std::string::npos) << name;
  EXPECT_NE(drope::temp_path_for("/some/dir/model.safetensors"), t);
}

TEST(FileSafety, OnlyOurStaleTemporariesAreRemoved) {
  const auto dir = fs::path(tmp_dir("file_safety_stale"));
  const pid_t gone = dead_pid();
  const std::string g = std::to_string(gone);
  const std::vector<std::string> keep = {"notes.tmp-1-2", "data.tmp-" + g + "-abc", "x.tmp-delete",
                                         ".drope-tmp-" + std::to_string(::getpid()) + "-ab.live",
                                         ".drope-tmp-" + g + "-xyz.nothex", ".drope-tmp-" + g + "-ab.", ".drope-tmp--ab.x",
                                         "drope-tmp-" + g + "-ab.x"};
  for (const auto& k : keep) touch(dir / k);
  touch(dir / (".drope-tmp-" + g + "-deadbeef.config.yaml"), "half");
  fs::create_directories(dir / (".drope-tmp-" + g + "-1.step-00000002") / "sub");
  touch(dir / (".drope-tmp-" + g + "-1.step-00000002") / "sub" / "model.safetensors", "half");
  EXPECT_EQ(drope::remove_stale_temporaries(dir.string()), 2);
  for (const auto& k : keep) EXPECT_TRUE(fs::exists(dir / k)) << k;
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), static_cast<long>(keep.size()));
  // write_file_atomic cleans the directory it writes into, once, and leaves no temporary of its own.
  touch(dir / (".drope-tmp-" + g + "-0f.out.json"), "half");
  drope::write_file_atomic((dir / "out.json").string(), "{}\n");
  EXPECT_FALSE(fs::exists(dir / (".drope-tmp-" + g + "-0f.out.json")));
  for (const auto& k : keep) EXPECT_TRUE(fs::exists(dir / k)) << k;
  EXPECT_EQ(drope::read_file((dir / "out.json").string()), "{}\n");
}

TEST(FileSafety, ForeignDirectoriesAreNotReplaced) {
  const auto dir = fs::path(tmp_dir("file_safety_foreign"));
  const auto user = dir / "photos";
  fs::create_directories(user);
  touch(user / "holiday.jpg");
  expect_error([&] { drope::check_replaceable_dir(user.string(), "drope.yaml", "model directory", "pass --force"); },
               {user.string(), "not a model directory", "drope.yaml", "refusing", "--force"});
  touch(dir / "file");
  expect_error([&] { drope::check_replaceable_dir((dir / "file").string(), "drope.yaml", "model directory", ""); },
               {"not a directory"});
  // Absent, empty, or ours: fine.
  drope::check_replaceable_dir((dir / "absent").string(), "drope.yaml", "model directory", "");
  fs::create_directories(dir / "empty");
  drope::check_replaceable_dir((dir / "empty").string(), "drope.yaml", "model directory", "");
  fs::create_directories(dir / "ours");
  touch(dir / "ours" / "drope.yaml");
  drope::check_replaceable_dir((dir / "ours").string(), "drope.yaml", "model directory", "");
  EXPECT_TRUE(fs::exists(user / "holiday.jpg"));
}

TEST(FileSafety, DirectoryWriteErrorsNameTheTargetNotTheTemporary) {
  const auto dir = fs::path(tmp_dir("file_safety_names"));
  const std::string out = (dir / "ds").string();
  expect_error([&] { drope::write_dir_atomic(out, [](const std::string& tmp) { drope::fail("{}/train/a.bin: boom", tmp); }); },
               {out + "/train/a.bin: boom"});
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 0);
}

TEST(CheckpointState, SkippedStepsAreReadStrictly) {
  using drope::train::parse_checkpoint_state;
  EXPECT_EQ(parse_checkpoint_state(R"({"step": 6, "tokens": 10, "skipped_steps": 2})", "s.json").skipped, 2);
  EXPECT_EQ(parse_checkpoint_state(R"({"step": 6, "tokens": 10})", "s.json").skipped, -1);  // older builds
  expect_error([] { parse_checkpoint_state(R"({"step": 6, "tokens": 10, "skipped_steps": 7})", "s.json"); },
               {"s.json", "skipped_steps 7 exceeds step 6"});
  expect_error([] { parse_checkpoint_state(R"({"step": 6, "tokens": 10, "skipped_steps": -1})", "s.json"); },
               {"s.json", "skipped_steps"});
  expect_error([] { parse_checkpoint_state(R"({"step": "4abc", "tokens": 10})", "s.json"); }, {"s.json", "'step'"});
  drope::train::TrainState st;
  st.step = 5;
  st.skipped = 1;
  EXPECT_EQ(parse_checkpoint_state(drope::train::checkpoint_state_json(st), "s.json").skipped, 1);
}
