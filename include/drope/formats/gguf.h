// The GGUF container (llama.cpp's single-file model format, versions 2 and 3), read directly: a header,
// typed metadata key/values, tensor infos, then the aligned tensor data. Every count, string length,
// dimension, type and offset is checked against the file before anything is allocated. Dequantisation of
// the float and block-quantised tensor types to float32. Torch-free (docs/gguf.md describes the layout).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "drope/core/files.h"

namespace drope::gguf {

// Metadata value types (the numbering of the GGUF specification).
enum class ValueType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};
const char* value_type_name(ValueType t);

// Tensor element types (ggml's numbering); the ones listed can be dequantised.
enum class TensorType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kBF16 = 30,
};

// Layout of one tensor type: elements per block and bytes per block.
struct TypeTraits {
  const char* name;
  int64_t block_elems;
  int64_t block_bytes;
};
// The traits of ggml type `t`, or nullptr when drope cannot read it.
const TypeTraits* type_traits(uint32_t t);
// "Q4_K (12)" or "type 19" for an unknown number.
std::string type_label(uint32_t t);
// The supported type names, for messages.
std::string supported_type_names();

// One metadata entry. Numbers, bools and strings are JSON scalars; arrays are JSON arrays (element type in
// `elem_type`; arrays of arrays keep the inner element type of the first level only).
struct MetaValue {
  ValueType type = ValueType::kUint8;
  ValueType elem_type = ValueType::kUint8;  // arrays only
  nlohmann::json value;
};

struct TensorInfo {
  std::string name;
  std::vector<int64_t> dims;  // ggml order: dims[0] is the fastest-varying (a row)
  uint32_t type = 0;
  uint64_t offset = 0;  // from the start of the data section
  uint64_t bytes = 0;
  int64_t elements() const;
  // The shape in row-major (PyTorch / safetensors) order: dims reversed.
  std::vector<int64_t> shape() const;
};

// Limits on what a file may declare (beyond the file's own size).
constexpr uint64_t kMaxTensors = 1u << 20;
constexpr uint64_t kMaxMetaEntries = 1u << 20;
constexpr uint64_t kMaxKeyBytes = 1u << 16;
constexpr uint64_t kMaxStringBytes = 64u << 20;
constexpr int kMaxArrayDepth = 4;
// Metadata array elements, per array and in all: a tokenizer's largest array holds about 0.3M entries, and each
// element read costs 16 bytes or more in memory, so a longer array is refused before anything is allocated.
constexpr uint64_t kMaxMetaArrayElements = uint64_t{1} << 24;
constexpr uint64_t kMaxMetaArrayElementsTotal = uint64_t{1} << 25;
constexpr uint32_t kMaxDims = 4;  // GGML_MAX_DIMS
constexpr uint64_t kMaxAlignment = 1u << 16;

// The parsed header of a GGUF file (metadata and tensor infos; the tensor data stays in the file).
struct Header {
  uint32_t version = 0;
  uint64_t alignment = 32;
  uint64_t data_start = 0;  // file offset of the data section
  std::map<std::string, MetaValue> meta;
  std::vector<TensorInfo> tensors;  // in file order
};

// Parses and checks `size` bytes of a GGUF file (`path` names it in errors): magic, version 2 or 3,
// little-endian; each key a unique non-empty string; every string valid UTF-8; every count, string and array
// fits in the bytes that remain, arrays within the element limits above; tensor names unique, 1..4 dimensions
// of at least 1 element, a known type whose block size divides the row, data inside the data section, aligned,
// and no two tensors overlapping.
Header parse_header(const uint8_t* data, uint64_t size, const std::string& path);

// Dequantises `n` elements (a multiple of the type's block) of type `t` from `src` into `dst`.
void dequantize(uint32_t t, const uint8_t* src, int64_t n, float* dst);

// IEEE half and bfloat16 to float.
float half_to_float(uint16_t h);
float bf16_to_float(uint16_t b);

// A read-only, memory-mapped GGUF file.
class File {
 public:
  explicit File(const std::string& path);

  const std::string& path() const { return path_; }
  const Header& header() const { return header_; }
  const MetaValue* find(const std::string& key) const;
  bool has(const std::string& key) const { return find(key) != nullptr; }
  // Typed getters: a missing key or a value of another kind fails naming the file and key.
  std::string get_string(const std::string& key) const;
  int64_t get_int(const std::string& key) const;
  double get_float(const std::string& key) const;  // integers are accepted too
  bool get_bool(const std::string& key) const;
  const nlohmann::json& get_array(const std::string& key, ValueType elem) const;
  // The same with a default for a missing key.
  std::string get_string(const std::string& key, const std::string& def) const;
  int64_t get_int(const std::string& key, int64_t def) const;
  double get_float(const std::string& key, double def) const;
  bool get_bool(const std::string& key, bool def) const;

  const TensorInfo* tensor(const std::string& name) const;
  // The tensor's elements as float32, row-major in TensorInfo::shape() order, into `dst` (elements() floats).
  void read_float(const TensorInfo& t, float* dst) const;

 private:
  std::string path_;
  std::unique_ptr<MappedFile> file_;
  Header header_;
  std::map<std::string, size_t> by_name_;
};

// Whether `path` names a GGUF file by its extension (.gguf, any case).
bool is_gguf_path(const std::string& path);

}  // namespace drope::gguf
