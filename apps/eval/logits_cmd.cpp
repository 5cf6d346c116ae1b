// `drope-eval logits`: logits of a model on token lists (JSON) → safetensors.
#include <fmt/format.h>

#include "app_common.h"
#include "drope/core/log.h"
#include "drope/eval/logits.h"
#include "drope/io/model_io.h"
#include "eval/common.h"

namespace drope::evalcli {

void add_logits_command(CLI::App& cli, int& rc) {
  struct Opts {
    std::string model_dir, tokens, out;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = cli.add_subcommand("logits", "Logits of a model on token lists (JSON) → safetensors");
  cmd->add_option("--model", o->model_dir, "Model directory (HF or drope)")->required();
  cmd->add_option("--tokens", o->tokens, "JSON list of equally long token-id lists")->required();
  cmd->add_option("--out", o->out, "Output .safetensors with 'logits' float32 [batch, seq, vocab]")->required();
  cmd->callback([o, &rc] {
    rc = app::run([&] {
      const DirLock lock = claim_output(o->out, {o->out}, {{"--model", o->model_dir}, {"--tokens", o->tokens}});
      auto model = io::load_model(o->model_dir);
      auto batch = eval::read_token_batch(o->tokens, model->config().vocab_size);
      eval::write_logits(model, batch, o->out);
      logging::info("wrote logits {}x{}x{} to {}", batch.size(0), batch.size(1), model->config().vocab_size, o->out);
      return 0;
    });
  });
}

}  // namespace drope::evalcli
