// The safetensors header, parsed and validated without LibTorch: 8-byte little-endian
// header size, a JSON object {name: {dtype, shape, data_offsets}, "__metadata__": {...}}. Every field
// is checked against the file size before anything is allocated.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

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

// Bytes per element of a safetensors dtype name (F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL);
// fails naming `where` for anything else.
size_t safetensors_itemsize(const std::string& dtype, const std::string& where);

// Parses and validates the header of a file of `size` bytes whose first bytes are `data`
// (at least min(size, 8 + header size) bytes). `path` names the file in errors.
SafetensorsHeader parse_safetensors_header(const char* data, uint64_t size, const std::string& path);

// The weight_map of a sharded checkpoint's index (model.safetensors.index.json, read from `path`): tensor name
// → shard file. Fails naming `path` (and the key) unless it is an object with a non-empty "weight_map" object
// whose values are plain file names inside the directory (no '/', no "..").
std::map<std::string, std::string> parse_safetensors_index(const std::string& text, const std::string& path);

}  // namespace drope::io
