#include "drope/io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <nlohmann/json.hpp>

#include "drope/core/error.h"
#include "drope/core/files.h"

namespace drope::io {

at::ScalarType safetensors_dtype(const std::string& s, const std::string& where) {
  if (s == "F64") return at::kDouble;
  if (s == "F32") return at::kFloat;
  if (s == "F16") return at::kHalf;
  if (s == "BF16") return at::kBFloat16;
  if (s == "I64") return at::kLong;
  if (s == "I32") return at::kInt;
  if (s == "I16") return at::kShort;
  if (s == "I8") return at::kChar;
  if (s == "U8") return at::kByte;
  if (s == "BOOL") return at::kBool;
  fail("{}: unsupported dtype '{}' (expected F64, F32, F16, BF16, I64, I32, I16, I8, U8 or BOOL)", where, s);
}

std::string safetensors_dtype_name(at::ScalarType t) {
  switch (t) {
    case at::kDouble: return "F64";
    case at::kFloat: return "F32";
    case at::kHalf: return "F16";
    case at::kBFloat16: return "BF16";
    case at::kLong: return "I64";
    case at::kInt: return "I32";
    case at::kShort: return "I16";
    case at::kChar: return "I8";
    case at::kByte: return "U8";
    case at::kBool: return "BOOL";
    default: fail("safetensors: cannot store dtype {}", c10::toString(t));
  }
}

SafetensorsFile::SafetensorsFile(const std::string& path)
    : path_(path),
      file_(path),  // regular files only: a FIFO is refused, not waited on
      header_(parse_safetensors_header(reinterpret_cast<const char*>(file_.data()), file_.size(), path)) {}

at::Tensor SafetensorsFile::get(const std::string& name) const {
  auto it = header_.tensors.find(name);
  if (it == header_.tensors.end()) fail("{}: missing tensor '{}'", path_, name);
  const auto& e = it->second;
  const auto dt = safetensors_dtype(e.dtype, path_);
  auto out = at::empty(e.shape, at::TensorOptions().dtype(dt));
  if (e.end > e.begin) std::memcpy(out.data_ptr(), file_.data() + header_.data_start + e.begin, e.end - e.begin);
  return out;
}

void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json h;
  if (!metadata.empty()) h["__metadata__"] = metadata;
  std::vector<at::Tensor> data;
  uint64_t off = 0;
  for (const auto& [name, t] : tensors) {
    if (h.contains(name)) fail("{}: duplicate tensor name '{}'", path, name);
    auto c = t.detach().to(at::kCPU).contiguous();
    const uint64_t bytes = c.numel() * c.element_size();
    h[name] = {{"dtype", safetensors_dtype_name(c.scalar_type())},
               {"shape", c.sizes().vec()},
               {"data_offsets", {off, off + bytes}}};
    off += bytes;
    data.push_back(c);
  }
  std::string header = h.dump();
  while ((8 + header.size()) % 8 != 0) header.push_back(' ');
  std::string buf;
  buf.reserve(8 + header.size() + off);
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) buf.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  buf += header;
  for (const auto& c : data) buf.append(static_cast<const char*>(c.data_ptr()), c.numel() * c.element_size());
  write_file_atomic(path, buf);
}

}  // namespace drope::io
