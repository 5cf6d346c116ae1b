// drope-generate MODEL_DIR: loads a model directory (ours, HF Llama/Qwen2/SmolLM3 or a GGUF file) and its
// tokenizer, drops its positional embeddings (DroPE, with QK-norm) and greedily continues a prompt, before and
// after the transform. A model straight after the drop has not been recalibrated, so its text shows what
// dropping does before training; a DroPE'd checkpoint gives the same tokens both times.
#include <cstdio>
#include <exception>
#include <string>

#include <torch/torch.h>

#include "drope/eval/generate.h"
#include "drope/io/model_io.h"
#include "drope/model/drope.h"
#include "drope/text/tokenizer.h"

namespace {

std::string continue_prompt(drope::DecoderLM& model, const drope::text::Tokenizer& tok, const std::string& prompt) {
  drope::eval::GenerateOptions opt;
  opt.max_new_tokens = 8;
  opt.stop_at_eos = false;
  const auto out = drope::eval::generate(model, tok, {prompt}, opt);
  std::string ids;
  for (const auto id : out.front().tokens) ids += (ids.empty() ? "" : " ") + std::to_string(id);
  return "[" + ids + "] " + out.front().text;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s MODEL_DIR\n", argv[0]);
    return 2;
  }
  try {
    torch::NoGradGuard no_grad;
    const std::string dir = argv[1];
    drope::DecoderLM model = drope::io::load_model(dir);
    const auto tok = drope::text::load_tokenizer(dir);
    const std::string prompt = "The quick brown fox";
    std::printf("as loaded:  %s\n", continue_prompt(model, *tok, prompt).c_str());
    drope::DropOptions drop;
    drop.qk_norm = drope::QkNorm::kQk;
    drope::DecoderLM dropped = drope::drop_positional(model, drop);
    std::printf("DroPE'd:    %s\n", continue_prompt(dropped, *tok, prompt).c_str());
    std::printf("parameters: %lld -> %lld\n", static_cast<long long>(model->num_parameters()),
                static_cast<long long>(dropped->num_parameters()));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
