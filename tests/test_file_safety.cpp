// Never delete what we did not create: our temporaries have a name only we produce (with our pid), only
// those of dead processes are cleaned, a non-empty directory that is not ours is never replaced, an output
// is never an input, and a directory being written is locked against a second process. Also the strict parts of a
// checkpoint's state.json. Torch-free.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "drope/core/files.h"
#include "drope/formats/checkpoint_state.h"
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
  const std::vector<std::string> keep = {"notes.tmp-1-2",
                                         "data.tmp-" + g + "-abc",
                                         "x.tmp-delete",
                                         ".drope-tmp-" + std::to_string(::getpid()) + "-ab.live",
                                         ".drope-tmp-" + g + "-xyz.nothex",
                                         ".drope-tmp-" + g + "-ab.",
                                         ".drope-tmp--ab.x",
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

// The model-output rule as drope-model uses it.
drope::OutputDirRule model_rule(std::vector<std::pair<std::string, std::string>> inputs = {}, bool force = false) {
  return {"--out", "model directory", {"drope.yaml"}, std::move(inputs), force, "pass --force"};
}

TEST(FileSafety, ForeignDirectoriesAreNotReplaced) {
  const auto dir = fs::path(tmp_dir("file_safety_foreign"));
  const auto user = dir / "photos";
  fs::create_directories(user);
  touch(user / "holiday.jpg");
  expect_error([&] { drope::check_output_dir(user.string(), model_rule()); },
               {"--out", user.string(), "not a model directory", "drope.yaml", "refusing", "--force"});
  drope::check_output_dir(user.string(), model_rule({}, true));  // --force
  touch(dir / "file");
  expect_error([&] { drope::check_output_dir((dir / "file").string(), model_rule({}, true)); }, {"not a directory"});
  // Absent, empty, or ours: fine.
  drope::check_output_dir((dir / "absent").string(), model_rule());
  fs::create_directories(dir / "empty");
  drope::check_output_dir((dir / "empty").string(), model_rule());
  fs::create_directories(dir / "ours");
  touch(dir / "ours" / "drope.yaml");
  drope::check_output_dir((dir / "ours").string(), model_rule());
  EXPECT_TRUE(fs::exists(user / "holiday.jpg"));
}

TEST(FileSafety, AnOutputIsNeverAnInputNorInsideOneNorHoldsOne) {
  const auto dir = fs::path(tmp_dir("file_safety_input_output"));
  const auto model = dir / "models" / "m";
  fs::create_directories(model);
  touch(model / "drope.yaml");  // a model of ours: replaceable, but not while it is the input
  fs::create_symlink(model, dir / "link");
  const std::vector<std::pair<std::string, std::string>> in = {{"--model", model.string()}};
  // The same directory, spelled four ways, even with --force.
  for (const auto& out : {model, dir / "link", dir / "models" / "." / "m" / "", dir / "models" / "x" / ".." / "m"})
    expect_error([&] { drope::check_output_dir(out.string(), model_rule(in, true)); },
                 {"--out", "is the input --model", model.string()});
  expect_error([&] { drope::check_output_dir((model / "sub").string(), model_rule(in, true)); },
               {"is inside the input --model"});
  expect_error([&] { drope::check_output_dir((dir / "link" / "a" / "b").string(), model_rule(in, true)); },
               {"is inside the input --model"});
  expect_error([&] { drope::check_output_dir((dir / "models").string(), model_rule(in, true)); },
               {"contains the input --model"});
  // An input given through a symlink is the same input.
  expect_error(
      [&] { drope::check_output_dir(model.string(), model_rule({{"--model", (dir / "link").string()}}, true)); },
      {"is the input --model"});
  // A sibling is fine; an absent input or an empty path is not compared.
  drope::check_output_dir((dir / "models" / "m2").string(), model_rule(in));
  drope::check_output_dir(model.string(), model_rule({{"--model", (dir / "absent").string()}, {"--tokenizer", ""}}));
}

TEST(FileSafety, OutputsWrittenInPlaceAreNeverAnInputNorInsideOne) {
  const auto dir = fs::path(tmp_dir("file_safety_output_paths"));
  const auto model = dir / "m";
  fs::create_directories(model);
  touch(model / "model.safetensors", "weights");
  touch(dir / "a.json", "{}");
  fs::create_symlink(model, dir / "link");
  const std::vector<std::pair<std::string, std::string>> in = {
      {"--model", model.string()}, {"FILES", (dir / "a.json").string()}, {"--tokenizer", ""}};
  auto check = [&](const fs::path& out, const std::vector<std::string>& paths) {
    drope::check_output_paths("--out", out.string(), paths, in);
  };
  // A file inside the model, however spelled, the model itself, and an input file.
  for (const auto& out : {model / "model.safetensors", dir / "link" / "x.safetensors", dir / "m" / "." / "sub" / "y"})
    expect_error([&] { check(out, {out.string()}); }, {"--out", out.string(), "is inside the input --model"});
  for (const auto& out : {model, dir / "link", model / ""})
    expect_error([&] { check(out, {out.string()}); }, {"--out", "is the input --model", model.string()});
  expect_error([&] { check(dir / "a.json", {(dir / "a.json").string()}); }, {"is the input FILES"});
  // A prefix whose files would include an input names that file.
  const auto prefix = (dir / "a").string();
  expect_error([&] { check(prefix, {prefix + ".json", prefix + ".csv"}); },
               {"--out " + prefix + " (file " + prefix + ".json) is the input FILES"});
  // Beside the inputs, or around them: fine (nothing of theirs is written).
  check(dir / "b", {(dir / "b.json").string(), (dir / "b.csv").string()});
  check(dir, {dir.string()});
  check(dir / "out" / "logits.safetensors", {(dir / "out" / "logits.safetensors").string()});
  EXPECT_EQ(drope::read_file((model / "model.safetensors").string()), "weights");
}

TEST(FileSafety, APrefixOfAFileIsReadAlone) {
  const auto dir = fs::path(tmp_dir("file_safety_prefix"));
  touch(dir / "t.txt", "0123456789");
  EXPECT_EQ(drope::read_file_prefix((dir / "t.txt").string(), 4), "0123");
  EXPECT_EQ(drope::read_file_prefix((dir / "t.txt").string(), 100), "0123456789");
  EXPECT_EQ(drope::read_file_prefix((dir / "t.txt").string(), 0), "");
  expect_error([&] { drope::read_file_prefix((dir / "none").string(), 4); }, {"none", "not found"});
  expect_error([&] { drope::read_file_prefix(dir.string(), 4); }, {"a directory"});
}

namespace {

// A child process that takes DirLock(dir, where) and holds it until killed; returns its pid once it holds it.
pid_t child_holding_lock(const std::string& dir, drope::DirLock::Where where) {
  int ready[2];
  EXPECT_EQ(::pipe(ready), 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(ready[0]);
    try {
      drope::DirLock lock(dir, where);
      char ok = 1;
      if (::write(ready[1], &ok, 1) != 1) ::_exit(3);
      for (;;) ::pause();
    } catch (...) {
      ::_exit(2);
    }
  }
  ::close(ready[1]);
  char ok = 0;
  EXPECT_EQ(::read(ready[0], &ok, 1), 1) << "the child could not take the lock";
  ::close(ready[0]);
  return pid;
}

void kill_and_reap(pid_t pid) {
  ::kill(pid, SIGKILL);
  int st = 0;
  ::waitpid(pid, &st, 0);
}

}  // namespace

TEST(FileSafety, DirLockRefusesASecondProcessAndTakesOverAfterItDies) {
  for (const auto where : {drope::DirLock::Where::kInside, drope::DirLock::Where::kBeside}) {
    const std::string dir = (fs::path(tmp_dir("file_safety_lock")) / "run").string();
    const pid_t holder = child_holding_lock(dir, where);
    ASSERT_GT(holder, 0);
    expect_error([&] { drope::DirLock second(dir, where); }, {dir + " is in use by process " + std::to_string(holder)});
    expect_error([&] { drope::DirLock again(dir, where); }, {"in use"});  // a refused try changes nothing
    // Killed holding it (no release): the kernel dropped the lock; the file names the dead holder.
    kill_and_reap(holder);
    drope::DirLock taken(dir, where);
    EXPECT_TRUE(taken.held());
    EXPECT_EQ(taken.stale_owner(), holder);
    EXPECT_EQ(drope::read_file(taken.lock_path()), std::to_string(::getpid()) + "\n");
    const std::string path = taken.lock_path();
    taken = drope::DirLock();  // released: nothing stale for the next one
    if (where == drope::DirLock::Where::kBeside) EXPECT_FALSE(fs::exists(path));
    else EXPECT_EQ(drope::read_file(path), "");
    drope::DirLock next(dir, where);
    EXPECT_EQ(next.stale_owner(), 0);
  }
}

TEST(FileSafety, DirLockRemovesOnlyTheEmptyDirectoriesItCreated) {
  const auto root = fs::path(tmp_dir("file_safety_lock_dirs"));
  for (const auto where : {drope::DirLock::Where::kInside, drope::DirLock::Where::kBeside}) {
    {
      drope::DirLock l((root / "a" / "b" / "out").string(), where);
    }  // a refused run: nothing was written
    EXPECT_FALSE(fs::exists(root / "a"));
    {
      drope::DirLock l((root / "a" / "b" / "out").string(), where);
      fs::create_directories(root / "a" / "b" / "out");
      touch(root / "a" / "b" / "out" / "result.json");
    }
    EXPECT_TRUE(fs::exists(root / "a" / "b" / "out" / "result.json"));
    // kInside: the lock file stays as the mark of a directory of ours; kBeside: it goes.
    EXPECT_EQ(fs::exists(root / "a" / "b" / "out" / drope::kDirLockName), where == drope::DirLock::Where::kInside);
    EXPECT_FALSE(fs::exists(root / "a" / "b" / ".out.drope-lock"));
    fs::remove_all(root / "a");
  }
}

TEST(FileSafety, DirLockRefusesALockFileThatIsAFifo) {
  const auto dir = fs::path(tmp_dir("file_safety_lock_fifo"));
  fs::create_directories(dir / "run");
  ASSERT_EQ(::mkfifo((dir / "run" / drope::kDirLockName).c_str(), 0644), 0);
  expect_error([&] { drope::DirLock l((dir / "run").string(), drope::DirLock::Where::kInside); },
               {"lock file", "not a regular file"});
}

TEST(FileSafety, DirectoryWriteErrorsNameTheTargetNotTheTemporary) {
  const auto dir = fs::path(tmp_dir("file_safety_names"));
  const std::string out = (dir / "ds").string();
  expect_error(
      [&] { drope::write_dir_atomic(out, [](const std::string& tmp) { drope::fail("{}/train/a.bin: boom", tmp); }); },
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

// A mapped file truncated in place by another process (cp or rsync --inplace over it) turns a read past its new
// end into SIGBUS: the tool says which file and exits 1, instead of dying of the signal without a word.
TEST(FileSafety, AMappedFileTruncatedWhileReadIsNamed) {
  const std::string style = GTEST_FLAG_GET(death_test_style);
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const fs::path dir = tmp_dir("mapped-truncated");
  const std::string path = (dir / "weights.bin").string();
  std::ofstream(path) << std::string(3 * 4096, 'x');
  EXPECT_EXIT(
      {
        const drope::MappedFile f(path);
        if (::truncate(path.c_str(), 0) != 0) ::_exit(3);
        volatile uint8_t sink = f.data()[2 * 4096];
        (void)sink;
        ::_exit(2);  // not reached: the read above faults
      },
      ::testing::ExitedWithCode(1), "weights.bin: the file shrank while it was being read");
  // Any other SIGBUS goes to the handler installed before (a sanitizer's) or takes the default action: not ours.
  std::ofstream(path) << std::string(3 * 4096, 'x');  // the child above truncated it
  EXPECT_EXIT(
      {
        const drope::MappedFile f(path);  // installs the handler
        std::raise(SIGBUS);
      },
      [](int status) { return !WIFEXITED(status); }, "");  // ours exits with status 1
  GTEST_FLAG_SET(death_test_style, style);
}

TEST(FileSafety, StableFilesNamesAFileReplacedMeanwhile) {
  const fs::path dir = tmp_dir("stable-files");
  std::ofstream(dir / "a.safetensors") << "one";
  std::ofstream(dir / "b.json") << "two";
  std::ofstream(dir / "temperature.json") << "{}";
  const auto read = [](const std::string& name) { return name != "temperature.json"; };
  const drope::StableFiles before(dir.string(), read);
  before.check();  // nothing changed
  std::ofstream(dir / "c.tmp") << "new";  // an added file was not read: not a change
  std::ofstream(dir / "temperature.json") << "{\"c\": 1}";  // nor one the reader does not read
  ::chmod((dir / "b.json").c_str(), 0600);  // nor a change of its metadata alone (hard-link snapshots do that too)
  before.check();
  std::ofstream(dir / "b.json.new") << "TWO";
  fs::rename(dir / "b.json.new", dir / "b.json");
  expect_error([&] { before.check(); }, {"b.json: was replaced or written to while it was being read"});
  const drope::StableFiles again(dir.string(), read);
  fs::remove(dir / "a.safetensors");
  expect_error([&] { again.check(); }, {"a.safetensors: was removed while it was being read"});
}
