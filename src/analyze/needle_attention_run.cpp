// The drope-analyze runner needle-attention (analyze/runners.h): a haystack prompt with one NIAH needle and
// its question per model, and where the last query attends around the needle under each method.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <memory>
#include <random>
#include <utility>

#include <fmt/format.h>

#include "drope/analyze/positional_bias.h"
#include "drope/analyze/runners.h"
#include "drope/core/error.h"
#include "drope/core/files.h"
#include "drope/core/utf8.h"
#include "drope/io/model_io.h"
#include "drope/model/variant.h"
#include "drope/tasks/niah.h"
#include "drope/text/tokenizer.h"
#include "run_output.h"

namespace fs = std::filesystem;

namespace drope::analyze {

namespace {

using detail::stem_of;
using detail::write_figure;
using detail::write_text;

// The needle and question as the NIAH tasks write them (tasks/niah.h); key and value from the seed.
struct NeedleText {
  std::string needle, question;
};
NeedleText needle_text(uint64_t seed) {
  std::mt19937_64 rng(seed);
  const std::string key = tasks::draw_needle_item(rng, tasks::NeedleKind::words);
  const std::string value = tasks::draw_needle_item(rng, tasks::NeedleKind::numbers);
  return {" " + tasks::niah_needle(tasks::NeedleKind::numbers, key, value) + " ",
          tasks::niah_question(tasks::NeedleKind::numbers, {key}, 1)};
}

using Encoder = std::function<std::vector<int64_t>(const std::string&)>;

// Tokens: the model's tokenizer, else bytes (models trained on text bytes have vocab >= 256).
Encoder model_encoder(const std::string& dir, const std::string& tokenizer, int64_t vocab) {
  std::shared_ptr<text::Tokenizer> tok;
  std::string tpath = tokenizer;
  if (tpath.empty() && (fs::exists(fs::path(dir) / "tokenizer.json") || fs::exists(fs::path(dir) / "tokenizer.model")))
    tpath = dir;
  if (!tpath.empty()) tok = text::load_tokenizer(tpath);
  else if (vocab < 256)
    fail("--model {}: no tokenizer and a vocabulary below 256 (no byte tokens); pass --tokenizer", dir);
  return [tok](const std::string& t) {
    std::vector<int64_t> ids;
    if (tok)
      for (auto i : tok->encode(t)) ids.push_back(i);
    else
      for (unsigned char c : t) ids.push_back(c);
    return ids;
  };
}

// The haystack's first `room` tokens, the file repeated when it has fewer. The file is read and encoded in
// growing prefixes, each cut before a space or line break (so that its tokens are those of the whole text),
// until one gives more than `room` tokens: a huge haystack, even one long line, costs what the prompt uses.
std::vector<int64_t> haystack_tokens(const Encoder& encode, const std::string& path, int64_t room) {
  const uint64_t size = InputFile(path).size();
  if (size == 0) fail("--haystack {}: the file is empty", path);
  constexpr int64_t kMargin = 64;  // tokens beyond `room`: the end of a prefix may encode differently
  for (uint64_t want = std::max<uint64_t>(4096, uint64_t(room) * 16);; want *= 4) {
    const bool whole = want >= size;
    std::string text = whole ? read_file(path) : read_file_prefix(path, want);
    if (!whole) {
      size_t cut = text.find_last_of(" \t\r\n");
      if (cut == std::string::npos || cut < text.size() / 2) {  // no break near the end: cut between characters
        cut = text.size();
        while (cut > 0 && (static_cast<unsigned char>(text[cut - 1]) & 0xC0) == 0x80) --cut;
        if (cut > 0 && static_cast<unsigned char>(text[cut - 1]) >= 0xC0) --cut;
      }
      text.resize(cut);
    }
    if (utf8_error_offset(text) >= 0) fail("--haystack {}: invalid UTF-8 at byte {}", path, utf8_error_offset(text));
    std::vector<int64_t> ids = encode(text);
    if (!whole && int64_t(ids.size()) <= room + kMargin) continue;
    if (ids.empty()) fail("--haystack {}: the text encodes to no tokens", path);
    std::vector<int64_t> h;
    while (int64_t(h.size()) < room) h.insert(h.end(), ids.begin(), ids.end());
    h.resize(size_t(room));
    return h;
  }
}

// A prompt of `length` tokens: the haystack's tokens (repeated as needed) with the needle at `depth` % of
// them, then the question.
struct NeedlePrompt {
  torch::Tensor ids;  // (1, length)
  int64_t needle_begin = 0, needle_end = 0;
};
NeedlePrompt needle_prompt(const Encoder& encode, const std::string& haystack, const NeedleText& nt, int64_t L,
                           double depth, int64_t vocab, const std::string& dir) {
  const auto q = encode(nt.question), n = encode(nt.needle);
  const int64_t room = L - int64_t(q.size() + n.size());
  if (room < 1) fail("--length {} is too short for the needle and question ({} tokens)", L, q.size() + n.size());
  if (L > 16384) fail("--length {}: the analysis keeps full attention maps; use at most 16384", L);
  const std::vector<int64_t> h = haystack_tokens(encode, haystack, room);
  const int64_t at = int64_t(std::llround(depth / 100.0 * double(room)));
  std::vector<int64_t> ids(h.begin(), h.begin() + at);
  ids.insert(ids.end(), n.begin(), n.end());
  ids.insert(ids.end(), h.begin() + at, h.end());
  ids.insert(ids.end(), q.begin(), q.end());
  for (auto id : ids)
    if (id >= vocab) fail("--model {}: token id {} exceeds the vocabulary {}", dir, id, vocab);
  return {torch::tensor(ids, torch::kLong).view({1, -1}), at, at + int64_t(n.size())};
}

}  // namespace

void run_needle_attention(const NeedleAttentionRun& nd) {
  if (nd.depth < 0 || nd.depth > 100) fail("--depth must be in [0, 100], got {}", nd.depth);
  if (nd.window < 0) fail("--window must be >= 0, got {}", nd.window);
  if (nd.length < 0) fail("--length must be a positive number of tokens (or 0 for the default), got {}", nd.length);
  if (InputFile(nd.haystack).size() == 0) fail("--haystack {}: the file is empty", nd.haystack);
  const NeedleText nt = needle_text(nd.seed);
  // Methods first, so that a typo fails before any model is loaded.
  std::vector<std::pair<std::string, Variant>> methods;
  for (const auto& m : nd.methods) methods.emplace_back(m, parse_variant(m, "--method"));
  std::vector<NeedleAttention> runs;
  for (const auto& dir : nd.models) {
    auto base = io::load_model(dir);
    base->eval();
    const auto& cfg = base->config();
    const Encoder encode = model_encoder(dir, nd.tokenizer, cfg.vocab_size);
    const int64_t L = nd.length > 0 ? nd.length : 2 * cfg.max_position;
    const NeedlePrompt p = needle_prompt(encode, nd.haystack, nt, L, nd.depth, cfg.vocab_size, dir);
    for (const auto& [m, variant] : methods) {
      DecoderLM model = apply_variant(base, variant, dir);
      model->eval();
      const std::string label = variant.is_identity() ? stem_of(dir) : fmt::format("{} {}", stem_of(dir), m);
      runs.push_back(needle_attention(model, p.ids, p.needle_begin, p.needle_end, nd.window, label));
      const auto& r = runs.back();
      fmt::print("{:<32} needle mass {:.4f} (uniform {:.4f}) over {} layers; prompt {} tokens, needle at {}\n", label,
                 r.mean_needle_mass, r.uniform_mass, r.needle_mass.size(), r.prompt_tokens, p.needle_begin);
    }
  }
  fs::create_directories(nd.out);
  write_text(nd.out, "needle_attention.json", needle_attention_json(runs));
  write_text(nd.out, "needle_attention.csv", needle_attention_csv(runs));
  write_figure(needle_attention_figure(runs), nd.out, "needle_attention");
}

}  // namespace drope::analyze
