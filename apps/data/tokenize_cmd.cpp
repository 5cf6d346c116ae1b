// Flags of `drope-data encode` and `drope-data decode` (text::load_tokenizer): JSON in, JSON out.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "data/commands.h"
#include "drope/core/error.h"
#include "drope/core/files.h"
#include "drope/core/json.h"
#include "drope/text/tokenizer.h"

namespace drope::datacli {

namespace {

using json = nlohmann::json;

// A JSON list of token ids → ids, naming the file and index on a bad entry.
std::vector<int32_t> ids_from(const json& j, const std::string& where) {
  if (!j.is_array()) fail("{}: expected a list of token ids", where);
  std::vector<int32_t> ids;
  for (size_t i = 0; i < j.size(); ++i) {
    const int64_t id = json_int64(j[i], fmt::format("{}[{}]: token id", where, i));
    if (id < 0 || id > INT32_MAX) fail("{}[{}]: expected a non-negative integer token id, got {}", where, i, id);
    ids.push_back(static_cast<int32_t>(id));
  }
  return ids;
}

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

struct TokenizeFlags {
  std::string tokenizer, text_file, texts_file, ids_file;
  bool skip_special = false;
};

int run_encode(const TokenizeFlags& f) {
  const auto tok = text::load_tokenizer(f.tokenizer);
  if (!f.texts_file.empty()) {
    const json texts = read_json_file(f.texts_file);
    if (!texts.is_array()) fail("{}: expected a JSON list of strings", f.texts_file);
    json out = json::array();
    for (size_t i = 0; i < texts.size(); ++i) {
      if (!texts[i].is_string()) fail("{}[{}]: expected a string", f.texts_file, i);
      try {
        out.push_back(tok->encode(texts[i].get<std::string>()));
      } catch (const Error& e) {
        fail("{}[{}]: {}", f.texts_file, i, e.what());
      }
    }
    fmt::print("{}\n", dump(out));
  } else {
    if (f.text_file.empty()) fail("give --text FILE or --texts FILE.json");
    const std::string text = read_file(f.text_file);
    std::vector<int32_t> ids;
    try {
      ids = tok->encode(text);
    } catch (const Error& e) {
      fail("{}: {}", f.text_file, e.what());
    }
    fmt::print("{}\n", dump(json(ids)));
  }
  return 0;
}

int run_decode(const TokenizeFlags& f) {
  const auto tok = text::load_tokenizer(f.tokenizer);
  const json j = read_json_file(f.ids_file);
  auto decode_one = [&](const json& list, const std::string& where) {
    const auto ids = ids_from(list, where);
    try {
      return tok->decode(ids, f.skip_special);
    } catch (const Error& e) {
      fail("{}: {}", where, e.what());
    }
  };
  if (j.is_array() && !j.empty() && j[0].is_array()) {
    json out = json::array();
    for (size_t i = 0; i < j.size(); ++i) out.push_back(decode_one(j[i], fmt::format("{}[{}]", f.ids_file, i)));
    fmt::print("{}\n", dump(out));
  } else {
    fmt::print("{}\n", dump(json(decode_one(j, f.ids_file))));
  }
  return 0;
}

}  // namespace

void add_tokenize_commands(CLI::App& cli, int& rc) {
  auto f = std::make_shared<TokenizeFlags>();
  auto* encode = cli.add_subcommand("encode", "Print the token ids of a text as JSON");
  encode->add_option("--tokenizer", f->tokenizer, "SentencePiece .model, tokenizer.json, or a directory")->required();
  auto* text_opt = encode->add_option("--text", f->text_file, "UTF-8 file whose whole content is encoded → [ids]");
  auto* texts_opt = encode->add_option("--texts", f->texts_file, "JSON list of strings → [[ids], ...]");
  text_opt->excludes(texts_opt);
  encode->callback([f, &rc] { rc = run([&] { return run_encode(*f); }); });

  auto* decode = cli.add_subcommand("decode", "Print the text of token ids as JSON");
  decode->add_option("--tokenizer", f->tokenizer, "SentencePiece .model, tokenizer.json, or a directory")->required();
  decode->add_option("--ids", f->ids_file, "JSON list of ids → \"text\", or list of lists → [\"text\", ...]")
      ->required();
  decode->add_flag("--skip-special", f->skip_special, "Leave special tokens out");
  decode->callback([f, &rc] { rc = run([&] { return run_decode(*f); }); });
}

}  // namespace drope::datacli
