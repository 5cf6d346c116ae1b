// Replays the fuzzing seed corpora (fuzz/corpus/<target>/) and every input that once crashed a fuzz target
// (tests/data/fuzz-regressions/<target>/) through the same harness code, built as plain functions: each
// input must be parsed or rejected with a drope::Error naming the file; a harness invariant failing aborts
// the test binary. Torch-free. The targets over drope_tasks (LongBench, NIAH, jieba) are
// replayed where the binary links it (DROPE_FUZZ_REPLAY_TASKS: drope_tests, not the sanitizer build's
// drope_torchfree_tests), and by scripts/fuzz.sh.
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "drope/core/files.h"

#define DROPE_FUZZ_REPLAY 1
#include "../fuzz/fuzz_checkpoint_state.cpp"
#include "../fuzz/fuzz_dataset_index.cpp"
#include "../fuzz/fuzz_gguf.cpp"
#include "../fuzz/fuzz_hf_config.cpp"
#include "../fuzz/fuzz_json.cpp"
#include "../fuzz/fuzz_model_config.cpp"
#include "../fuzz/fuzz_results_json.cpp"
#include "../fuzz/fuzz_safetensors_header.cpp"
#include "../fuzz/fuzz_safetensors_index.cpp"
#include "../fuzz/fuzz_sentencepiece_model.cpp"
#include "../fuzz/fuzz_token_shard.cpp"
#include "../fuzz/fuzz_tokenizer_json.cpp"
#ifdef DROPE_FUZZ_REPLAY_TASKS
#include "../fuzz/fuzz_jieba_dict.cpp"
#include "../fuzz/fuzz_longbench_jsonl.cpp"
#include "../fuzz/fuzz_niah_essay.cpp"
#endif

namespace fs = std::filesystem;

namespace {

struct Target {
  const char* name;
  int (*fn)(const uint8_t*, size_t);
};

const std::vector<Target> kTargets = {
    {"checkpoint_state", drope_fuzz_checkpoint_state},
    {"dataset_index", drope_fuzz_dataset_index},
    {"hf_config", drope_fuzz_hf_config},
    {"model_config", drope_fuzz_model_config},
    {"safetensors_header", drope_fuzz_safetensors_header},
    {"safetensors_index", drope_fuzz_safetensors_index},
    {"token_shard", drope_fuzz_token_shard},
    {"tokenizer_json", drope_fuzz_tokenizer_json},
    {"sentencepiece_model", drope_fuzz_sentencepiece_model},
    {"json", drope_fuzz_json},
    {"gguf", drope_fuzz_gguf},
    {"results_json", drope_fuzz_results_json},
#ifdef DROPE_FUZZ_REPLAY_TASKS
    {"jieba_dict", drope_fuzz_jieba_dict},
    {"longbench_jsonl", drope_fuzz_longbench_jsonl},
    {"niah_essay", drope_fuzz_niah_essay},
#endif
};

// Runs every file of `dir` (if it exists) through the target; returns how many.
int replay(const Target& t, const fs::path& dir) {
  int n = 0;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return 0;
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file()) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    SCOPED_TRACE(f.string());
    const std::string bytes = drope::read_file(f.string());
    t.fn(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
    ++n;
  }
  return n;
}

}  // namespace

TEST(FuzzRegressions, SeedCorporaAndSavedCrashesParseOrFailCleanly) {
  const fs::path root(DROPE_SOURCE_DIR);
  for (const auto& t : kTargets) {
    SCOPED_TRACE(t.name);
    EXPECT_GT(replay(t, root / "fuzz" / "corpus" / t.name), 0) << "no seed inputs for " << t.name;
    replay(t, root / "tests" / "data" / "fuzz-regressions" / t.name);
  }
}
