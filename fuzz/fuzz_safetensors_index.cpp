// The index of a sharded safetensors checkpoint (model.safetensors.index.json): its weight_map, tensor name →
// shard file, each file a plain name inside the model directory.
#include "drope/formats/safetensors_header.h"
#include "fuzz_util.h"

DROPE_FUZZ_TARGET(safetensors_index)(const uint8_t* data, size_t size) {
  const std::string where = "model.safetensors.index.json";
  const std::string text(reinterpret_cast<const char*>(data), size);
  drope::fuzz::expect_clean(where, [&] {
    const auto map = drope::io::parse_safetensors_index(text, where);
    drope::fuzz::check(!map.empty(), "a weight_map with at least one tensor");
    for (const auto& [name, file] : map)
      drope::fuzz::check(!file.empty() && file.find('/') == std::string::npos && file.find("..") == std::string::npos,
                         "shard files are plain names inside the directory");
  });
  return 0;
}
