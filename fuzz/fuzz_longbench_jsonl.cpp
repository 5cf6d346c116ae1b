// LongBench data and prediction files (JSON lines), prompt building and scoring. The first input byte
// picks the dataset and the reader; the rest is the file.
#include "drope/tasks/longbench.h"
#include "fuzz_util.h"

DROPE_FUZZ_TARGET(longbench_jsonl)(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  namespace lb = drope::tasks::longbench;
  const auto& all = lb::datasets();
  const auto& ds = all[data[0] % all.size()];
  const bool predictions = data[0] & 0x80;
  const std::string path = drope::fuzz::input_file(predictions ? "pred.jsonl" : "data.jsonl", data + 1, size - 1);
  drope::fuzz::expect_clean(path, [&] {
    if (predictions) {
      const auto preds = lb::read_predictions(path, data[0] & 0x40);
      lb::score(ds, preds);
    } else {
      for (const auto& s : lb::read_samples(path, ds)) lb::build_prompt(ds, s);
    }
  });
  return 0;
}
