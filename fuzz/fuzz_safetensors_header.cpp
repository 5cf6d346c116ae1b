// safetensors header: size prefix, JSON, dtypes, shapes and offsets against the file size.
#include "drope/formats/safetensors_header.h"
#include "fuzz_util.h"

DROPE_FUZZ_TARGET(safetensors_header)(const uint8_t* data, size_t size) {
  const std::string where = "fuzz.safetensors";
  drope::fuzz::expect_clean(where, [&] {
    auto h = drope::io::parse_safetensors_header(reinterpret_cast<const char*>(data), size, where);
    drope::fuzz::check(h.data_start >= 8 && h.data_start <= size, "data section inside the file");
    for (const auto& [name, t] : h.tensors) {
      drope::fuzz::check(t.begin <= t.end && t.end <= size - h.data_start, "tensor bytes inside the data section");
      uint64_t bytes = drope::io::safetensors_itemsize(t.dtype, name);
      for (int64_t d : t.shape) bytes *= static_cast<uint64_t>(d);  // in range: checked against the offsets
      drope::fuzz::check(bytes == t.end - t.begin, "shape x itemsize == byte range");
    }
  });
  return 0;
}
