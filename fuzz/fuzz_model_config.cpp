// Model config YAML (strict YAML layer + model section + validation), and its YAML round trip.
#include "drope/config/model_config.h"
#include "drope/core/yaml.h"
#include "fuzz_util.h"

namespace fuzz_model_config {
drope::ModelConfig parse(const std::string& text, const std::string& source) {
  // As load_model_config_file, from memory.
  YAML::Node root = drope::parse_yaml(text, source);
  if (root.IsMap() && root["model"]) {
    drope::YamlMap top(root, source, "");
    drope::YamlMap model = top.map("model");
    top.finish();
    return drope::parse_model_config(model);
  }
  return drope::parse_model_config(drope::YamlMap(root, source, ""));
}
}  // namespace fuzz_model_config

DROPE_FUZZ_TARGET(model_config)(const uint8_t* data, size_t size) {
  const std::string where = "fuzz.yaml";
  const std::string text(reinterpret_cast<const char*>(data), size);
  drope::fuzz::expect_clean(where, [&] {
    const auto cfg = fuzz_model_config::parse(text, where);
    // What we write we can read back, unchanged.
    const std::string yaml = drope::model_config_to_yaml(cfg);
    const auto again = fuzz_model_config::parse(yaml, "roundtrip.yaml");
    drope::fuzz::check(drope::model_config_to_yaml(again) == yaml, "model config YAML round trip");
  });
  return 0;
}
