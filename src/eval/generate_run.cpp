// drope-eval generate: greedy continuations of prompts (KV cache, chunked prefill, batched decode) as JSONL.
#include <fmt/format.h>

#include "drope/core/error.h"
#include "drope/core/files.h"
#include "drope/core/log.h"
#include "drope/eval/generate.h"
#include "drope/eval/runners.h"
#include "drope/text/jsonl.h"

namespace drope::eval {

void run_generate(const GenerateRun& r) {
  std::vector<std::string> prompts = r.prompts;
  for (size_t i = 0; i < prompts.size(); ++i)
    if (prompts[i].size() > kMaxPromptBytes)
      fail("--prompt {}: {} bytes, more than the {} MiB a prompt may have", i + 1, prompts[i].size(),
           kMaxPromptBytes >> 20);
  if (!r.prompts_file.empty())
    text::for_each_jsonl_object(r.prompts_file, [&](int64_t line, const nlohmann::json& j) {
      prompts.push_back(text::jsonl_string(j, "prompt", r.prompts_file, line));
      if (prompts.back().size() > kMaxPromptBytes)
        fail("{}:{}: the prompt is {} bytes, more than the {} MiB a prompt may have", r.prompts_file, line,
             prompts.back().size(), kMaxPromptBytes >> 20);
      return true;
    });
  if (prompts.empty()) fail("give --prompt or --prompts");
  auto em = load_eval_model(r.method, true);
  auto gens = generate(em.model, *em.tokenizer, prompts, r.options, r.bos);
  std::string lines;
  for (size_t i = 0; i < gens.size(); ++i) {
    nlohmann::json j = {{"prompt", prompts[i]},
                        {"output", gens[i].text},
                        {"finish", gens[i].finish},
                        {"prompt_tokens", gens[i].prompt_tokens},
                        {"tokens", gens[i].tokens}};
    lines += j.dump() + "\n";
  }
  if (r.out.empty()) fmt::print("{}", lines);
  else write_file_atomic(r.out, lines), logging::info("wrote {} generations to {}", gens.size(), r.out);
}

}  // namespace drope::eval
