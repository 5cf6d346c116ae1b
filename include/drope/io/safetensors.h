// The safetensors file format, read and written directly: 8-byte little-endian header size, a JSON
// header {name: {dtype, shape, data_offsets}}, then the tensor bytes. Every header field is validated
// before anything is allocated.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include "drope/core/files.h"
#include "drope/formats/safetensors_header.h"

namespace drope::io {

// A read-only, memory-mapped safetensors file.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);

  const SafetensorsHeader& header() const { return header_; }
  bool contains(const std::string& name) const { return header_.tensors.count(name) > 0; }
  // A copy of tensor `name` in its stored dtype (CPU).
  at::Tensor get(const std::string& name) const;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  MappedFile file_;
  SafetensorsHeader header_;
};

// Writes tensors (contiguous copies, CPU) atomically. Names must be unique.
void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// Maps "F32"/"BF16"/... to ATen dtypes and back.
at::ScalarType safetensors_dtype(const std::string& s, const std::string& where);
std::string safetensors_dtype_name(at::ScalarType t);

}  // namespace drope::io
