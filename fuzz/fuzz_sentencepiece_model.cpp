// SentencePiece .model (ModelProto): our invariant check, then libsentencepiece loading, encoding and
// decoding. A model the check accepts must never crash the library; the ids it produces are in range.
#include "drope/text/sentencepiece_model.h"
#include "drope/text/tokenizer.h"
#include "fuzz_util.h"

DROPE_FUZZ_TARGET(sentencepiece_model)(const uint8_t* data, size_t size) {
  const std::string path = drope::fuzz::input_file("tokenizer.model", data, size);
  drope::fuzz::expect_clean(path, [&] {
    auto tok = drope::text::load_sentencepiece(path);
    const auto ids = tok->encode("Hello, world! AAb naïve café 東京 ﬁ ① Ａ  spaces\n\ttabs <s></s><unk> 12345");
    for (int32_t id : ids) drope::fuzz::check(id >= 0 && id < tok->vocab_size(), "encoded id inside the vocabulary");
    tok->decode(ids);
  });
  return 0;
}
