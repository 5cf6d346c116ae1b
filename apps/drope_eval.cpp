// drope-eval: evaluation tools. `logits` runs a model on token lists and writes the logits.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "app_common.h"
#include "drope/eval/logits.h"
#include "drope/io/model_io.h"

int main(int argc, char** argv) {
  CLI::App cli{"drope-eval: evaluate drope and HF models"};
  cli.require_subcommand(1);
  std::string model_dir, tokens, out;
  auto* logits = cli.add_subcommand("logits", "Logits of a model on token lists (JSON) → safetensors");
  logits->add_option("--model", model_dir, "Model directory (HF or drope)")->required();
  logits->add_option("--tokens", tokens, "JSON list of equally long token-id lists")->required();
  logits->add_option("--out", out, "Output .safetensors with 'logits' float32 [batch, seq, vocab]")->required();
  CLI11_PARSE(cli, argc, argv);
  return drope::app::run([&] {
    auto model = drope::io::load_model(model_dir);
    auto batch = drope::eval::read_token_batch(tokens, model->config().vocab_size);
    drope::eval::write_logits(model, batch, out);
    fmt::print("wrote logits {}x{}x{} to {}\n", batch.size(0), batch.size(1), model->config().vocab_size, out);
    return 0;
  });
}
