// JSON Lines input shared by every reader of user jsonl files (datasets, LongBench, prompts, eval text):
// one parse loop, one set of file:line messages. Torch-free.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

namespace drope::text {

// Calls fn(line_number, object) for each non-blank line of `path` in order (streamed through LineReader,
// so `.gz` / `.zst` files are decompressed; 1-based line numbers); stops early when fn returns false.
// Unreadable files, corrupt compressed data, invalid JSON and non-objects fail naming path:line.
void for_each_jsonl_object(const std::string& path, const std::function<bool(int64_t, const nlohmann::json&)>& fn);

// The string field `key` of the object on path:line; a missing or non-string field fails naming both.
const std::string& jsonl_string(const nlohmann::json& object, const std::string& key, const std::string& path,
                                int64_t line);

}  // namespace drope::text
