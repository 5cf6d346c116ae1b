// index.json of a prepared dataset (drope-data prepare): format, tokenizer, splits, shard lists.
#include "drope/text/shards.h"
#include "fuzz_util.h"

DROPE_FUZZ_TARGET(dataset_index)(const uint8_t* data, size_t size) {
  const std::string path = drope::fuzz::input_file("index.json", data, size);
  drope::fuzz::expect_clean(path, [&] {
    auto idx = drope::text::read_index(path);
    for (const auto& [name, s] : idx.splits) {
      int64_t sum = 0;
      for (const auto& sh : s.shards) sum += sh.tokens;
      drope::fuzz::check(sum == s.tokens, "split token count is the sum over shards");
    }
    drope::text::index_to_json(idx);
  });
  return 0;
}
