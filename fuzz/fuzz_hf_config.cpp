// HF config.json (Llama / Qwen2, rope_parameters / rope_scaling) and, when expressible, its export.
#include "drope/formats/hf_config.h"
#include "fuzz_util.h"

DROPE_FUZZ_TARGET(hf_config)(const uint8_t* data, size_t size) {
  const std::string where = "fuzz/config.json";
  const std::string text(reinterpret_cast<const char*>(data), size);
  drope::fuzz::expect_clean(where, [&] {
    const auto cfg = drope::io::parse_hf_config(text, where);
    if (cfg.hf_expressible()) {
      std::string out;
      try {
        out = drope::io::hf_config_json(cfg);
      } catch (const drope::Error&) {
        return;  // e.g. dynamic-ntk with a different original length: refused with a message
      }
      drope::io::parse_hf_config(out, "export/config.json");
    }
  });
  return 0;
}
