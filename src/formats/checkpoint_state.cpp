#include "drope/formats/checkpoint_state.h"

#include <random>

#include "drope/core/crc32c.h"
#include "drope/core/error.h"
#include "drope/core/json.h"

namespace drope::train {

namespace {
constexpr const char* kFormat = "drope-checkpoint-2";
constexpr const char* kOldFormat = "drope-checkpoint-1";

bool is_hex(const std::string& s, size_t n) {
  if (s.size() != n) return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

// CRC-32C of the canonical dump of `j` without its "state_digest" (nlohmann's objects are sorted by key, so
// the dump does not depend on the file's spacing or key order).
std::string state_digest(nlohmann::json j) {
  j.erase("state_digest");
  return fmt::format("{:08x}", crc32c(j.dump()));
}

nlohmann::json run_json(const RunIdentity& r) {
  nlohmann::json parent = nullptr;
  if (r.parent_step >= 0)
    parent = {{"id", r.parent_id.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.parent_id)},
              {"step", r.parent_step},
              {"checkpoint", r.parent_path}};
  return {{"id", r.id}, {"parent", parent}};
}

nlohmann::json digests_json(const std::map<std::string, FileDigest>& d) {
  nlohmann::json files = nlohmann::json::object();
  for (const auto& [name, fd] : d)
    files[name] = fd.tensors.empty() ? nlohmann::json(fd.whole) : nlohmann::json(fd.tensors);
  return {{"algorithm", "crc32c"}, {"files", files}};
}

// The "run" object of a drope-checkpoint-2 state.json.
RunIdentity parse_run(const nlohmann::json& j, const std::string& path) {
  if (!j.contains("run") || !j["run"].is_object()) fail("{}: 'run' must be an object with the run's id", path);
  const auto& r = j["run"];
  RunIdentity out;
  if (!r.contains("id") || !r["id"].is_string() || !is_hex(r["id"].get<std::string>(), 32))
    fail("{}: run.id must be 32 lowercase hex digits", path);
  out.id = r["id"].get<std::string>();
  if (r.contains("parent") && !r["parent"].is_null()) {
    const auto& p = r["parent"];
    if (!p.is_object() || !p.contains("step") || !p["step"].is_number_integer() || p["step"].get<int64_t>() < 0)
      fail("{}: run.parent must be null or an object with a step >= 0", path);
    out.parent_step = p["step"].get<int64_t>();
    if (p.contains("id") && !p["id"].is_null()) {
      if (!p["id"].is_string() || !is_hex(p["id"].get<std::string>(), 32))
        fail("{}: run.parent.id must be null or 32 lowercase hex digits", path);
      out.parent_id = p["id"].get<std::string>();
    }
    if (p.contains("checkpoint")) {
      if (!p["checkpoint"].is_string()) fail("{}: run.parent.checkpoint must be a path", path);
      out.parent_path = p["checkpoint"].get<std::string>();
    }
  }
  return out;
}

// A plain file name inside the checkpoint directory (no '/', no "..", not state.json itself).
bool plain_name(const std::string& f) {
  return !f.empty() && f.find('/') == std::string::npos && f.find('\0') == std::string::npos && f != "." && f != ".." &&
         f != "state.json";
}

// The "digests" object of a drope-checkpoint-2 state.json.
std::map<std::string, FileDigest> parse_digests(const nlohmann::json& j, const std::string& path) {
  if (!j.contains("digests") || !j["digests"].is_object()) fail("{}: 'digests' must be an object", path);
  const auto& d = j["digests"];
  if (d.value("algorithm", std::string()) != "crc32c")
    fail("{}: digests.algorithm must be \"crc32c\", got {}", path,
         d.contains("algorithm") ? d["algorithm"].dump() : "nothing");
  if (!d.contains("files") || !d["files"].is_object() || d["files"].empty())
    fail("{}: digests.files must be an object naming every file of the checkpoint", path);
  std::map<std::string, FileDigest> out;
  for (auto it = d["files"].begin(); it != d["files"].end(); ++it) {
    if (!plain_name(it.key())) fail("{}: digests.files['{}'] is not a file name inside the checkpoint", path, it.key());
    FileDigest fd;
    if (it->is_string() && is_hex(it->get<std::string>(), 8)) {
      fd.whole = it->get<std::string>();
    } else if (it->is_object()) {
      for (auto t = it->begin(); t != it->end(); ++t) {
        if (!t->is_string() || !is_hex(t->get<std::string>(), 8))
          fail("{}: digests.files['{}']['{}'] must be 8 lowercase hex digits", path, it.key(), t.key());
        fd.tensors[t.key()] = t->get<std::string>();
      }
      if (fd.tensors.empty()) fail("{}: digests.files['{}'] lists no tensors", path, it.key());
    } else {
      fail("{}: digests.files['{}'] must be 8 lowercase hex digits or an object of them per tensor", path, it.key());
    }
    out.emplace(it.key(), std::move(fd));
  }
  return out;
}
}  // namespace

std::string new_run_id() {
  std::random_device rd;
  std::string id;
  for (int i = 0; i < 4; ++i) id += fmt::format("{:08x}", uint32_t(rd()));
  return id;
}

std::string checkpoint_state_json(const TrainState& st) {
  nlohmann::json j{{"step", st.step}, {"tokens", st.tokens}, {"phase_start", st.phase_start}, {"extra", st.extra}};
  if (st.skipped >= 0) j["skipped_steps"] = st.skipped;
  if (st.run.id.empty()) {  // a state read from an older build's file, written back as it was
    j["format"] = kOldFormat;
    return j.dump(2) + "\n";
  }
  j["format"] = kFormat;
  j["run"] = run_json(st.run);
  j["digests"] = digests_json(st.digests);
  j["state_digest"] = state_digest(j);
  return j.dump(2) + "\n";
}

TrainState parse_checkpoint_state(const std::string& text, const std::string& path) {
  TrainState st;
  try {
    const auto j = parse_json(text, path);
    if (!j.is_object()) fail("{}: not a valid checkpoint state (expected a JSON object)", path);
    // Integers only: converting a float such as 1e300 to int64 would be undefined behaviour.
    auto integer = [&](const char* key, bool required) -> int64_t {
      if (!j.contains(key) && !required) return 0;
      const auto& v = j.at(key);
      if (!v.is_number_integer()) fail("{}: '{}' must be an integer, got {}", path, key, v.dump());
      return v.get<int64_t>();
    };
    const auto format = j.contains("format") ? j["format"] : nlohmann::json(kOldFormat);
    if (format == kFormat) {
      st.version = 2;
    } else if (format == kOldFormat) {
      st.version = 1;  // older builds: no run identity, no digests
    } else {
      fail("{}: format {} is not a drope checkpoint state (expected \"{}\" or \"{}\")", path, format.dump(), kFormat,
           kOldFormat);
    }
    st.step = integer("step", true);
    st.tokens = integer("tokens", true);
    st.phase_start = integer("phase_start", false);
    if (j.contains("skipped_steps")) {
      st.skipped = integer("skipped_steps", true);
      if (st.skipped < 0) fail("{}: skipped_steps must be >= 0, got {}", path, st.skipped);
    } else {
      st.skipped = -1;
    }
    st.extra = j.value("extra", nlohmann::json::object());
    if (st.extra.is_null()) st.extra = nlohmann::json::object();  // written by older builds
    if (st.version == 2) {
      st.run = parse_run(j, path);
      st.digests = parse_digests(j, path);
      if (!j.contains("state_digest") || !j["state_digest"].is_string())
        fail("{}: 'state_digest' must be the digest of the file's content", path);
      st.intact = j["state_digest"].get<std::string>() == state_digest(j);
    }
  } catch (const nlohmann::json::exception& e) {
    fail("{}: not a valid checkpoint state ({})", path, e.what());
  }
  if (st.step < 0 || st.tokens < 0 || st.phase_start < 0 || st.phase_start > st.step)
    fail("{}: step, tokens and phase_start must be >= 0 and phase_start <= step", path);
  if (st.skipped > st.step) fail("{}: skipped_steps {} exceeds step {}", path, st.skipped, st.step);
  if (!st.extra.is_object()) fail("{}: 'extra' must be an object", path);
  if (st.extra.contains("complete") && !st.extra["complete"].is_boolean())
    fail("{}: extra.complete must be true or false", path);
  if (st.extra.contains("val_loss") && !st.extra["val_loss"].is_number())
    fail("{}: extra.val_loss must be a number", path);
  return st;
}

}  // namespace drope::train
