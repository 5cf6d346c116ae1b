// `drope-eval generate`: greedy continuation of prompts (KV cache, chunked prefill, batched decode).
#include <fmt/format.h>

#include "app_common.h"
#include "drope/core/error.h"
#include "drope/core/files.h"
#include "drope/eval/generate.h"
#include "drope/text/jsonl.h"
#include "eval/common.h"

namespace drope::evalcli {

void add_generate_command(CLI::App& cli, int& rc) {
  struct Opts {
    MethodOptions m;
    std::vector<std::string> prompt;
    std::string prompts_file, out;
    eval::GenerateOptions g;
    bool bos = false;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = cli.add_subcommand("generate", "Greedy generation for prompts (text in, JSONL out)");
  add_method_options(cmd, o->m);
  cmd->add_option("--prompt", o->prompt, "A prompt (repeatable)");
  cmd->add_option("--prompts", o->prompts_file, "JSONL file with one {\"prompt\": ...} per line");
  cmd->add_option("--max-new-tokens", o->g.max_new_tokens, "Tokens to generate at most (default 128)");
  cmd->add_option("--stop", o->g.stop, "Stop sequence (repeatable)");
  cmd->add_option("--batch-size", o->g.batch_size, "Prompts decoded together (default 1)");
  cmd->add_option("--prefill-chunk", o->g.prefill_chunk, "Prompt tokens per prefill forward (default 2048)");
  cmd->add_flag("--bos", o->bos, "Prepend the tokenizer's BOS token");
  cmd->add_option("--out", o->out, "Write generations as JSONL here (default: print)");
  cmd->callback([o, &rc] {
    rc = app::run([&] {
      std::vector<std::string> prompts = o->prompt;
      if (!o->prompts_file.empty())
        text::for_each_jsonl_object(o->prompts_file, [&](int64_t line, const nlohmann::json& j) {
          prompts.push_back(text::jsonl_string(j, "prompt", o->prompts_file, line));
          return true;
        });
      if (prompts.empty()) fail("give --prompt or --prompts");
      auto em = load_eval_model(o->m, true);
      auto gens = eval::generate(em.model, *em.tokenizer, prompts, o->g, o->bos);
      std::string lines;
      for (size_t i = 0; i < gens.size(); ++i) {
        nlohmann::json j = {{"prompt", prompts[i]}, {"output", gens[i].text}, {"finish", gens[i].finish},
                            {"prompt_tokens", gens[i].prompt_tokens}, {"tokens", gens[i].tokens}};
        lines += j.dump() + "\n";
      }
      if (o->out.empty())
        fmt::print("{}", lines);
      else
        write_file_atomic(o->out, lines), fmt::print("wrote {} generations to {}\n", gens.size(), o->out);
      return 0;
    });
  });
}

}  // namespace drope::evalcli
