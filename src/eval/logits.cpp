#include "drope/eval/logits.h"

#include <nlohmann/json.hpp>

#include "drope/core/error.h"
#include "drope/core/files.h"
#include "drope/core/json.h"
#include "drope/io/safetensors.h"

namespace drope::eval {

at::Tensor read_token_batch(const std::string& path, int64_t vocab) {
  const nlohmann::json j = read_json_file(path);
  if (!j.is_array() || j.empty()) fail("{}: expected a non-empty JSON list of token-id lists", path);
  const size_t T = j[0].is_array() ? j[0].size() : 0;
  std::vector<int64_t> flat;
  for (size_t b = 0; b < j.size(); ++b) {
    const auto& row = j[b];
    if (!row.is_array() || row.empty()) fail("{}: entry {} must be a non-empty list of token ids", path, b);
    if (row.size() != T)
      fail("{}: entry {} has {} tokens but entry 0 has {}; all lists must have the same length", path, b, row.size(),
           T);
    for (size_t t = 0; t < row.size(); ++t) {
      if (!row[t].is_number()) fail("{}: entry {}, position {}: expected an integer token id", path, b, t);
      const int64_t id = json_int64(row[t], fmt::format("{}: entry {}, position {}: token id", path, b, t));
      if (id < 0 || id >= vocab)
        fail("{}: entry {}, position {}: token id {} outside the vocabulary [0, {})", path, b, t, id, vocab);
      flat.push_back(id);
    }
  }
  return at::tensor(flat, at::kLong).view({(int64_t)j.size(), (int64_t)T});
}

void write_logits(DecoderLM& model, const at::Tensor& tokens, const std::string& out) {
  torch::NoGradGuard ng;
  model->eval();
  auto logits = model->forward(tokens).to(at::kFloat);  // (B, T, V)
  io::save_safetensors(out, {{"logits", logits}}, {{"format", "pt"}});
}

}  // namespace drope::eval
