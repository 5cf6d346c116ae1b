#include "drope/formats/checkpoint_digest.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <string_view>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

#include "drope/core/crc32c.h"
#include "drope/core/error.h"
#include "drope/core/files.h"
#include "drope/core/log.h"
#include "drope/core/strings.h"
#include "drope/formats/safetensors_header.h"

namespace fs = std::filesystem;

namespace drope::train {

namespace {
#if defined(__x86_64__)
// One CRC32 instruction per 8 bytes (its latency, 3 cycles, bounds the speed of one stream).
__attribute__((target("sse4.2"))) uint32_t crc32c_sse42(const uint8_t* p, size_t n, uint32_t crc) {
  uint64_t c = ~crc;
  for (; n > 0 && (reinterpret_cast<uintptr_t>(p) & 7) != 0; --n) c = _mm_crc32_u8(uint32_t(c), *p++);
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    c = _mm_crc32_u64(c, v);
  }
  for (; n > 0; --n) c = _mm_crc32_u8(uint32_t(c), *p++);
  return ~uint32_t(c);
}
#endif

std::string hex(uint32_t v) { return fmt::format("{:08x}", v); }

// A tensor's digest: its bytes, then its dtype and shape (the same bytes read as another dtype or shape differ).
std::string tensor_digest(const uint8_t* bytes, const io::TensorEntry& e) {
  uint32_t c = fast_crc32c(bytes, e.end - e.begin);
  std::string tail = "|" + e.dtype;
  for (int64_t d : e.shape) tail += fmt::format("|{}", d);
  return hex(fast_crc32c(tail.data(), tail.size(), c));
}
}  // namespace

uint32_t fast_crc32c(const void* data, size_t n, uint32_t crc) {
#if defined(__x86_64__)
  static const bool hw = __builtin_cpu_supports("sse4.2");
  if (hw) return crc32c_sse42(static_cast<const uint8_t*>(data), n, crc);
#endif
  return crc32c(std::string_view(static_cast<const char*>(data), n), crc);
}

std::map<std::string, std::string> identity_metadata(const TrainState& st) {
  return {{kRunMetadataKey, st.run.id}, {kStepMetadataKey, std::to_string(st.step)}};
}

FileDigest digest_file(const std::string& dir, const std::string& name) {
  const std::string path = (fs::path(dir) / name).string();
  FileDigest d;
  if (ends_with(name, ".safetensors")) {
    const MappedFile f(path);
    const auto h = io::parse_safetensors_header(reinterpret_cast<const char*>(f.data()), f.size(), path);
    for (const auto& [tname, e] : h.tensors) d.tensors[tname] = tensor_digest(f.data() + h.data_start + e.begin, e);
  } else {
    const std::string content = read_file(path);
    d.whole = hex(fast_crc32c(content.data(), content.size()));
  }
  return d;
}

std::map<std::string, FileDigest> digest_directory(const std::string& dir) {
  std::map<std::string, FileDigest> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name != "state.json" && e.is_regular_file()) out[name] = digest_file(dir, name);
  }
  return out;
}

bool is_model_file(const std::string& name) {
  return name == "drope.yaml" || name == "config.json" ||
         (name.rfind("model", 0) == 0 &&
          (ends_with(name, ".safetensors") || ends_with(name, ".safetensors.index.json")));
}

bool is_checkpoint_file(const std::string& name) {
  return is_model_file(name) || name == "run.yaml" || name == "optimizer-manifest.json" ||
         (name.rfind("optimizer", 0) == 0 && ends_with(name, ".safetensors"));
}

namespace {

// The identity a safetensors file's metadata names, checked against the checkpoint's (absent: not checked;
// a file rewritten by another tool keeps its tensors, which the digests still check).
void check_identity(const io::SafetensorsHeader& h, const std::string& path, const std::string& state_path,
                    const TrainState& st, std::vector<std::string>& out) {
  const auto run = h.metadata.find(kRunMetadataKey), step = h.metadata.find(kStepMetadataKey);
  if (run == h.metadata.end() && step == h.metadata.end()) return;
  const std::string r = run == h.metadata.end() ? "?" : run->second, s = step == h.metadata.end() ? "?" : step->second;
  if (r == st.run.id && s == std::to_string(st.step)) return;
  out.push_back(fmt::format("{}: written by run {} at step {}, but {} is run {} at step {} (a file of {})", path, r, s,
                            state_path, st.run.id, st.step,
                            r == st.run.id ? "another checkpoint of this run" : "another run"));
}

// The tensors of `path` whose digests differ from the record `want` (missing and unrecorded ones named too).
void compare_tensors(const FileDigest& got, const FileDigest& want, const std::string& path,
                     const std::string& state_path, std::vector<std::string>& out) {
  std::vector<std::string> differ;
  for (const auto& [name, d] : want.tensors) {
    auto it = got.tensors.find(name);
    if (it == got.tensors.end())
      out.push_back(fmt::format("{}: tensor '{}' is missing ({} records it)", path, name, state_path));
    else if (it->second != d) differ.push_back(name);
  }
  for (const auto& [name, d] : got.tensors)
    if (!want.tensors.count(name))
      out.push_back(fmt::format("{}: tensor '{}' is not recorded in {}", path, name, state_path));
  if (!differ.empty())
    out.push_back(fmt::format(
        "{}: tensor '{}' does not match its digest in {}{}", path, differ.front(), state_path,
        differ.size() > 1 ? fmt::format(" (nor do {} more of its {} tensors)", differ.size() - 1, want.tensors.size())
                          : std::string()));
}
}  // namespace

std::vector<std::string> check_checkpoint_integrity(const std::string& dir, const TrainState& st,
                                                    bool (*select)(const std::string& name)) {
  std::vector<std::string> identity, content;
  if (st.version < 2) return {};
  const std::string state_path = (fs::path(dir) / "state.json").string();
  if (!st.intact)
    identity.push_back(fmt::format("{}: its content does not match its state_digest (edited or damaged)", state_path));
  for (const auto& [name, want] : st.digests) {
    if (!select(name)) continue;
    const std::string path = (fs::path(dir) / name).string();
    std::error_code ec;
    if (!fs::is_regular_file(path, ec)) {
      content.push_back(fmt::format("{}: missing ({} records it)", path, state_path));
      continue;
    }
    if (!want.tensors.empty() != ends_with(name, ".safetensors")) {
      content.push_back(fmt::format("{}: {} records the wrong kind of digest for it", path, state_path));
      continue;
    }
    const FileDigest got = digest_file(dir, name);
    if (want.tensors.empty()) {
      if (got.whole != want.whole)
        content.push_back(fmt::format("{}: its content does not match its digest in {}", path, state_path));
      continue;
    }
    const MappedFile f(path);
    check_identity(io::parse_safetensors_header(reinterpret_cast<const char*>(f.data()), f.size(), path), path,
                   state_path, st, identity);
    compare_tensors(got, want, path, state_path, content);
  }
  // A file the loaders would read that the record does not list was put there after the checkpoint was written
  // (an optimizer.safetensors beside a sharded run's pieces is read in their place).
  std::vector<std::string> unrecorded;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (!st.digests.count(name) && select(name) && is_checkpoint_file(name)) unrecorded.push_back(name);
  }
  std::sort(unrecorded.begin(), unrecorded.end());
  for (const auto& name : unrecorded)
    content.push_back(fmt::format("{}: not recorded in {} (a file added after the checkpoint was written)",
                                  (fs::path(dir) / name).string(), state_path));
  identity.insert(identity.end(), content.begin(), content.end());
  return identity;
}

void enforce_checkpoint_integrity(const std::string& dir, const TrainState& st,
                                  const std::vector<std::string>& problems, bool allow_foreign) {
  if (st.version < 2) {
    // Builds that write digests also stamp their run into every safetensors file: a state.json without digests
    // beside such a file was rewritten in the old format (by hand, or by a tool), which would turn every check off.
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      const std::string path = e.path().string();
      if (!ends_with(path, ".safetensors") || !e.is_regular_file()) continue;
      std::map<std::string, std::string> meta;
      try {
        const MappedFile f(path);
        meta = io::parse_safetensors_header(reinterpret_cast<const char*>(f.data()), f.size(), path).metadata;
      } catch (const Error&) {
        continue;  // the loader names a damaged file
      }
      const auto run = meta.find(kRunMetadataKey);
      if (run == meta.end()) continue;
      const std::string problem = fmt::format(
          "{}: has no digests, but {} was written by a build that records them (run {}): the state file was "
          "replaced or rewritten in an older format",
          (fs::path(dir) / "state.json").string(), path, run->second);
      if (!allow_foreign) fail("{}. drope-train --allow-foreign-checkpoint loads weights grafted on purpose", problem);
      logging::warn("{} (accepted: --allow-foreign-checkpoint)", problem);
      return;
    }
    logging::warn("{}: a checkpoint of an older build (no digests in its state.json): its files are not verified", dir);
    return;
  }
  if (problems.empty()) return;
  if (!allow_foreign)
    fail("{}. The checkpoint is damaged or mixes files of different runs or steps; drope-train "
         "--allow-foreign-checkpoint loads weights grafted on purpose",
         problems.front());
  for (const auto& p : problems) logging::warn("{} (accepted: --allow-foreign-checkpoint)", p);
}

}  // namespace drope::train
