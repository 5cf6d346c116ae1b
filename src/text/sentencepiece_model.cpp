// SentencePiece ModelProto checks (see sentencepiece_model.h). Field numbers are those of
// sentencepiece_model.proto; only the fields the library acts on when loading and encoding are read,
// the others are skipped by wire type.
#include "drope/text/sentencepiece_model.h"

#include <cmath>
#include <cstring>
#include <unordered_set>
#include <vector>

#include "drope/core/error.h"
#include "drope/text/tokenizer.h"

namespace drope::text {

namespace {

enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kBytes = 2, kFixed32 = 5 };

// One field of a message: its number, wire type and value (varint / fixed bits, or the bytes).
struct Field {
  uint32_t number = 0;
  uint32_t wire = 0;
  uint64_t bits = 0;
  std::string_view bytes;
};

// Reads the fields of one protobuf message in order; errors name the file and the message being read.
class WireReader {
 public:
  WireReader(std::string_view data, const std::string& path, const char* message)
      : data_(data), path_(path), message_(message) {}

  // The next field, or false at the end of the message.
  bool next(Field& f) {
    if (pos_ == data_.size()) return false;
    const uint64_t key = varint();
    if (key >> 32 || (key >> 3) == 0)
      fail("{}: not a SentencePiece model ({}: invalid field key {})", path_, message_, key);
    f.number = static_cast<uint32_t>(key >> 3);
    f.wire = static_cast<uint32_t>(key & 7);
    f.bytes = {};
    f.bits = 0;
    switch (f.wire) {
      case kVarint: f.bits = varint(); break;
      case kFixed64: f.bits = fixed(8); break;
      case kFixed32: f.bits = fixed(4); break;
      case kBytes: {
        const uint64_t n = varint();
        if (n > data_.size() - pos_)
          fail("{}: not a SentencePiece model ({} field {}: length {} runs past the end of its message)", path_,
               message_, f.number, n);
        f.bytes = data_.substr(pos_, static_cast<size_t>(n));
        pos_ += static_cast<size_t>(n);
        break;
      }
      default:
        fail("{}: not a SentencePiece model ({} field {}: unsupported wire type {})", path_, message_, f.number,
             f.wire);
    }
    return true;
  }

  // Fails unless `f` has wire type `want` (a known field written with another type).
  void expect(const Field& f, uint32_t want, const char* name) const {
    if (f.wire != want)
      fail("{}: not a SentencePiece model ({}.{} has wire type {}, expected {})", path_, message_, name, f.wire, want);
  }

 private:
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ == data_.size()) fail("{}: not a SentencePiece model ({}: truncated varint)", path_, message_);
      const auto b = static_cast<uint8_t>(data_[pos_++]);
      if (shift == 63 && b > 1) fail("{}: not a SentencePiece model ({}: varint overflows 64 bits)", path_, message_);
      v |= uint64_t{b & 0x7Fu} << shift;
      if (!(b & 0x80)) return v;
    }
    fail("{}: not a SentencePiece model ({}: varint longer than 10 bytes)", path_, message_);
  }

  uint64_t fixed(size_t n) {
    if (data_.size() - pos_ < n)
      fail("{}: not a SentencePiece model ({}: truncated fixed-size field)", path_, message_);
    uint64_t v = 0;
    for (size_t i = 0; i < n; ++i) v |= uint64_t{static_cast<uint8_t>(data_[pos_ + i])} << (8 * i);
    pos_ += n;
    return v;
  }

  std::string_view data_;
  size_t pos_ = 0;
  const std::string& path_;
  const char* message_;
};

// Piece types (ModelProto.SentencePiece.Type).
constexpr uint64_t kNormal = 1, kUnknown = 2, kByte = 6, kMaxType = 6;
constexpr int64_t kMaxPieces = int64_t{1} << 24;

// "<0xXX>" with two upper-case hex digits, as the library spells byte pieces.
bool is_byte_piece(std::string_view p) {
  auto hex = [](char c) { return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F'); };
  return p.size() == 6 && p.substr(0, 3) == "<0x" && hex(p[3]) && hex(p[4]) && p[5] == '>';
}

// One double-array unit (darts-clone's layout, which libsentencepiece reads directly).
struct Unit {
  uint32_t u;
  bool has_leaf() const { return (u >> 8) & 1; }
  uint32_t value() const { return u & ((1u << 31) - 1); }
  uint32_t label() const { return u & ((1u << 31) | 0xFF); }
  uint32_t offset() const { return (u >> 10) << ((u & (1u << 9)) >> 6); }
};

// A precompiled charsmap: uint32 trie size in bytes, the trie, then the pool of NUL-terminated strings
// the trie's values point into. The library walks the trie with every byte of the input: each position
// it can reach on any byte string, and each leaf value, must lie inside the arrays.
int64_t check_charsmap(std::string_view blob, const std::string& path, const char* spec) {
  if (blob.empty()) return 0;
  if (blob.size() < 4)
    fail("{}: {}.precompiled_charsmap has {} bytes, fewer than its 4-byte header", path, spec, blob.size());
  uint32_t trie_bytes = 0;
  for (int i = 0; i < 4; ++i) trie_bytes |= uint32_t{static_cast<uint8_t>(blob[i])} << (8 * i);
  if (trie_bytes == 0 || trie_bytes % 4 != 0 || trie_bytes > blob.size() - 4)
    fail("{}: {}.precompiled_charsmap declares a trie of {} bytes; it must be a positive multiple of 4 within the "
         "{} bytes after the header",
         path, spec, trie_bytes, blob.size() - 4);
  const size_t n = trie_bytes / 4;
  std::vector<Unit> units(n);
  for (size_t i = 0; i < n; ++i) {
    uint32_t u = 0;
    for (int b = 0; b < 4; ++b) u |= uint32_t{static_cast<uint8_t>(blob[4 + 4 * i + b])} << (8 * b);
    units[i].u = u;
  }
  const std::string_view pool = blob.substr(4 + trie_bytes);
  // Positions from which the next input byte is looked up (node ^ offset): every byte value must land
  // inside the array, i.e. the whole 256-unit block around the position.
  std::vector<bool> seen(n, false);
  std::vector<size_t> todo;
  auto visit = [&](size_t base, const char* what) {
    if ((base | 0xFF) >= n)
      fail("{}: {}.precompiled_charsmap trie is corrupt ({} at unit {} is outside its {} units)", path, spec, what,
           base | 0xFF, n);
    if (!seen[base]) {
      seen[base] = true;
      todo.push_back(base);
    }
  };
  visit(units[0].offset(), "the root's children");
  while (!todo.empty()) {
    const size_t base = todo.back();
    todo.pop_back();
    for (uint32_t c = 0; c < 256; ++c) {
      const size_t node = base ^ c;
      const Unit u = units[node];
      if (u.label() != c) continue;
      const size_t next = node ^ u.offset();
      if (u.has_leaf()) {
        if (next >= n)
          fail("{}: {}.precompiled_charsmap trie is corrupt (leaf of unit {} at {} is outside its {} units)", path,
               spec, node, next, n);
        const uint32_t v = units[next].value();
        if (v >= pool.size() || pool.find('\0', v) == std::string_view::npos)
          fail(
              "{}: {}.precompiled_charsmap trie is corrupt (unit {} points at byte {} of a {}-byte string pool without a "
              "terminating NUL)",
              path, spec, next, v, pool.size());
      }
      visit(next, "a child");
    }
  }
  return static_cast<int64_t>(n);
}

struct NormalizerFields {
  std::string_view charsmap;  // the last occurrence wins, as protobuf merges repeated message fields
};

void read_normalizer(std::string_view msg, const std::string& path, const char* name, NormalizerFields& out) {
  WireReader r(msg, path, name);
  Field f;
  while (r.next(f))
    if (f.number == 2) {
      r.expect(f, kBytes, "precompiled_charsmap");
      out.charsmap = f.bytes;
    }
}

}  // namespace

SentencePieceModelSummary check_sentencepiece_model(std::string_view bytes, const std::string& path) {
  SentencePieceModelSummary s;
  if (bytes.empty()) fail("{}: empty file; expected a SentencePiece model", path);
  NormalizerFields normalizer, denormalizer;
  std::unordered_set<std::string_view> names;
  uint64_t model_type = 1;
  WireReader top(bytes, path, "ModelProto");
  Field f;
  while (top.next(f)) {
    if (f.number == 1) {  // repeated SentencePiece pieces
      top.expect(f, kBytes, "pieces");
      const int64_t id = s.num_pieces++;
      if (s.num_pieces > kMaxPieces) fail("{}: more than {} pieces", path, kMaxPieces);
      std::string_view piece;
      float score = 0.0f;
      uint64_t type = kNormal;
      WireReader r(f.bytes, path, "SentencePiece");
      Field g;
      while (r.next(g)) {
        if (g.number == 1) {
          r.expect(g, kBytes, "piece");
          piece = g.bytes;
        } else if (g.number == 2) {
          r.expect(g, kFixed32, "score");
          const auto bits = static_cast<uint32_t>(g.bits);
          std::memcpy(&score, &bits, sizeof score);
        } else if (g.number == 3) {
          r.expect(g, kVarint, "type");
          type = g.bits;
        }
      }
      if (piece.empty()) fail("{}: piece {} is empty", path, id);
      if (utf8_error_offset(piece) >= 0) fail("{}: piece {} is not valid UTF-8", path, id);
      if (!std::isfinite(score)) fail("{}: piece {} ('{}') has a non-finite score ({})", path, id, piece, score);
      if (type < 1 || type > kMaxType)
        fail("{}: piece {} ('{}') has type {}, expected 1..{}", path, id, piece, type, kMaxType);
      if (type == kUnknown) {
        if (s.unk_id >= 0)
          fail("{}: pieces {} and {} are both of type UNKNOWN; a model has exactly one", path, s.unk_id, id);
        s.unk_id = id;
      }
      if (type == kByte && !is_byte_piece(piece))
        fail("{}: piece {} ('{}') is of type BYTE but not spelled <0xXX>", path, id, piece);
      if (!names.insert(piece).second) fail("{}: piece '{}' (id {}) appears twice", path, piece, id);
    } else if (f.number == 2) {  // TrainerSpec
      top.expect(f, kBytes, "trainer_spec");
      WireReader r(f.bytes, path, "TrainerSpec");
      Field g;
      while (r.next(g))
        if (g.number == 3) {
          r.expect(g, kVarint, "model_type");
          model_type = g.bits;
        }
    } else if (f.number == 3) {
      top.expect(f, kBytes, "normalizer_spec");
      read_normalizer(f.bytes, path, "normalizer_spec", normalizer);
    } else if (f.number == 5) {
      top.expect(f, kBytes, "denormalizer_spec");
      read_normalizer(f.bytes, path, "denormalizer_spec", denormalizer);
    }
  }
  if (s.num_pieces == 0) fail("{}: SentencePiece model has no pieces", path);
  if (s.unk_id < 0) fail("{}: SentencePiece model has no piece of type UNKNOWN", path);
  if (model_type < 1 || model_type > 4)
    fail("{}: trainer_spec.model_type is {}, expected 1 (unigram), 2 (bpe), 3 (word) or 4 (char)", path, model_type);
  s.model_type = static_cast<int32_t>(model_type);
  s.trie_units = check_charsmap(normalizer.charsmap, path, "normalizer_spec");
  check_charsmap(denormalizer.charsmap, path, "denormalizer_spec");
  return s;
}

}  // namespace drope::text
