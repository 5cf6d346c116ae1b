// Evaluation results documents (drope-eval compare, ppl --with, offset-key tables): the schema keys, the kind,
// the summary and results, and the method label. The first input byte picks the kind a reader asks for.
#include "drope/formats/results.h"
#include "fuzz_util.h"

DROPE_FUZZ_TARGET(results_json)(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  static const char* const kKinds[] = {"", "ppl", "niah", "offset-key", "compare/ppl"};
  const std::string kind = kKinds[data[0] % (sizeof kKinds / sizeof *kKinds)];
  const std::string path = drope::fuzz::input_file("results.json", data + 1, size - 1);
  drope::fuzz::expect_clean(path, [&] {
    const auto j = drope::eval::read_results(path, "", kind);
    drope::fuzz::check(j.is_object() && j.contains("kind") && j["kind"].is_string(), "a results document has a kind");
    if (!kind.empty()) drope::fuzz::check(j["kind"].get<std::string>() == kind, "the kind asked for");
    drope::eval::results_label(j, "fallback");
  });
  return 0;
}
