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

namespace {
constexpr uint64_t kMaxHeader = 100ull << 20;  // as the reference implementation: 100 MB
constexpr int64_t kMaxDims = 16;

size_t itemsize(at::ScalarType t) { return c10::elementSize(t); }
}  // namespace

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

SafetensorsHeader parse_safetensors_header(const char* data, uint64_t size, const std::string& path) {
  if (size < 8) fail("{}: not a safetensors file: {} bytes, shorter than the 8-byte header size", path, size);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(data[i]);
  if (n > kMaxHeader) fail("{}: safetensors header claims {} bytes (limit {})", path, n, kMaxHeader);
  if (n > size - 8) fail("{}: truncated safetensors file: header claims {} bytes but only {} follow", path, n, size - 8);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(data + 8, data + 8 + n);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: safetensors header is not valid JSON: {}", path, e.what());
  }
  if (!j.is_object()) fail("{}: safetensors header must be a JSON object", path);
  SafetensorsHeader h;
  h.data_start = 8 + n;
  const uint64_t data_size = size - h.data_start;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& name = it.key();
    if (name == "__metadata__") {
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
    const auto st = safetensors_dtype(t.dtype, where);
    if (!e["shape"].is_array() || (int64_t)e["shape"].size() > kMaxDims)
      fail("{}: shape must be a list of at most {} non-negative integers", where, kMaxDims);
    unsigned __int128 numel = 1;
    for (const auto& d : e["shape"]) {
      if (!d.is_number_unsigned()) fail("{}: shape must be a list of non-negative integers", where);
      uint64_t v = d.get<uint64_t>();
      if (v > (1ull << 40)) fail("{}: dimension {} is implausibly large", where, v);
      t.shape.push_back(static_cast<int64_t>(v));
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
    const unsigned __int128 bytes = numel * itemsize(st);
    if (bytes != t.end - t.begin)
      fail("{}: shape and dtype need {} bytes but data_offsets span {}", where, (uint64_t)bytes, t.end - t.begin);
    ranges.emplace_back(t.begin, t.end);
    h.tensors.emplace(name, std::move(t));
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i)
    if (ranges[i].first < ranges[i - 1].second) fail("{}: tensors overlap in the data section", path);
  return h;
}

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) fail("{}: cannot open ({})", path, std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    fail("{}: not a regular file", path);
  }
  size_ = static_cast<uint64_t>(st.st_size);
  if (size_ > 0) {
    void* m = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
      ::close(fd);
      fail("{}: mmap failed ({})", path, std::strerror(errno));
    }
    map_ = static_cast<const char*>(m);
  }
  ::close(fd);
  try {
    header_ = parse_safetensors_header(map_ ? map_ : "", size_, path);
  } catch (...) {
    if (map_) ::munmap(const_cast<char*>(map_), size_);
    map_ = nullptr;
    throw;
  }
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) ::munmap(const_cast<char*>(map_), size_);
}

at::Tensor SafetensorsFile::get(const std::string& name) const {
  auto it = header_.tensors.find(name);
  if (it == header_.tensors.end()) fail("{}: missing tensor '{}'", path_, name);
  const auto& e = it->second;
  const auto dt = safetensors_dtype(e.dtype, path_);
  auto out = at::empty(e.shape, at::TensorOptions().dtype(dt));
  if (e.end > e.begin) std::memcpy(out.data_ptr(), map_ + header_.data_start + e.begin, e.end - e.begin);
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
