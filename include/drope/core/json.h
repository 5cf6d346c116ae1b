// Strict JSON input shared by every reader of user JSON (config.json, safetensors headers, dataset and
// checkpoint indexes, JSONL lines, tokenizer.json): bounded nesting, no duplicate keys, and integers read
// with overflow reported as such. Errors are drope::Error naming the source.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace drope {

// Deepest nesting of arrays/objects accepted (HF's safetensors and tokenizers readers stop at 128 too):
// deeper documents are refused while parsing, so no recursive walk over a parsed value (copy, dump, our
// own readers) can go deeper than this.
constexpr int kMaxJsonDepth = 128;

// Parses `text` as one JSON value. Refuses, naming `source` ("file" or "file:line"): syntax errors and
// numbers that overflow a double ("invalid JSON (...)"), nesting deeper than kMaxJsonDepth, and an
// object with the same key twice (later-wins readers and first-wins readers would disagree).
nlohmann::json parse_json(std::string_view text, const std::string& source);

// read_file (regular files only, at most `max_bytes`) + parse_json, naming the path.
nlohmann::json read_json_file(const std::string& path, uint64_t max_bytes = uint64_t{1} << 30);

// `v` as a signed 64-bit integer. Fails with "<where>: expected an integer, got <type>" for anything
// but a JSON integer, and says "out of range" (not a wrapped value) for integers beyond int64.
int64_t json_int64(const nlohmann::json& v, const std::string& where);

}  // namespace drope
