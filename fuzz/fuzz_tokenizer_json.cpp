// HF tokenizer.json (byte-level BPE): model, merges, added tokens, pre-tokenizer regexes, normalizer;
// a loaded tokenizer must then encode and decode text without failing.
#include "drope/text/tokenizer.h"
#include "fuzz_util.h"

DROPE_FUZZ_TARGET(tokenizer_json)(const uint8_t* data, size_t size) {
  const std::string path = drope::fuzz::input_file("tokenizer.json", data, size);
  drope::fuzz::expect_clean(path, [&] {
    auto tok = drope::text::load_hf_bpe(path);
    const auto ids = tok->encode("Hello, world! The year 2024: naïve café 東京 <|endoftext|>  spaces\n\ttabs");
    for (int32_t id : ids) drope::fuzz::check(id >= 0 && id < tok->vocab_size(), "encoded id inside the vocabulary");
    tok->decode(ids);
  });
  return 0;
}
