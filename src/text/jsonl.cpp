#include "drope/text/jsonl.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string_view>

#include <fmt/format.h>

#include "drope/core/error.h"
#include "drope/core/files.h"
#include "drope/core/json.h"

namespace drope::text {

void for_each_jsonl_object(const std::string& path, const std::function<bool(int64_t, const nlohmann::json&)>& fn) {
  const InputFile file(path);  // regular files only: a FIFO is refused, not waited on
  const int fd = ::dup(file.fd());
  std::FILE* in = fd >= 0 ? ::fdopen(fd, "rb") : nullptr;
  if (!in) {
    if (fd >= 0) ::close(fd);
    fail("{}: cannot open for reading ({})", path, std::strerror(errno));
  }
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> closer(in, &std::fclose);
  struct LineBuffer {  // getline(3)'s growing buffer, freed on every exit
    char* data = nullptr;
    size_t capacity = 0;
    ~LineBuffer() { std::free(data); }
  } buf;
  for (int64_t n = 1;; ++n) {
    const ssize_t len = ::getline(&buf.data, &buf.capacity, in);
    if (len < 0) break;
    std::string_view line(buf.data, static_cast<size_t>(len));
    if (!line.empty() && line.back() == '\n') line.remove_suffix(1);
    if (line.find_first_not_of(" \t\r\n") == std::string_view::npos) continue;
    const nlohmann::json j = parse_json(line, fmt::format("{}:{}", path, n));
    if (!j.is_object()) fail("{}:{}: expected a JSON object, got {}", path, n, j.type_name());
    if (!fn(n, j)) return;
  }
  if (std::ferror(in)) fail("{}: read error", path);
}

const std::string& jsonl_string(const nlohmann::json& object, const std::string& key, const std::string& path,
                                int64_t line) {
  auto it = object.find(key);
  if (it == object.end()) fail("{}:{}: missing field \"{}\"", path, line, key);
  if (!it->is_string()) fail("{}:{}: field \"{}\" must be a string, got {}", path, line, key, it->type_name());
  return it->get_ref<const std::string&>();
}

}  // namespace drope::text
