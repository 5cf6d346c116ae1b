#include "drope/core/json.h"

#include <cmath>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "drope/core/error.h"
#include "drope/core/files.h"
#include "drope/core/utf8.h"

namespace drope {

namespace {

using json = nlohmann::json;

// Builds the document like nlohmann's own DOM parser, and stops (returning false) at the first
// container nested deeper than kMaxJsonDepth or the first repeated key of an object.
class StrictBuilder {
 public:
  explicit StrictBuilder(json& root) : root_(root) {}

  bool null() { return add(json(nullptr)); }
  bool boolean(bool v) { return add(json(v)); }
  bool number_integer(json::number_integer_t v) { return add(json(v)); }
  bool number_unsigned(json::number_unsigned_t v) { return add(json(v)); }
  bool number_float(json::number_float_t v, const json::string_t&) { return add(json(v)); }
  bool string(json::string_t& v) { return add(json(std::move(v))); }
  bool binary(json::binary_t& v) { return add(json::binary(std::move(v))); }

  bool start_object(std::size_t) { return open(json::object()); }
  bool start_array(std::size_t) { return open(json::array()); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }

  bool key(json::string_t& k) {
    Frame& f = frames_.back();
    if (f.value->contains(k)) {
      error_ = fmt::format("duplicate key \"{}\" in {}", k, path(At::kObject));
      return false;
    }
    f.key = k;
    f.slot = &(*f.value)[k];
    return true;
  }

  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) {
    error_ = fmt::format("invalid JSON ({})", utf8_lossy(e.what()));  // the parser quotes raw input bytes
    return false;
  }

  const std::string& error() const { return error_; }

 private:
  struct Frame {
    json* value;          // the array or object being filled
    json* slot = nullptr; // objects: where the value of the last key goes
    std::string key;      // objects: the last key
  };

  // Stores a value at the current position and returns where it now lives.
  json* place(json&& v) {
    if (frames_.empty()) {
      root_ = std::move(v);
      return &root_;
    }
    Frame& f = frames_.back();
    if (f.value->is_array()) {
      f.value->push_back(std::move(v));
      return &f.value->back();
    }
    *f.slot = std::move(v);
    return f.slot;
  }
  bool add(json&& v) {
    place(std::move(v));
    return true;
  }
  bool open(json&& container) {
    if (static_cast<int>(frames_.size()) >= kMaxJsonDepth) {
      error_ = fmt::format("JSON nested more than {} levels deep (the nesting limit) at {}", kMaxJsonDepth,
                           path(At::kOpening));
      return false;
    }
    frames_.push_back({place(std::move(container))});
    return true;
  }
  bool close() {
    frames_.pop_back();
    return true;
  }
  // Where the parser is, as a key path: "the top level", "'model.vocab'", "'splits.train.shards[3]'".
  // kOpening: the innermost container is about to receive a new value (not yet stored);
  // kObject: the path of the innermost object itself, without its current key.
  enum class At { kOpening, kObject };
  std::string path(At at) const {
    std::string p;
    const size_t n = at == At::kObject ? frames_.size() - 1 : frames_.size();
    for (size_t i = 0; i < n; ++i) {
      const Frame& f = frames_[i];
      if (f.value->is_array()) {
        const bool pending = at == At::kOpening && i + 1 == frames_.size();
        p += fmt::format("[{}]", pending || f.value->empty() ? f.value->size() : f.value->size() - 1);
      } else if (f.slot) {
        if (!p.empty()) p += '.';
        p += f.key;
      }
    }
    return p.empty() ? "the top level" : "'" + p + "'";
  }

  json& root_;
  std::vector<Frame> frames_;
  std::string error_;
};

}  // namespace

json parse_json(std::string_view text, const std::string& source) {
  json root;
  StrictBuilder b(root);
  if (!json::sax_parse(text, &b) || !b.error().empty()) {
    fail("{}: {}", source, b.error().empty() ? std::string("invalid JSON") : b.error());
  }
  return root;
}

json read_json_file(const std::string& path, uint64_t max_bytes) {
  return parse_json(read_file(path, max_bytes), path);
}

int64_t json_int64(const json& v, const std::string& where) {
  if (v.is_number_unsigned()) {
    const auto u = v.get<uint64_t>();
    if (u > uint64_t(INT64_MAX)) fail("{}: integer {} is out of range (more than 2^63 - 1)", where, u);
    return static_cast<int64_t>(u);
  }
  if (v.is_number_integer()) return v.get<int64_t>();
  // Integers beyond 64 bits reach us as floats ("1e30" or 30 digits): say so rather than "not an integer".
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && (d >= 0x1p63 || d < -0x1p63))
      fail("{}: integer {} is out of range (beyond 64 bits)", where, v.dump());
    fail("{}: expected an integer, got {}", where, v.dump());
  }
  fail("{}: expected an integer, got {}", where, v.type_name());
}

}  // namespace drope
