// Flags of `drope-eval longbench` and `drope-eval longbench-score` (eval::run_longbench,
// eval::run_longbench_score).
#include <filesystem>

#include "eval/common.h"

namespace drope::evalcli {

void add_longbench_commands(CLI::App& cli, int& rc) {
  auto o = std::make_shared<MethodRun<eval::LongBenchRun>>();
  auto* cmd = cli.add_subcommand("longbench", "LongBench v1 / LongBench-E: generate predictions and score them");
  add_method_options(cmd, o->m);
  cmd->add_option("--data", o->run.data, "Directory with <task>.jsonl (LongBench-E: <task>_e.jsonl)")->required();
  cmd->add_option("--tasks", o->run.tasks, "Comma-separated tasks or 'all' (default)");
  cmd->add_flag("--e", o->run.e, "LongBench-E: the 13 tasks' _e files, scores per length bucket (0-4k, 4-8k, 8k+)");
  cmd->add_option("--max-length", o->run.max_length,
                  "Prompt tokens kept (middle truncation); default: context length - 500, as LongBench's "
                  "model2maxlen (3500 for 4k models)");
  cmd->add_option("--limit", o->run.limit, "Only the first N samples of each task");
  cmd->add_option("--out", o->run.out,
                  "Output prefix: <out>.json/.csv/.md tables, predictions in <out>-pred/<task>.jsonl "
                  "(default longbench or longbench_e)");
  cmd->add_option("--batch-size", o->run.batch_size, "Prompts decoded together (default 1)");
  cmd->add_option("--prefill-chunk", o->run.prefill_chunk, "Prompt tokens per prefill forward (default 2048)");
  cmd->add_flag("--bos", o->run.bos, "Prepend the tokenizer's BOS token (as HF tokenizers of Llama models do)");
  cmd->add_option("--chat-format", o->run.chat_format,
                  "Chat prompt with a {prompt} field for the tasks that take one, e.g. '[INST]{prompt}[/INST]' "
                  "(default: none, the raw prompt)");
  on_run(cmd, o, rc, &eval::run_longbench);

  auto s = std::make_shared<eval::LongBenchScoreRun>();
  auto* score = cli.add_subcommand("longbench-score", "Score LongBench prediction files like the official eval.py");
  score
      ->add_option("--pred", s->pred, "Directory of <task>.jsonl prediction files (pred, answers, all_classes, length)")
      ->required();
  score->add_flag("--e", s->e, "LongBench-E: scores per length bucket (needs 'length')");
  score->add_option("--out", s->out, "Output prefix for .json/.csv/.md (default <pred>/result)");
  score->callback([s, &rc] {
    rc = app::run([&] {
      // The default output lies in --pred beside the predictions, so the inputs are the prediction files.
      if (s->out.empty()) s->out = (std::filesystem::path(s->pred) / "result").string();
      Inputs in;
      std::error_code ec;
      for (const auto& e : std::filesystem::directory_iterator(s->pred, ec)) {
        const std::string name = e.path().filename().string();
        if (name.size() >= 5 && name.compare(name.size() - 5, 5, "jsonl") == 0)
          in.emplace_back("--pred", e.path().string());
      }
      const DirLock lock = claim_output(s->out, prefix_outputs(s->out), in);
      return eval::run_longbench_score(*s), 0;
    });
  });
}

}  // namespace drope::evalcli
