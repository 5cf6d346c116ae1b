// Strict YAML reading: every key is checked against what the caller reads, types are checked, and
// errors name the file, the line and the full key path.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

namespace drope {

// Parses one YAML document from text; `source` names it in error messages ("file:line: ..."). Refused:
// bytes that are not UTF-8, several documents in one text, a key repeated in a mapping, nesting deeper
// than 128 levels, more than 2^16 nodes written out or 2^20 reached through aliases, tags, merge keys.
YAML::Node parse_yaml(const std::string& text, const std::string& source);
// parse_yaml of a regular file of at most 1 MiB.
YAML::Node load_yaml_file(const std::string& path);

// Whether a number getter accepts .inf / .nan.
enum class NonFinite { kReject, kAllow };

// A view of one YAML mapping that records which keys were read. `finish()` rejects unread keys.
class YamlMap {
 public:
  YamlMap(YAML::Node node, std::string source, std::string prefix);

  bool has(const std::string& key) const;
  // Each getter leaves `out` untouched when the key is absent and returns whether it was present.
  bool get(const std::string& key, int64_t& out);
  bool get(const std::string& key, int& out);
  // Non-finite values (.inf, .nan) are refused unless the caller passes NonFinite::kAllow.
  bool get(const std::string& key, double& out, NonFinite non_finite = NonFinite::kReject);
  bool get(const std::string& key, bool& out);
  bool get(const std::string& key, std::string& out);
  bool get(const std::string& key, std::vector<std::string>& out);
  bool get(const std::string& key, std::vector<double>& out);  // finite numbers only
  bool get(const std::string& key, std::vector<int64_t>& out);
  // A string restricted to `choices`.
  bool get_choice(const std::string& key, std::string& out, const std::vector<std::string>& choices);
  // A nested mapping (must be a map when present).
  YamlMap map(const std::string& key);
  // Throws if any key was not read, listing the keys that are allowed here.
  void finish() const;

  const std::string& source() const { return source_; }
  std::string path(const std::string& key) const;
  // "file:line:col: key 'a.b'" for messages about `key`.
  std::string where(const std::string& key) const;

 private:
  YAML::Node scalar(const std::string& key, const char* expected);
  YAML::Node node_;
  std::string source_;
  std::string prefix_;
  std::set<std::string> known_;
};

}  // namespace drope
