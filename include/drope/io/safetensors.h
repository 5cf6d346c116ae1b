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

namespace drope::io {

struct TensorEntry {
  std::string dtype;            // "F32", "BF16", ...
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte offsets into the data section
};

struct SafetensorsHeader {
  std::map<std::string, TensorEntry> tensors;
  std::map<std::string, std::string> metadata;
  uint64_t data_start = 0;  // absolute file offset of the data section
};

// Parses and validates the header of a file of `file_size` bytes whose first bytes are `data`
// (at least min(file_size, 8 + header size) bytes). `path` names the file in errors.
SafetensorsHeader parse_safetensors_header(const char* data, uint64_t size, const std::string& path);

// A read-only, memory-mapped safetensors file.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const SafetensorsHeader& header() const { return header_; }
  bool contains(const std::string& name) const { return header_.tensors.count(name) > 0; }
  // A copy of tensor `name` in its stored dtype (CPU).
  at::Tensor get(const std::string& name) const;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const char* map_ = nullptr;
  uint64_t size_ = 0;
  SafetensorsHeader header_;
};

// Writes tensors (contiguous copies, CPU) atomically. Names must be unique.
void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// Maps "F32"/"BF16"/... to ATen dtypes and back.
at::ScalarType safetensors_dtype(const std::string& s, const std::string& where);
std::string safetensors_dtype_name(at::ScalarType t);

}  // namespace drope::io
