// Token shard files: header (magic, version, sizes, EOS, count) against the file size, then every token.
#include "drope/text/shards.h"
#include "fuzz_util.h"

DROPE_FUZZ_TARGET(token_shard)(const uint8_t* data, size_t size) {
  const std::string path = drope::fuzz::input_file("shard.bin", data, size);
  drope::fuzz::expect_clean(path, [&] {
    drope::text::TokenShard s(path);
    drope::fuzz::check(uint64_t(s.size()) * uint64_t(s.token_bytes()) + 32 == size, "count matches the file size");
    uint64_t sum = 0;
    for (int64_t i = 0; i < s.size(); ++i) sum += s[i];
    (void)sum;
  });
  return 0;
}
