#include "drope/core/yaml.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <map>
#include <set>
#include <sstream>
#include <type_traits>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/eventhandler.h>

#include "drope/core/error.h"
#include "drope/core/files.h"
#include "drope/core/numbers.h"
#include "drope/core/utf8.h"

namespace drope {

namespace {

// Deepest nesting of mappings/lists accepted in a YAML file, as for JSON (drope/core/json.h).
constexpr int kMaxYamlDepth = 128;
// Nodes visited at most: aliases let a small file name the same list many times over.
constexpr int64_t kMaxYamlNodes = int64_t{1} << 20;
// Nodes written out in a text at most. yaml-cpp spends about 800 bytes on each node it builds, so the 2 million
// of a 4 MB `[1,1,1,...]` took 1.7 GB; configs hold a few hundred.
constexpr int64_t kMaxYamlTextNodes = int64_t{1} << 16;
// Size of a YAML file at most: configs are a few kB, and yaml-cpp reads a 60 MB scalar in 40 s and 0.9 GB.
constexpr uint64_t kMaxYamlBytes = uint64_t{1} << 20;

// Counts the nodes of a text from yaml-cpp's parser events, before any node is built.
class NodeCounter final : public YAML::EventHandler {
 public:
  struct TooMany {
    YAML::Mark mark;
  };
  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& m, YAML::anchor_t) override { count(m); }
  void OnAlias(const YAML::Mark& m, YAML::anchor_t) override { count(m); }
  void OnScalar(const YAML::Mark& m, const std::string&, YAML::anchor_t, const std::string&) override { count(m); }
  void OnSequenceStart(const YAML::Mark& m, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {
    count(m);
  }
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark& m, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {
    count(m);
  }
  void OnMapEnd() override {}

 private:
  void count(const YAML::Mark& m) {
    if (++nodes_ > kMaxYamlTextNodes) throw TooMany{m};
  }
  int64_t nodes_ = 0;
};

// 1-based line and column of byte `offset` in `text`.
std::pair<int64_t, int64_t> line_col(const std::string& text, size_t offset) {
  int64_t line = 1;
  size_t start = 0;
  for (size_t i = 0; i < offset && i < text.size(); ++i)
    if (text[i] == '\n') ++line, start = i + 1;
  return {line, static_cast<int64_t>(offset - start) + 1};
}

// yaml-cpp keeps a node's tag and otherwise ignores it: `steps: !!str 4` would be read as the integer 4 and
// `!!python/object:...` as the plain value under it. Only untagged nodes are accepted ("?" plain, "!" quoted).
void check_tag(const YAML::Node& node, const std::string& source) {
  const std::string& tag = node.Tag();
  if (tag.empty() || tag == "?" || tag == "!") return;
  const auto m = node.Mark();
  fail("{}:{}:{}: YAML tag '{}' is not supported; write the value without a tag", source, m.line + 1, m.column + 1,
       tag);
}

// Walks the document without recursion and refuses what yaml-cpp accepts silently: a key given twice in
// one mapping (yaml-cpp returns the first, other readers the last) and nesting deeper than kMaxYamlDepth.
void check_structure(const YAML::Node& root, const std::string& source) {
  std::vector<std::pair<YAML::Node, int>> todo{{root, 0}};
  int64_t visited = 0;
  while (!todo.empty()) {
    auto [node, depth] = todo.back();
    todo.pop_back();
    if (++visited > kMaxYamlNodes)
      fail("{}: more than {} YAML nodes (aliases repeating large lists?)", source, kMaxYamlNodes);
    check_tag(node, source);
    if (!node.IsMap() && !node.IsSequence()) continue;
    if (depth >= kMaxYamlDepth)
      fail("{}:{}: YAML nested more than {} levels deep (the nesting limit)", source, node.Mark().line + 1,
           kMaxYamlDepth);
    if (node.IsSequence()) {
      for (const auto& child : node) todo.emplace_back(child, depth + 1);
      continue;
    }
    std::map<std::string, int> first_line;
    for (const auto& kv : node) {
      if (kv.first.IsScalar()) {
        const auto m = kv.first.Mark();
        if (kv.first.Scalar() == "<<" && kv.first.Tag() == "?")
          fail("{}:{}:{}: YAML merge keys ('<<: *anchor') are not supported; write the keys out", source, m.line + 1,
               m.column + 1);
        const auto [it, fresh] = first_line.emplace(kv.first.Scalar(), m.line + 1);
        if (!fresh)
          fail("{}:{}:{}: duplicate key '{}' (first given on line {}); each key may appear once", source, m.line + 1,
               m.column + 1, kv.first.Scalar(), it->second);
      }
      todo.emplace_back(kv.first, depth + 1);
      todo.emplace_back(kv.second, depth + 1);
    }
  }
}

}  // namespace

YAML::Node parse_yaml(const std::string& text, const std::string& source) {
  if (const int64_t bad = utf8_error_offset(text); bad >= 0) {
    const auto [line, col] = line_col(text, static_cast<size_t>(bad));
    fail("{}:{}:{}: not valid UTF-8 (byte 0x{:02x}); YAML files must be UTF-8", source, line, col,
         static_cast<unsigned char>(text[static_cast<size_t>(bad)]));
  }
  std::vector<YAML::Node> docs;
  try {
    std::istringstream in(text);
    YAML::Parser events(in);
    NodeCounter counter;
    while (events.HandleNextDocument(counter)) {
    }
    docs = YAML::LoadAll(text);
  } catch (const NodeCounter::TooMany& e) {
    fail("{}:{}:{}: more than {} YAML nodes; a config holds a few hundred", source, e.mark.line + 1, e.mark.column + 1,
         kMaxYamlTextNodes);
  } catch (const YAML::DeepRecursion& e) {  // yaml-cpp's own recursion guard, whose message is "bad file"
    fail("{}:{}:{}: YAML nested more than {} levels deep (the nesting limit)", source, e.mark.line + 1,
         e.mark.column + 1, kMaxYamlDepth);
  } catch (const YAML::Exception& e) {
    fail("{}:{}:{}: malformed YAML: {}", source, e.mark.line + 1, e.mark.column + 1, e.msg);
  }
  if (docs.size() > 1) {
    const auto m = docs[1].Mark();
    fail("{}:{}: a second YAML document starts here; expected exactly one document per file", source,
         m.line >= 0 ? m.line + 1 : 1);
  }
  if (docs.empty()) return YAML::Node();
  check_structure(docs[0], source);
  return docs[0];
}

YAML::Node load_yaml_file(const std::string& path) { return parse_yaml(read_file(path, kMaxYamlBytes), path); }

YamlMap::YamlMap(YAML::Node node, std::string source, std::string prefix)
    : node_(std::move(node)), source_(std::move(source)), prefix_(std::move(prefix)) {
  if (node_ && !node_.IsNull() && !node_.IsMap()) {
    fail("{}:{}: {}: expected a mapping of keys to values", source_, node_.Mark().line + 1,
         prefix_.empty() ? std::string("document") : fmt::format("key '{}'", prefix_));
  }
}

std::string YamlMap::path(const std::string& key) const { return prefix_.empty() ? key : prefix_ + "." + key; }

std::string YamlMap::where(const std::string& key) const {
  if (node_ && node_.IsMap()) {
    // The key's own position: a null value (`key:` and nothing) is marked on the line after it.
    for (const auto& kv : node_) {
      if (!kv.first.IsScalar() || kv.first.Scalar() != key) continue;
      const auto m = kv.first.Mark();
      if (m.line >= 0) return fmt::format("{}:{}:{}: key '{}'", source_, m.line + 1, m.column + 1, path(key));
    }
  }
  return fmt::format("{}: key '{}'", source_, path(key));
}

bool YamlMap::has(const std::string& key) const { return node_ && node_.IsMap() && node_[key]; }

namespace {

// What a node holds, for "expected X, got Y" messages.
std::string yaml_kind(const YAML::Node& n) {
  if (n.IsNull()) return "null (no value)";
  if (n.IsMap()) return "a mapping";
  if (n.IsSequence()) return "a list";
  return fmt::format("'{}'", n.Scalar());
}

// yaml-cpp and YAML 1.1 readers (PyYAML) take "010" as octal 8, YAML 1.2 readers as decimal 10: refused, so that
// no reader of the file gets another setting than drope does.
void check_leading_zero(const YAML::Node& n, const std::string& where) {
  const std::string& s = n.Scalar();
  const size_t i = (!s.empty() && (s[0] == '-' || s[0] == '+')) ? 1 : 0;
  if (s.size() > i + 1 && s[i] == '0' && s.find_first_not_of("0123456789", i) == std::string::npos)
    fail("{}: '{}' has a leading zero, which some YAML readers take as octal and others as decimal; write it "
         "without the zero",
         where, s);
}

// A number or boolean must be a plain scalar: yaml-cpp reads the quoted "4" as 4 and "false" as false, where
// PyYAML and every YAML 1.2 reader see a string. yaml-cpp tags plain scalars "?" and the others (quoted, block,
// the bare tag "!") "!".
void check_plain(const YAML::Node& n, const std::string& where, const char* expected) {
  if (n.Tag() == "!")
    fail("{}: expected {}, got the quoted (or block) string {:?}; write it plain, without quotes", where, expected,
         n.Scalar());
}

// A YAML integer scalar; out-of-range values are named as such (not "not an integer").
bool parse_int64(const YAML::Node& n, int64_t& out, bool& overflow) {
  overflow = false;
  try {
    out = n.as<int64_t>();
    return true;
  } catch (const YAML::Exception&) {
  }
  const std::string& s = n.Scalar();
  size_t i = (!s.empty() && (s[0] == '-' || s[0] == '+')) ? 1 : 0;
  overflow = i < s.size() && s.find_first_not_of("0123456789", i) == std::string::npos;
  return false;
}

// A YAML number scalar; a decimal that overflows a double is named as out of range.
bool parse_double(const YAML::Node& n, double& out, bool& overflow) {
  overflow = false;
  try {
    out = n.as<double>();
    return true;
  } catch (const YAML::Exception&) {
  }
  const std::string& s = n.Scalar();
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(s.c_str(), &end);
  overflow = !s.empty() && end == s.c_str() + s.size() && errno == ERANGE && std::isinf(v);
  return false;
}

}  // namespace

// Callers check has(key) first: a default YAML::Node is a defined null, not "absent".
YAML::Node YamlMap::scalar(const std::string& key, const char* expected) {
  known_.insert(key);
  YAML::Node n = node_[key];
  if (!n.IsScalar()) fail("{}: expected {}, got {}", where(key), expected, yaml_kind(n));
  return n;
}

bool YamlMap::get(const std::string& key, int64_t& out) {
  known_.insert(key);
  if (!has(key)) return false;
  YAML::Node n = scalar(key, "an integer");
  check_plain(n, where(key), "an integer");
  check_leading_zero(n, where(key));
  bool overflow = false;
  if (!parse_int64(n, out, overflow)) {
    if (overflow) fail("{}: integer {} is out of range (beyond 64 bits)", where(key), n.Scalar());
    fail("{}: expected an integer, got '{}'", where(key), n.Scalar());
  }
  return true;
}

bool YamlMap::get(const std::string& key, int& out) {
  int64_t v = out;
  if (!get(key, v)) return false;
  if (v < INT32_MIN || v > INT32_MAX) fail("{}: integer {} out of range", where(key), v);
  out = static_cast<int>(v);
  return true;
}

bool YamlMap::get(const std::string& key, double& out, NonFinite non_finite) {
  known_.insert(key);
  if (!has(key)) return false;
  YAML::Node n = scalar(key, "a number");
  check_plain(n, where(key), "a number");
  check_leading_zero(n, where(key));
  double v = 0;
  bool overflow = false;
  if (!parse_double(n, v, overflow)) {
    if (overflow) fail("{}: number {} is out of range (overflows a double)", where(key), n.Scalar());
    fail("{}: expected a number, got '{}'", where(key), n.Scalar());
  }
  if (non_finite == NonFinite::kReject) check_number(v, where(key));
  out = v;
  return true;
}

bool YamlMap::get(const std::string& key, bool& out) {
  known_.insert(key);
  if (!has(key)) return false;
  YAML::Node n = scalar(key, "true or false");
  check_plain(n, where(key), "true or false");
  // YAML 1.2's booleans only: yaml-cpp also takes y / n / yes / no / on / off, which PyYAML reads as a string (y,
  // n) or a boolean (the others) and YAML 1.2 readers as strings.
  static const std::set<std::string> kTrue{"true", "True", "TRUE"}, kFalse{"false", "False", "FALSE"};
  const std::string& v = n.Scalar();
  if (kTrue.count(v)) {
    out = true;
  } else if (kFalse.count(v)) {
    out = false;
  } else {
    const bool other_readers_boolean = n.as<bool>(false) == n.as<bool>(true);  // yaml-cpp converts it
    fail("{}: expected true or false, got '{}'{}", where(key), v,
         other_readers_boolean ? " (a boolean to some YAML readers and a string to others)" : "");
  }
  return true;
}

bool YamlMap::get(const std::string& key, std::string& out) {
  known_.insert(key);
  if (!has(key)) return false;
  YAML::Node n = scalar(key, "a string");
  out = n.Scalar();
  return true;
}

namespace {
template <typename T>
bool get_list(YamlMap& m, YAML::Node node, const std::string& key, std::vector<T>& out, const char* what) {
  if (!node.IsSequence()) fail("{}: expected a list of {}, got {}", m.where(key), what, yaml_kind(node));
  std::vector<T> v;
  for (size_t i = 0; i < node.size(); ++i) {
    const YAML::Node e = node[i];
    if (!e.IsScalar()) fail("{}: element {}: expected {}, got {}", m.where(key), i, what, yaml_kind(e));
    bool ok = true, overflow = false;
    T x{};
    if constexpr (!std::is_same_v<T, std::string>) {
      const std::string at = fmt::format("{}: element {}", m.where(key), i);
      check_plain(e, at, what);
      check_leading_zero(e, at);
    }
    if constexpr (std::is_same_v<T, int64_t>) {
      ok = parse_int64(e, x, overflow);
    } else if constexpr (std::is_same_v<T, double>) {
      ok = parse_double(e, x, overflow);
      if (ok) check_number(x, fmt::format("{}: element {}", m.where(key), i));
    } else {
      x = e.Scalar();
    }
    if (overflow) fail("{}: element {}: {} is out of range", m.where(key), i, e.Scalar());
    if (!ok) fail("{}: element {}: expected {}, got '{}'", m.where(key), i, what, e.Scalar());
    v.push_back(std::move(x));
  }
  out = std::move(v);
  return true;
}
}  // namespace

bool YamlMap::get(const std::string& key, std::vector<std::string>& out) {
  known_.insert(key);
  if (!has(key)) return false;
  return get_list(*this, node_[key], key, out, "strings");
}
bool YamlMap::get(const std::string& key, std::vector<double>& out) {
  known_.insert(key);
  if (!has(key)) return false;
  return get_list(*this, node_[key], key, out, "numbers");
}
bool YamlMap::get(const std::string& key, std::vector<int64_t>& out) {
  known_.insert(key);
  if (!has(key)) return false;
  return get_list(*this, node_[key], key, out, "integers");
}

bool YamlMap::get_choice(const std::string& key, std::string& out, const std::vector<std::string>& choices) {
  std::string v;
  if (!get(key, v)) return false;
  for (const auto& c : choices) {
    if (c == v) {
      out = v;
      return true;
    }
  }
  fail("{}: expected one of [{}], got '{}'", where(key), fmt::join(choices, ", "), v);
}

YamlMap YamlMap::map(const std::string& key) {
  known_.insert(key);
  if (!has(key)) return YamlMap(YAML::Node(), source_, path(key));
  YAML::Node n = node_[key];
  if (!n.IsMap() && !n.IsNull()) fail("{}: expected a mapping, got {}", where(key), yaml_kind(n));
  return YamlMap(n, source_, path(key));
}

void YamlMap::finish() const {
  if (!node_ || !node_.IsMap()) return;
  for (const auto& kv : node_) {
    const std::string k = kv.first.Scalar();
    if (!known_.count(k)) {
      auto m = kv.first.Mark();
      if (m.line < 0)  // a key added in code (as --set does), not read from the file
        fail("{}: unknown key '{}' (given with --set; allowed here: {})", source_, path(k), fmt::join(known_, ", "));
      fail("{}:{}:{}: unknown key '{}' (allowed here: {})", source_, m.line + 1, m.column + 1, path(k),
           fmt::join(known_, ", "));
    }
  }
}

}  // namespace drope
