// GGUF: header, metadata and tensor infos against the file size, then every tensor dequantised.
#include <vector>

#include "drope/formats/gguf.h"
#include "fuzz_util.h"

DROPE_FUZZ_TARGET(gguf)(const uint8_t* data, size_t size) {
  const std::string where = "fuzz.gguf";
  drope::fuzz::expect_clean(where, [&] {
    const auto h = drope::gguf::parse_header(data, size, where);
    drope::fuzz::check(h.alignment > 0 && h.data_start % h.alignment == 0, "aligned data section");
    std::vector<float> out;
    for (const auto& t : h.tensors) {
      drope::fuzz::check(h.data_start + t.offset + t.bytes <= size, "tensor bytes inside the file");
      out.resize(static_cast<size_t>(t.elements()));
      drope::gguf::dequantize(t.type, data + h.data_start + t.offset, t.elements(), out.data());
    }
  });
  return 0;
}
