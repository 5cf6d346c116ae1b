// NIAH haystack text: UTF-8 validation, word and sentence splitting, excerpts.
#include "drope/tasks/niah.h"
#include "fuzz_util.h"

DROPE_FUZZ_TARGET(niah_essay)(const uint8_t* data, size_t size) {
  const std::string path = drope::fuzz::input_file("essay.txt", data, size);
  drope::fuzz::expect_clean(path, [&] {
    const auto essay = drope::tasks::load_essay(path);
    drope::tasks::essay_sentences(essay, 3, 50);
  });
  return 0;
}
