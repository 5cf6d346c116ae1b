// Flags of `drope-eval generate` (eval::run_generate).
#include "eval/common.h"

namespace drope::evalcli {

void add_generate_command(CLI::App& cli, int& rc) {
  auto o = std::make_shared<MethodRun<eval::GenerateRun>>();
  auto* cmd = cli.add_subcommand("generate", "Greedy generation for prompts (text in, JSONL out)");
  add_method_options(cmd, o->m);
  cmd->add_option("--prompt", o->run.prompts, "A prompt (repeatable)");
  cmd->add_option("--prompts", o->run.prompts_file, "JSONL file with one {\"prompt\": ...} per line");
  cmd->add_option("--max-new-tokens", o->run.options.max_new_tokens, "Tokens to generate at most (default 128)");
  cmd->add_option("--stop", o->run.options.stop, "Stop sequence (repeatable)");
  cmd->add_option("--batch-size", o->run.options.batch_size, "Prompts decoded together (default 1)");
  cmd->add_option("--prefill-chunk", o->run.options.prefill_chunk, "Prompt tokens per prefill forward (default 2048)");
  cmd->add_flag("--bos", o->run.bos, "Prepend the tokenizer's BOS token");
  cmd->add_option("--out", o->run.out, "Write generations as JSONL here (default: print)");
  on_run(cmd, o, rc, &eval::run_generate);
}

}  // namespace drope::evalcli
