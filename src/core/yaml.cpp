#include "drope/core/yaml.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "drope/core/error.h"
#include "drope/core/files.h"

namespace drope {

YAML::Node parse_yaml(const std::string& text, const std::string& source) {
  try {
    return YAML::Load(text);
  } catch (const YAML::Exception& e) {
    fail("{}:{}:{}: malformed YAML: {}", source, e.mark.line + 1, e.mark.column + 1, e.msg);
  }
}

YAML::Node load_yaml_file(const std::string& path) { return parse_yaml(read_file(path), path); }

YamlMap::YamlMap(YAML::Node node, std::string source, std::string prefix)
    : node_(std::move(node)), source_(std::move(source)), prefix_(std::move(prefix)) {
  if (node_ && !node_.IsNull() && !node_.IsMap()) {
    fail("{}:{}: {}: expected a mapping of keys to values", source_, node_.Mark().line + 1,
         prefix_.empty() ? std::string("document") : fmt::format("key '{}'", prefix_));
  }
}

std::string YamlMap::path(const std::string& key) const { return prefix_.empty() ? key : prefix_ + "." + key; }

std::string YamlMap::where(const std::string& key) const {
  if (node_ && node_.IsMap() && node_[key]) {
    auto m = node_[key].Mark();
    if (m.line >= 0) return fmt::format("{}:{}:{}: key '{}'", source_, m.line + 1, m.column + 1, path(key));
  }
  return fmt::format("{}: key '{}'", source_, path(key));
}

bool YamlMap::has(const std::string& key) const { return node_ && node_.IsMap() && node_[key]; }

// Callers check has(key) first: a default YAML::Node is a defined null, not "absent".
YAML::Node YamlMap::scalar(const std::string& key, const char* expected) {
  known_.insert(key);
  YAML::Node n = node_[key];
  if (!n.IsScalar()) fail("{}: expected {}, got a {}", where(key), expected, n.IsMap() ? "mapping" : "list");
  return n;
}

bool YamlMap::get(const std::string& key, int64_t& out) {
  known_.insert(key);
  if (!has(key)) return false;
  YAML::Node n = scalar(key, "an integer");
  try {
    out = n.as<int64_t>();
  } catch (const YAML::Exception&) {
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

bool YamlMap::get(const std::string& key, double& out) {
  known_.insert(key);
  if (!has(key)) return false;
  YAML::Node n = scalar(key, "a number");
  try {
    out = n.as<double>();
  } catch (const YAML::Exception&) {
    fail("{}: expected a number, got '{}'", where(key), n.Scalar());
  }
  return true;
}

bool YamlMap::get(const std::string& key, bool& out) {
  known_.insert(key);
  if (!has(key)) return false;
  YAML::Node n = scalar(key, "true or false");
  try {
    out = n.as<bool>();
  } catch (const YAML::Exception&) {
    fail("{}: expected true or false, got '{}'", where(key), n.Scalar());
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
  if (!node.IsSequence()) fail("{}: expected a list of {}", m.where(key), what);
  std::vector<T> v;
  for (size_t i = 0; i < node.size(); ++i) {
    try {
      if (!node[i].IsScalar()) throw YAML::Exception(node[i].Mark(), "not a scalar");
      v.push_back(node[i].as<T>());
    } catch (const YAML::Exception&) {
      fail("{}: element {}: expected {}", m.where(key), i, what);
    }
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
  if (!n.IsMap() && !n.IsNull()) fail("{}: expected a mapping", where(key));
  return YamlMap(n, source_, path(key));
}

void YamlMap::finish() const {
  if (!node_ || !node_.IsMap()) return;
  for (const auto& kv : node_) {
    const std::string k = kv.first.Scalar();
    if (!known_.count(k)) {
      auto m = kv.first.Mark();
      fail("{}:{}:{}: unknown key '{}' (allowed here: {})", source_, m.line + 1, m.column + 1, path(k),
           fmt::join(known_, ", "));
    }
  }
}

}  // namespace drope
