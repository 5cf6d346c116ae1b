// Checkpoint integrity below the tools: the CRC-32C used for the digests (hardware path against the table),
// and state.json's run identity, digests and own digest (written, read back, edited).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "drope/core/crc32c.h"
#include "drope/core/error.h"
#include "drope/core/files.h"
#include "drope/formats/checkpoint_digest.h"
#include "drope/formats/checkpoint_state.h"
#include "test_util.h"

namespace {

using drope::train::TrainState;

TEST(CheckpointDigest, FastCrcEqualsTheTableAtEveryLengthAndAlignment) {
  EXPECT_EQ(drope::train::fast_crc32c("123456789", 9), 0xE3069283u);  // the CRC-32C check value
  std::mt19937 rng(7);
  std::vector<char> buf(4096 + 16);
  for (auto& c : buf) c = char(rng());
  for (size_t off = 0; off < 8; ++off)
    for (size_t n : {0, 1, 7, 8, 9, 63, 64, 65, 1000, 4096}) {
      const std::string_view v(buf.data() + off, n);
      EXPECT_EQ(drope::train::fast_crc32c(v.data(), v.size()), drope::crc32c(v)) << off << " " << n;
      EXPECT_EQ(drope::train::fast_crc32c(v.data(), v.size(), 0x1234u), drope::crc32c(v, 0x1234u)) << off << " " << n;
    }
}

TEST(CheckpointDigest, Throughput) {
  std::vector<char> buf(size_t(256) << 20, 1);
  const auto t0 = std::chrono::steady_clock::now();
  const uint32_t c = drope::train::fast_crc32c(buf.data(), buf.size());
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const auto t1 = std::chrono::steady_clock::now();
  const uint32_t d = drope::crc32c(std::string_view(buf.data(), size_t(16) << 20));
  const double s_table = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count() * 16;
  std::printf("crc32c: %.2f GB/s (table: %.2f GB/s)\n", buf.size() / s / 1e9, buf.size() / s_table / 1e9);
  EXPECT_NE(c, d);
}

TrainState sample_state() {
  TrainState st;
  st.step = 40;
  st.tokens = 4096;
  st.phase_start = 20;
  st.skipped = 1;
  st.extra = {{"val_loss", 3.25}, {"complete", true}};
  st.run.id = drope::train::new_run_id();
  st.run.parent_id = drope::train::new_run_id();
  st.run.parent_step = 400;
  st.run.parent_path = "runs/a/checkpoints/step-00000400";
  st.digests["drope.yaml"].whole = "0123abcd";
  st.digests["model.safetensors"].tensors = {{"model.norm.weight", "deadbeef"}, {"lm_head.weight", "00000001"}};
  return st;
}

TEST(CheckpointState, IdentityAndDigestsRoundTrip) {
  const TrainState st = sample_state();
  EXPECT_NE(st.run.id, drope::train::new_run_id());
  const auto back = drope::train::parse_checkpoint_state(drope::train::checkpoint_state_json(st), "s.json");
  EXPECT_EQ(back.version, 2);
  EXPECT_TRUE(back.intact);
  EXPECT_EQ(back.run.id, st.run.id);
  EXPECT_EQ(back.run.parent_id, st.run.parent_id);
  EXPECT_EQ(back.run.parent_step, 400);
  EXPECT_EQ(back.run.parent_path, st.run.parent_path);
  EXPECT_EQ(back.digests.at("drope.yaml").whole, "0123abcd");
  EXPECT_EQ(back.digests.at("model.safetensors").tensors, st.digests.at("model.safetensors").tensors);
  EXPECT_EQ(back.extra, st.extra);
}

TEST(CheckpointState, AnEditClearsIntact) {
  std::string text = drope::train::checkpoint_state_json(sample_state());
  const auto at = text.find("\"tokens\": 4096");
  ASSERT_NE(at, std::string::npos);
  text.replace(at, 14, "\"tokens\": 4097");
  const auto edited = drope::train::parse_checkpoint_state(text, "s.json");
  EXPECT_FALSE(edited.intact);
  EXPECT_EQ(edited.tokens, 4097);
}

TEST(CheckpointState, OlderFilesAreVersionOneAndStayThatWay) {
  const auto old =
      drope::train::parse_checkpoint_state(R"({"step": 2, "tokens": 8, "format": "drope-checkpoint-1"})", "old.json");
  EXPECT_EQ(old.version, 1);
  EXPECT_TRUE(old.run.id.empty());
  const auto again = drope::train::parse_checkpoint_state(drope::train::checkpoint_state_json(old), "again.json");
  EXPECT_EQ(again.version, 1);
  EXPECT_EQ(drope::train::parse_checkpoint_state(R"({"step": 2, "tokens": 8})", "older.json").version, 1);
}

TEST(CheckpointState, MalformedIdentityOrDigestsAreRefusedNamingTheKey) {
  auto refused = [](const std::string& text, const std::string& needle) {
    try {
      drope::train::parse_checkpoint_state(text, "bad/state.json");
      ADD_FAILURE() << "accepted: " << text;
    } catch (const drope::Error& e) {
      EXPECT_NE(std::string(e.what()).find("bad/state.json"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  const std::string base = R"({"step": 2, "tokens": 8, "format": "drope-checkpoint-2", )";
  const std::string digests = R"("digests": {"algorithm": "crc32c", "files": {"drope.yaml": "0123abcd"}}, )";
  const std::string run = R"("run": {"id": "0123456789abcdef0123456789abcdef", "parent": null}, )";
  refused(R"({"step": 2, "tokens": 8, "format": "drope-checkpoint-9"})", "drope-checkpoint-9");
  refused(base + digests + R"("state_digest": "00000000"})", "'run'");
  refused(base + R"("run": {"id": "XYZ"}, )" + digests + R"("state_digest": "00000000"})", "run.id");
  refused(base + run + R"("state_digest": "00000000"})", "'digests'");
  refused(base + run + R"("digests": {"algorithm": "md5", "files": {}}, "state_digest": "0"})", "digests.algorithm");
  refused(base + run + R"("digests": {"algorithm": "crc32c", "files": {"../x": "0123abcd"}}, "state_digest": "0"})",
          "'../x'");
  refused(base + run + digests + "\"x\": 1}", "state_digest");
}

namespace fs = std::filesystem;

bool any_file(const std::string&) { return true; }

TEST(CheckpointIntegrity, FilesTheLoadersReadMustBeRecorded) {
  const std::string dir = drope::test::tmp_dir("ckpt_unrecorded");
  drope::write_file_atomic((fs::path(dir) / "drope.yaml").string(), "model: {preset: micro}\n");
  drope::write_file_atomic((fs::path(dir) / "run.yaml").string(), "run: {name: r}\n");
  TrainState st = sample_state();
  st.digests = drope::train::digest_directory(dir);
  using drope::train::check_checkpoint_integrity;
  EXPECT_TRUE(check_checkpoint_integrity(dir, st, any_file).empty());
  // Files no loader reads may be added (a fitted temperature, notes).
  drope::write_file_atomic((fs::path(dir) / "temperature.json").string(), "{\"c\": 0.1}\n");
  drope::write_file_atomic((fs::path(dir) / "notes.txt").string(), "mine\n");
  EXPECT_TRUE(check_checkpoint_integrity(dir, st, any_file).empty());
  // An optimizer file (read in place of a sharded run's pieces) and a model index are not.
  drope::write_file_atomic((fs::path(dir) / "optimizer.safetensors").string(), "x");
  auto problems = check_checkpoint_integrity(dir, st, any_file);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("optimizer.safetensors: not recorded in"), std::string::npos) << problems[0];
  EXPECT_TRUE(check_checkpoint_integrity(dir, st, drope::train::is_model_file).empty());  // a model load reads none
  drope::write_file_atomic((fs::path(dir) / "model.safetensors.index.json").string(), "{}");
  problems = check_checkpoint_integrity(dir, st, drope::train::is_model_file);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("model.safetensors.index.json: not recorded"), std::string::npos) << problems[0];
}

}  // namespace
