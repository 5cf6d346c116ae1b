// GGUF reading: header, metadata and tensor infos validated against the file, and dequantisation of the
// block formats (docs/gguf.md gives each block layout).
#include "drope/formats/gguf.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <limits>

#include "drope/core/error.h"
#include "drope/core/files.h"
#include "drope/core/utf8.h"

namespace drope::gguf {

using nlohmann::json;

namespace {

// Every type drope reads: its ggml number and layout, in the order messages list them.
struct KnownType {
  TensorType type;
  TypeTraits traits;
};
constexpr KnownType kKnownTypes[] = {
    {TensorType::kF32, {"F32", 1, 4}},       {TensorType::kF16, {"F16", 1, 2}},
    {TensorType::kBF16, {"BF16", 1, 2}},     {TensorType::kQ4_0, {"Q4_0", 32, 18}},
    {TensorType::kQ4_1, {"Q4_1", 32, 20}},   {TensorType::kQ5_0, {"Q5_0", 32, 22}},
    {TensorType::kQ5_1, {"Q5_1", 32, 24}},   {TensorType::kQ8_0, {"Q8_0", 32, 34}},
    {TensorType::kQ2_K, {"Q2_K", 256, 84}},  {TensorType::kQ3_K, {"Q3_K", 256, 110}},
    {TensorType::kQ4_K, {"Q4_K", 256, 144}}, {TensorType::kQ5_K, {"Q5_K", 256, 176}},
    {TensorType::kQ6_K, {"Q6_K", 256, 210}},
};

// Bytes a value of scalar type `t` takes, 0 for string/array.
uint64_t scalar_bytes(ValueType t) {
  switch (t) {
    case ValueType::kUint8:
    case ValueType::kInt8:
    case ValueType::kBool: return 1;
    case ValueType::kUint16:
    case ValueType::kInt16: return 2;
    case ValueType::kUint32:
    case ValueType::kInt32:
    case ValueType::kFloat32: return 4;
    case ValueType::kUint64:
    case ValueType::kInt64:
    case ValueType::kFloat64: return 8;
    default: return 0;
  }
}

bool known_value_type(uint32_t t) { return t <= static_cast<uint32_t>(ValueType::kFloat64); }

// A bounds-checked little-endian cursor over the file.
class Cursor {
 public:
  Cursor(const uint8_t* d, uint64_t n, const std::string& path) : d_(d), n_(n), path_(path) {}
  uint64_t pos() const { return pos_; }
  uint64_t left() const { return n_ - pos_; }
  [[noreturn]] void truncated(const std::string& what) const {
    fail("{}: truncated GGUF file: {} at byte {} needs more than the {} byte(s) left", path_, what, pos_, left());
  }
  template <typename T>
  T get(const std::string& what) {
    if (left() < sizeof(T)) truncated(what);
    T v;
    std::memcpy(&v, d_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  // A GGUF string: UTF-8 by the specification, checked here so that no invalid byte reaches a JSON writer.
  std::string str(const std::string& what, uint64_t max_bytes) {
    const auto n = get<uint64_t>(what + " length");
    if (n > max_bytes) fail("{}: {} is {} bytes long (limit {})", path_, what, n, max_bytes);
    if (n > left()) truncated(what);
    std::string s(reinterpret_cast<const char*>(d_ + pos_), n);
    if (const int64_t bad = utf8_error_offset(s); bad >= 0)
      fail("{}: {} is not valid UTF-8 (byte {} of the string, at file offset {}); GGUF strings are UTF-8", path_, what,
           bad, pos_ + static_cast<uint64_t>(bad));
    pos_ += n;
    return s;
  }

 private:
  const uint8_t* d_;
  uint64_t n_;
  uint64_t pos_ = 0;
  const std::string& path_;
};

json read_scalar(Cursor& c, ValueType t, const std::string& what) {
  switch (t) {
    case ValueType::kUint8: return c.get<uint8_t>(what);
    case ValueType::kInt8: return c.get<int8_t>(what);
    case ValueType::kUint16: return c.get<uint16_t>(what);
    case ValueType::kInt16: return c.get<int16_t>(what);
    case ValueType::kUint32: return c.get<uint32_t>(what);
    case ValueType::kInt32: return c.get<int32_t>(what);
    case ValueType::kUint64: return c.get<uint64_t>(what);
    case ValueType::kInt64: return c.get<int64_t>(what);
    case ValueType::kFloat32: return static_cast<double>(c.get<float>(what));
    case ValueType::kFloat64: return c.get<double>(what);
    case ValueType::kBool: return c.get<uint8_t>(what) != 0;
    case ValueType::kString: return c.str(what, kMaxStringBytes);
    default: return nullptr;
  }
}

// `elements_left` is what the file's arrays may still hold in all (kMaxMetaArrayElementsTotal at the start).
json read_value(Cursor& c, ValueType t, const std::string& what, const std::string& path, int depth,
                ValueType* elem_out, uint64_t& elements_left) {
  if (t != ValueType::kArray) return read_scalar(c, t, what);
  if (depth >= kMaxArrayDepth) fail("{}: {}: arrays nested deeper than {}", path, what, kMaxArrayDepth);
  const auto et = c.get<uint32_t>(what + " element type");
  if (!known_value_type(et)) fail("{}: {}: unknown array element type {}", path, what, et);
  const auto elem = static_cast<ValueType>(et);
  if (elem_out) *elem_out = elem;
  const auto n = c.get<uint64_t>(what + " element count");
  // Every element takes at least its scalar size (a string or array at least its 8-byte length / header).
  const uint64_t min_bytes = elem == ValueType::kString ? 8 : elem == ValueType::kArray ? 12 : scalar_bytes(elem);
  if (n > c.left() / min_bytes)
    fail("{}: {}: array of {} {} element(s) cannot fit in the {} byte(s) left in the file", path, what, n,
         value_type_name(elem), c.left());
  // Bounded before anything is allocated: each element costs a JSON value (16 bytes and more) in memory.
  if (n > kMaxMetaArrayElements)
    fail("{}: {}: array of {} element(s) is longer than the {} this reader accepts", path, what, n,
         kMaxMetaArrayElements);
  if (n > elements_left)
    fail("{}: {}: array of {} element(s) takes the file's metadata arrays beyond the {} elements this reader accepts "
         "in all",
         path, what, n, kMaxMetaArrayElementsTotal);
  elements_left -= n;
  json arr = json::array();
  arr.get_ref<json::array_t&>().reserve(n);
  const bool scalars = elem != ValueType::kString && elem != ValueType::kArray;  // fit, as checked above
  for (uint64_t i = 0; i < n; ++i)
    arr.push_back(
        read_value(c, elem, scalars ? what : fmt::format("{}[{}]", what, i), path, depth + 1, nullptr, elements_left));
  return arr;
}

uint16_t load16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
uint32_t load32(const uint8_t* p) {
  return uint32_t{p[0]} | (uint32_t{p[1]} << 8) | (uint32_t{p[2]} << 16) | (uint32_t{p[3]} << 24);
}
float f16(const uint8_t* p) { return half_to_float(load16(p)); }

// 32-element blocks: d (and m) in half precision, then 4/5/8-bit quants. Low nibbles are elements 0..15,
// high nibbles 16..31; Q5's fifth bits are bit j of a 32-bit word.
void deq_q4_0(const uint8_t* b, float* y) {
  const float d = f16(b);
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>((b[2 + j] & 0x0F) - 8) * d;
    y[j + 16] = static_cast<float>((b[2 + j] >> 4) - 8) * d;
  }
}
void deq_q4_1(const uint8_t* b, float* y) {
  const float d = f16(b), m = f16(b + 2);
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>(b[4 + j] & 0x0F) * d + m;
    y[j + 16] = static_cast<float>(b[4 + j] >> 4) * d + m;
  }
}
void deq_q5(const uint8_t* qh_p, const uint8_t* qs, float d, float m, int offset, float* y) {
  const uint32_t qh = load32(qh_p);
  for (int j = 0; j < 16; ++j) {
    const int lo = (qs[j] & 0x0F) | static_cast<int>(((qh >> j) & 1u) << 4);
    const int hi = (qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
    y[j] = static_cast<float>(lo - offset) * d + m;
    y[j + 16] = static_cast<float>(hi - offset) * d + m;
  }
}
void deq_q8_0(const uint8_t* b, float* y) {
  const float d = f16(b);
  for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(static_cast<int8_t>(b[2 + j])) * d;
}

// 256-element super-blocks (K-quants).
void deq_q2_k(const uint8_t* b, float* y) {
  const uint8_t* scales = b;  // 16 bytes: low nibble scale, high nibble min
  const uint8_t* q = b + 16;  // 64 bytes of 2-bit quants
  const float d = f16(b + 80), dmin = f16(b + 82);
  int is = 0;
  for (int n = 0; n < 256; n += 128, q += 32) {
    for (int shift = 0; shift < 8; shift += 2) {
      for (int half = 0; half < 2; ++half) {
        const uint8_t sc = scales[is++];
        const float dl = d * static_cast<float>(sc & 0x0F), ml = dmin * static_cast<float>(sc >> 4);
        for (int l = 0; l < 16; ++l) *y++ = dl * static_cast<float>((q[l + 16 * half] >> shift) & 3) - ml;
      }
    }
  }
}

void deq_q3_k(const uint8_t* b, float* y) {
  const uint8_t* hm = b;       // 32 bytes: the high bit of each quant, one bit plane per 32 elements
  const uint8_t* q = b + 32;   // 64 bytes of low 2 bits
  const uint8_t* sp = b + 96;  // 12 bytes: sixteen 6-bit scales
  const float d = f16(b + 108);
  int8_t scales[16];
  for (int i = 0; i < 16; ++i) {
    const int low = i < 8 ? (sp[i] & 0x0F) : (sp[i - 8] >> 4);
    const int high = (sp[8 + (i % 4)] >> (2 * (i / 4))) & 3;
    scales[i] = static_cast<int8_t>((low | (high << 4)) - 32);
  }
  int is = 0;
  uint8_t m = 1;
  for (int n = 0; n < 256; n += 128, q += 32) {
    for (int shift = 0; shift < 8; shift += 2, m = static_cast<uint8_t>(m << 1)) {
      for (int half = 0; half < 2; ++half) {
        const float dl = d * static_cast<float>(scales[is++]);
        for (int l = 16 * half; l < 16 * half + 16; ++l) {
          const int v = ((q[l] >> shift) & 3) - ((hm[l] & m) ? 0 : 4);
          *y++ = dl * static_cast<float>(v);
        }
      }
    }
  }
}

// The j-th 6-bit scale and min of Q4_K / Q5_K's 12 packed bytes.
void scale_min_k4(int j, const uint8_t* q, uint8_t* sc, uint8_t* mn) {
  if (j < 4) {
    *sc = q[j] & 63;
    *mn = q[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4));
    *mn = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// Q4_K (qh == nullptr) and Q5_K.
void deq_q45_k(const uint8_t* b, bool five, float* y) {
  const float d = f16(b), dmin = f16(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qh = five ? b + 16 : nullptr;
  const uint8_t* ql = five ? b + 48 : b + 16;
  int is = 0;
  for (int j = 0; j < 256; j += 64, ql += 32, is += 2) {
    uint8_t sc, mn;
    scale_min_k4(is, scales, &sc, &mn);
    const float d1 = d * sc, m1 = dmin * mn;
    scale_min_k4(is + 1, scales, &sc, &mn);
    const float d2 = d * sc, m2 = dmin * mn;
    const int bit = j / 32;  // the high-bit plane of the low nibbles; bit + 1 for the high nibbles
    for (int l = 0; l < 32; ++l) {
      const int h = qh ? ((qh[l] >> bit) & 1) << 4 : 0;
      *y++ = d1 * static_cast<float>((ql[l] & 0x0F) + h) - m1;
    }
    for (int l = 0; l < 32; ++l) {
      const int h = qh ? ((qh[l] >> (bit + 1)) & 1) << 4 : 0;
      *y++ = d2 * static_cast<float>((ql[l] >> 4) + h) - m2;
    }
  }
}

void deq_q6_k(const uint8_t* b, float* y) {
  const uint8_t* ql = b;         // 128 bytes: low 4 bits
  const uint8_t* qh = b + 128;   // 64 bytes: high 2 bits
  const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);  // 16 signed scales
  const float d = f16(b + 208);
  for (int n = 0; n < 256; n += 128, ql += 64, qh += 32, sc += 8, y += 128) {
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = ((ql[l] & 0x0F) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      y[l] = d * static_cast<float>(sc[is]) * static_cast<float>(q1);
      y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
      y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
      y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
    }
  }
}

}  // namespace

const char* value_type_name(ValueType t) {
  switch (t) {
    case ValueType::kUint8: return "uint8";
    case ValueType::kInt8: return "int8";
    case ValueType::kUint16: return "uint16";
    case ValueType::kInt16: return "int16";
    case ValueType::kUint32: return "uint32";
    case ValueType::kInt32: return "int32";
    case ValueType::kFloat32: return "float32";
    case ValueType::kBool: return "bool";
    case ValueType::kString: return "string";
    case ValueType::kArray: return "array";
    case ValueType::kUint64: return "uint64";
    case ValueType::kInt64: return "int64";
    case ValueType::kFloat64: return "float64";
  }
  return "unknown";
}

const TypeTraits* type_traits(uint32_t t) {
  for (const auto& k : kKnownTypes)
    if (static_cast<uint32_t>(k.type) == t) return &k.traits;
  return nullptr;
}

std::string type_label(uint32_t t) {
  const TypeTraits* tr = type_traits(t);
  return tr ? fmt::format("{} ({})", tr->name, t) : fmt::format("type {}", t);
}

std::string supported_type_names() {
  std::string names;
  for (const auto& k : kKnownTypes) names += (names.empty() ? "" : ", ") + std::string(k.traits.name);
  return names;
}

float half_to_float(uint16_t h) {
  const uint32_t sign = (h >> 15) & 1u, exp = (h >> 10) & 0x1Fu, man = h & 0x3FFu;
  float v;
  if (exp == 0) {
    v = std::ldexp(static_cast<float>(man), -24);
  } else if (exp == 31) {
    v = man ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  } else {
    v = std::ldexp(static_cast<float>(man | 0x400u), static_cast<int>(exp) - 25);
  }
  return sign ? -v : v;
}

float bf16_to_float(uint16_t b) {
  const uint32_t bits = uint32_t{b} << 16;
  float v;
  std::memcpy(&v, &bits, 4);
  return v;
}

int64_t TensorInfo::elements() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

std::vector<int64_t> TensorInfo::shape() const { return {dims.rbegin(), dims.rend()}; }

void dequantize(uint32_t t, const uint8_t* src, int64_t n, float* dst) {
  const TypeTraits* tr = type_traits(t);
  if (!tr) fail("GGUF: cannot dequantise {}", type_label(t));
  if (n % tr->block_elems != 0) fail("GGUF: {} elements are not whole {} blocks", n, tr->name);
  const int64_t blocks = n / tr->block_elems;
  const auto ty = static_cast<TensorType>(t);
  for (int64_t i = 0; i < blocks; ++i) {
    const uint8_t* b = src + i * tr->block_bytes;
    float* y = dst + i * tr->block_elems;
    switch (ty) {
      case TensorType::kF32: std::memcpy(y, b, 4); break;
      case TensorType::kF16: *y = half_to_float(load16(b)); break;
      case TensorType::kBF16: *y = bf16_to_float(load16(b)); break;
      case TensorType::kQ4_0: deq_q4_0(b, y); break;
      case TensorType::kQ4_1: deq_q4_1(b, y); break;
      case TensorType::kQ5_0: deq_q5(b + 2, b + 6, f16(b), 0.0f, 16, y); break;
      case TensorType::kQ5_1: deq_q5(b + 4, b + 8, f16(b), f16(b + 2), 0, y); break;
      case TensorType::kQ8_0: deq_q8_0(b, y); break;
      case TensorType::kQ2_K: deq_q2_k(b, y); break;
      case TensorType::kQ3_K: deq_q3_k(b, y); break;
      case TensorType::kQ4_K: deq_q45_k(b, false, y); break;
      case TensorType::kQ5_K: deq_q45_k(b, true, y); break;
      case TensorType::kQ6_K: deq_q6_k(b, y); break;
    }
  }
}

Header parse_header(const uint8_t* data, uint64_t size, const std::string& path) {
  Cursor c(data, size, path);
  if (size < 4 || std::memcmp(data, "GGUF", 4) != 0) fail("{}: not a GGUF file (no 'GGUF' magic at byte 0)", path);
  c.get<uint32_t>("magic");
  Header h;
  h.version = c.get<uint32_t>("version");
  if (h.version == 0x02000000u || h.version == 0x03000000u)
    fail("{}: big-endian GGUF files are not supported; convert it to little-endian", path);
  if (h.version != 2 && h.version != 3) fail("{}: GGUF version {} is not supported (expected 2 or 3)", path, h.version);
  const auto n_tensors = c.get<uint64_t>("tensor count");
  const auto n_kv = c.get<uint64_t>("metadata count");
  // Each tensor info takes at least 8 (name length) + 4 (dims) + 8 (one dim) + 4 (type) + 8 (offset) bytes,
  // each key/value at least 8 (key length) + 1 (key) + 4 (type) + 1 (value).
  if (n_tensors > kMaxTensors || n_tensors > c.left() / 32)
    fail("{}: tensor count {} cannot fit in a file of {} bytes (limit {})", path, n_tensors, size, kMaxTensors);
  if (n_kv > kMaxMetaEntries || n_kv > c.left() / 14)
    fail("{}: metadata count {} cannot fit in a file of {} bytes (limit {})", path, n_kv, size, kMaxMetaEntries);

  uint64_t array_elements_left = kMaxMetaArrayElementsTotal;
  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key = c.str(fmt::format("metadata key #{}", i), kMaxKeyBytes);
    if (key.empty()) fail("{}: metadata key #{} is empty", path, i);
    if (h.meta.count(key)) fail("{}: metadata key '{}' appears twice", path, key);
    const auto t = c.get<uint32_t>("type of metadata '" + key + "'");
    if (!known_value_type(t)) fail("{}: metadata '{}' has unknown value type {}", path, key, t);
    MetaValue v;
    v.type = static_cast<ValueType>(t);
    v.value = read_value(c, v.type, "metadata '" + key + "'", path, 0, &v.elem_type, array_elements_left);
    h.meta.emplace(std::move(key), std::move(v));
  }
  if (auto it = h.meta.find("general.alignment"); it != h.meta.end()) {
    const json& a = it->second.value;
    if (it->second.type != ValueType::kUint32 || a.get<uint64_t>() == 0 || a.get<uint64_t>() > kMaxAlignment ||
        (a.get<uint64_t>() & (a.get<uint64_t>() - 1)) != 0)
      fail("{}: general.alignment must be a uint32 power of two up to {}, got {} {}", path, kMaxAlignment,
           value_type_name(it->second.type), a.dump());
    h.alignment = a.get<uint64_t>();
  }

  std::map<std::string, size_t> seen;
  for (uint64_t i = 0; i < n_tensors; ++i) {
    TensorInfo t;
    t.name = c.str(fmt::format("name of tensor #{}", i), kMaxKeyBytes);
    if (t.name.empty()) fail("{}: tensor #{} has an empty name", path, i);
    if (seen.count(t.name)) fail("{}: tensor '{}' appears twice", path, t.name);
    const auto nd = c.get<uint32_t>("dimension count of tensor '" + t.name + "'");
    if (nd < 1 || nd > kMaxDims)
      fail("{}: tensor '{}' has {} dimensions (expected 1 to {})", path, t.name, nd, kMaxDims);
    uint64_t elems = 1;
    for (uint32_t k = 0; k < nd; ++k) {
      const auto d = c.get<uint64_t>("dimensions of tensor '" + t.name + "'");
      if (d < 1 || d > (uint64_t{1} << 40))
        fail("{}: tensor '{}' dimension {} is {} (expected 1 to 2^40)", path, t.name, k, d);
      if (elems > (uint64_t{1} << 50) / d) fail("{}: tensor '{}' has more than 2^50 elements", path, t.name);
      elems *= d;
      t.dims.push_back(static_cast<int64_t>(d));
    }
    t.type = c.get<uint32_t>("type of tensor '" + t.name + "'");
    t.offset = c.get<uint64_t>("offset of tensor '" + t.name + "'");
    const TypeTraits* tr = type_traits(t.type);
    if (!tr)
      fail("{}: tensor '{}' has {}, which drope cannot read (supported: {})", path, t.name, type_label(t.type),
           supported_type_names());
    if (t.dims[0] % tr->block_elems != 0)
      fail("{}: tensor '{}': its rows of {} elements are not whole {} blocks of {}", path, t.name, t.dims[0], tr->name,
           tr->block_elems);
    t.bytes = elems / static_cast<uint64_t>(tr->block_elems) * static_cast<uint64_t>(tr->block_bytes);
    if (t.offset % h.alignment != 0)
      fail("{}: tensor '{}' starts at data offset {}, not a multiple of the alignment {}", path, t.name, t.offset,
           h.alignment);
    seen.emplace(t.name, i);
    h.tensors.push_back(std::move(t));
  }
  // The data section starts at the next multiple of the alignment after the tensor infos.
  h.data_start = (c.pos() + h.alignment - 1) / h.alignment * h.alignment;
  const uint64_t data_size = size >= h.data_start ? size - h.data_start : 0;
  std::vector<const TensorInfo*> by_offset;
  for (const auto& t : h.tensors) {
    if (t.offset > data_size || t.bytes > data_size - t.offset)
      fail("{}: tensor '{}' ({} bytes at data offset {}) runs past the end of the file ({} data bytes)", path, t.name,
           t.bytes, t.offset, data_size);
    by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const TensorInfo* a, const TensorInfo* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i)
    if (by_offset[i - 1]->offset + by_offset[i - 1]->bytes > by_offset[i]->offset)
      fail("{}: tensors '{}' and '{}' overlap in the data section", path, by_offset[i - 1]->name, by_offset[i]->name);
  return h;
}

File::File(const std::string& path)
    : path_(path),
      file_(std::make_unique<MappedFile>(path)),
      header_(parse_header(file_->data(), file_->size(), path)) {
  for (size_t i = 0; i < header_.tensors.size(); ++i) by_name_.emplace(header_.tensors[i].name, i);
}

const MetaValue* File::find(const std::string& key) const {
  auto it = header_.meta.find(key);
  return it == header_.meta.end() ? nullptr : &it->second;
}

namespace {
const MetaValue& need(const File& f, const std::string& key) {
  const MetaValue* v = f.find(key);
  if (!v) fail("{}: metadata '{}' is missing", f.path(), key);
  return *v;
}
bool is_int(ValueType t) {
  return t != ValueType::kFloat32 && t != ValueType::kFloat64 && t != ValueType::kBool && t != ValueType::kString &&
         t != ValueType::kArray;
}
}  // namespace

std::string File::get_string(const std::string& key) const {
  const MetaValue& v = need(*this, key);
  if (v.type != ValueType::kString)
    fail("{}: metadata '{}' must be a string, got {}", path_, key, value_type_name(v.type));
  return v.value.get<std::string>();
}
int64_t File::get_int(const std::string& key) const {
  const MetaValue& v = need(*this, key);
  if (!is_int(v.type)) fail("{}: metadata '{}' must be an integer, got {}", path_, key, value_type_name(v.type));
  if (v.value.is_number_unsigned() && v.value.get<uint64_t>() > uint64_t{std::numeric_limits<int64_t>::max()})
    fail("{}: metadata '{}' = {} is out of range", path_, key, v.value.dump());
  return v.value.get<int64_t>();
}
double File::get_float(const std::string& key) const {
  const MetaValue& v = need(*this, key);
  if (v.type != ValueType::kFloat32 && v.type != ValueType::kFloat64 && !is_int(v.type))
    fail("{}: metadata '{}' must be a number, got {}", path_, key, value_type_name(v.type));
  const double d = v.value.get<double>();
  if (!std::isfinite(d)) fail("{}: metadata '{}' must be finite, got {}", path_, key, d);
  return d;
}
bool File::get_bool(const std::string& key) const {
  const MetaValue& v = need(*this, key);
  if (v.type != ValueType::kBool) fail("{}: metadata '{}' must be a bool, got {}", path_, key, value_type_name(v.type));
  return v.value.get<bool>();
}
const json& File::get_array(const std::string& key, ValueType elem) const {
  const MetaValue& v = need(*this, key);
  const bool elem_ok = elem == v.elem_type || (is_int(elem) && is_int(v.elem_type)) ||
                       (elem == ValueType::kFloat32 && (v.elem_type == ValueType::kFloat64));
  if (v.type != ValueType::kArray || !elem_ok)
    fail("{}: metadata '{}' must be an array of {}, got {}{}", path_, key, value_type_name(elem),
         value_type_name(v.type),
         v.type == ValueType::kArray ? std::string(" of ") + value_type_name(v.elem_type) : "");
  return v.value;
}
std::string File::get_string(const std::string& key, const std::string& def) const {
  return has(key) ? get_string(key) : def;
}
int64_t File::get_int(const std::string& key, int64_t def) const { return has(key) ? get_int(key) : def; }
double File::get_float(const std::string& key, double def) const { return has(key) ? get_float(key) : def; }
bool File::get_bool(const std::string& key, bool def) const { return has(key) ? get_bool(key) : def; }

const TensorInfo* File::tensor(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &header_.tensors[it->second];
}

void File::read_float(const TensorInfo& t, float* dst) const {
  dequantize(t.type, file_->data() + header_.data_start + t.offset, t.elements(), dst);
}

bool is_gguf_path(const std::string& path) {
  if (path.size() < 5) return false;
  std::string ext = path.substr(path.size() - 5);
  for (char& ch : ext) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return ext == ".gguf";
}

}  // namespace drope::gguf
