#include "drope/formats/safetensors_header.h"

#include <algorithm>
#include <string_view>
#include <utility>

#include <nlohmann/json.hpp>

#include "drope/core/error.h"
#include "drope/core/json.h"

namespace drope::io {

namespace {
constexpr uint64_t kMaxHeader = 100ull << 20;  // as the reference implementation: 100 MB
constexpr int64_t kMaxDims = 16;
}  // namespace

size_t safetensors_itemsize(const std::string& s, const std::string& where) {
  if (s == "F64" || s == "I64") return 8;
  if (s == "F32" || s == "I32") return 4;
  if (s == "F16" || s == "BF16" || s == "I16") return 2;
  if (s == "I8" || s == "U8" || s == "BOOL") return 1;
  fail("{}: unsupported dtype '{}' (expected F64, F32, F16, BF16, I64, I32, I16, I8, U8 or BOOL)", where, s);
}

SafetensorsHeader parse_safetensors_header(const char* data, uint64_t size, const std::string& path) {
  if (size < 8) fail("{}: not a safetensors file: {} bytes, shorter than the 8-byte header size", path, size);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(data[i]);
  if (n > kMaxHeader) fail("{}: safetensors header claims {} bytes (limit {})", path, n, kMaxHeader);
  if (n > size - 8)
    fail("{}: truncated safetensors file: header claims {} bytes but only {} follow", path, n, size - 8);
  // Strict parse: a tensor name given twice is refused (JSON readers disagree on which one wins).
  const nlohmann::json j = parse_json(std::string_view(data + 8, n), path + ": safetensors header");
  if (!j.is_object()) fail("{}: safetensors header must be a JSON object", path);
  SafetensorsHeader h;
  h.data_start = 8 + n;
  const uint64_t data_size = size - h.data_start;
  std::vector<std::pair<std::string, std::pair<uint64_t, uint64_t>>> ranges;  // name, [begin, end)
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& name = it.key();
    if (name == "__metadata__") {
      if (it->is_null()) continue;  // as the reference implementation: null is no metadata
      if (!it->is_object()) fail("{}: __metadata__ must be an object of strings", path);
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (!m->is_string()) fail("{}: __metadata__ value for '{}' must be a string", path, m.key());
        h.metadata[m.key()] = m->get<std::string>();
      }
      continue;
    }
    const std::string where = path + ": tensor '" + name + "'";
    const auto& e = *it;
    if (!e.is_object() || !e.contains("dtype") || !e.contains("shape") || !e.contains("data_offsets"))
      fail("{}: expected an object with dtype, shape and data_offsets", where);
    if (!e["dtype"].is_string()) fail("{}: dtype must be a string", where);
    TensorEntry t;
    t.dtype = e["dtype"].get<std::string>();
    const size_t item = safetensors_itemsize(t.dtype, where);
    if (!e["shape"].is_array() || (int64_t)e["shape"].size() > kMaxDims)
      fail("{}: shape must be a list of at most {} non-negative integers", where, kMaxDims);
    unsigned __int128 numel = 1, nonzero = 1;
    for (const auto& d : e["shape"]) {
      if (!d.is_number_unsigned()) fail("{}: shape must be a list of non-negative integers", where);
      uint64_t v = d.get<uint64_t>();
      if (v > (1ull << 40)) fail("{}: dimension {} is implausibly large", where, v);
      t.shape.push_back(static_cast<int64_t>(v));
      // A zero dimension does not make [2^40, 2^40, 0] a shape: the reference implementation refuses it, and
      // sizes whose product overflows int64 are not a tensor's. (Each dimension <= 2^40: no 128-bit overflow.)
      if (v > 0) nonzero *= v;
      if (nonzero > static_cast<unsigned __int128>(INT64_MAX))
        fail("{}: the product of the shape's dimensions overflows 64 bits", where);
      numel *= v;
      if (numel > data_size) numel = data_size + 1;  // saturate; checked against the byte range below
    }
    const auto& off = e["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      fail("{}: data_offsets must be [begin, end] non-negative integers", where);
    t.begin = off[0].get<uint64_t>();
    t.end = off[1].get<uint64_t>();
    if (t.begin > t.end || t.end > data_size)
      fail("{}: data_offsets [{}, {}] outside the {}-byte data section (file truncated?)", where, t.begin, t.end,
           data_size);
    const unsigned __int128 bytes = numel * item;
    if (bytes != t.end - t.begin)
      fail("{}: shape and dtype need {} bytes but data_offsets span {}", where,
           bytes > data_size ? std::string("more than the whole data section") : std::to_string((uint64_t)bytes),
           t.end - t.begin);
    ranges.push_back({name, {t.begin, t.end}});
    h.tensors.emplace(name, std::move(t));
  }
  // As the reference implementation: sorted by offset, each tensor starts where the previous one ends
  // and the last ends at the end of the file, so every byte belongs to exactly one tensor (no overlaps,
  // no holes where other data could hide, no trailing bytes).
  std::sort(ranges.begin(), ranges.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
  uint64_t expected = 0;
  for (const auto& [name, r] : ranges) {
    if (r.first < expected)
      fail("{}: tensor '{}' at data_offsets [{}, {}] overlaps the tensor before it (which ends at {})", path, name,
           r.first, r.second, expected);
    if (r.first > expected)
      fail("{}: {} unused bytes before tensor '{}' (data_offsets [{}, {}]); tensors must cover the data section "
           "contiguously",
           path, r.first - expected, name, r.first, r.second);
    expected = r.second;
  }
  if (expected != data_size)
    fail("{}: {} trailing bytes after the last tensor (tensors cover {} of the {}-byte data section)", path,
         data_size - expected, expected, data_size);
  return h;
}

std::map<std::string, std::string> parse_safetensors_index(const std::string& text, const std::string& path) {
  const nlohmann::json j = parse_json(text, path);
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    fail("{}: expected an object with a 'weight_map' object", path);
  std::map<std::string, std::string> out;
  for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
    if (!it->is_string()) fail("{}: weight_map['{}'] must be a file name, got {}", path, it.key(), it->type_name());
    const std::string f = it->get<std::string>();
    if (f.empty() || f.find('/') != std::string::npos || f.find("..") != std::string::npos ||
        f.find('\0') != std::string::npos)
      fail("{}: weight_map['{}'] = '{}' must be a file name inside the directory", path, it.key(), f);
    out.emplace(it.key(), f);
  }
  if (out.empty()) fail("{}: the weight_map is empty (no tensors)", path);
  return out;
}

}  // namespace drope::io
