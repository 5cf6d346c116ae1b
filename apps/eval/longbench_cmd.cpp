// `drope-eval longbench`: LongBench v1 / LongBench-E predictions as pred.py makes them (prompt per
// dataset, middle truncation, chat-template exceptions, greedy decoding) and scores as eval.py.
// `drope-eval longbench-score`: eval.py on a directory of prediction files.
#include <filesystem>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "app_common.h"
#include "drope/core/error.h"
#include "drope/core/files.h"
#include "drope/eval/generate.h"
#include "drope/tasks/longbench.h"
#include "eval/common.h"

namespace drope::evalcli {

namespace fs = std::filesystem;
namespace lb = tasks::longbench;

namespace {

std::string data_file(const std::string& dir, const lb::Dataset& ds, bool e) {
  return (fs::path(dir) / (ds.name + (e ? "_e" : "") + ".jsonl")).string();
}

void print_and_write(const std::string& prefix, const std::vector<lb::TaskResult>& results, bool e,
                     const std::string& title, const nlohmann::json& method) {
  auto table = lb::results_table(results, e, title);
  auto paths = tasks::write_results(prefix, lb::results_json(results, e, method), table);
  fmt::print("{}\nwrote {}\n", tasks::to_markdown(table), fmt::join(paths, ", "));
}

// pred.py's prompt for one sample: middle truncation of the tokenized prompt (halves decoded without
// special tokens and concatenated), then the chat prompt for datasets that take one.
struct PromptTokens {
  std::vector<int32_t> ids;
  bool truncated = false;
};
PromptTokens prompt_tokens(const text::Tokenizer& tok, const lb::Dataset& ds, const lb::Sample& s, int64_t max_length,
                           bool bos, const std::string& chat_format) {
  auto encode = [&](const std::string& text) {
    std::vector<int32_t> ids;
    if (bos) ids.push_back(tok.bos_id());
    auto body = tok.encode(text);
    ids.insert(ids.end(), body.begin(), body.end());
    return ids;
  };
  std::string prompt = lb::build_prompt(ds, s);
  auto cut = lb::truncate_middle(encode(prompt), max_length);
  if (cut.truncated) prompt = tok.decode(cut.head, true) + tok.decode(cut.tail, true);
  const bool chat = !chat_format.empty() && ds.chat_template;
  if (chat) prompt = lb::format_prompt(chat_format, {{"prompt", prompt}});
  // Untouched prompts keep their tokens; changed text is tokenized again, as pred.py does.
  return {cut.truncated || chat ? encode(prompt) : std::move(cut.head), cut.truncated};
}

}  // namespace

void add_longbench_commands(CLI::App& cli, int& rc) {
  struct Opts {
    MethodOptions m;
    std::string data, tasks = "all", out, chat_format;
    bool e = false, bos = false;
    int64_t max_length = 0, limit = 0, batch_size = 1, prefill_chunk = 2048;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = cli.add_subcommand("longbench", "LongBench v1 / LongBench-E: generate predictions and score them");
  add_method_options(cmd, o->m);
  cmd->add_option("--data", o->data, "Directory with <task>.jsonl (LongBench-E: <task>_e.jsonl)")->required();
  cmd->add_option("--tasks", o->tasks, "Comma-separated tasks or 'all' (default)");
  cmd->add_flag("--e", o->e, "LongBench-E: the 13 tasks' _e files, scores per length bucket (0-4k, 4-8k, 8k+)");
  cmd->add_option("--max-length", o->max_length,
                  "Prompt tokens kept (middle truncation); default: context length - 500, as LongBench's "
                  "model2maxlen (3500 for 4k models)");
  cmd->add_option("--limit", o->limit, "Only the first N samples of each task");
  cmd->add_option("--out", o->out,
                  "Output prefix: <out>.json/.csv/.md tables, predictions in <out>-pred/<task>.jsonl "
                  "(default longbench or longbench_e)");
  cmd->add_option("--batch-size", o->batch_size, "Prompts decoded together (default 1)");
  cmd->add_option("--prefill-chunk", o->prefill_chunk, "Prompt tokens per prefill forward (default 2048)");
  cmd->add_flag("--bos", o->bos, "Prepend the tokenizer's BOS token (as HF tokenizers of Llama models do)");
  cmd->add_option("--chat-format", o->chat_format,
                  "Chat prompt with a {prompt} field for the tasks that take one, e.g. '[INST]{prompt}[/INST]' "
                  "(default: none, the raw prompt)");
  cmd->callback([o, &rc] {
    rc = app::run([&] {
      if (o->limit < 0) fail("--limit must be >= 0, got {}", o->limit);
      if (o->max_length < 0) fail("--max-length must be > 0, got {}", o->max_length);
      const auto tasks = lb::parse_tasks(o->tasks, o->e);
      if (!o->chat_format.empty()) lb::format_prompt(o->chat_format, {{"prompt", ""}});  // validate early
      // Validate every data file before loading the model, so a bad file costs no generation time.
      for (const auto* ds : tasks) lb::read_samples(data_file(o->data, *ds, o->e), *ds, o->limit);
      const std::string prefix = o->out.empty() ? (o->e ? "longbench_e" : "longbench") : o->out;
      const std::string pred_dir = prefix + "-pred";

      auto em = load_eval_model(o->m, /*need_tokenizer=*/true);
      const auto& tok = *em.tokenizer;
      if (o->bos && tok.bos_id() < 0) fail("--bos: the tokenizer {} has no BOS token", tok.path());
      int64_t max_length = o->max_length;
      if (max_length == 0) {
        const double scale = o->m.rope_scaling != "none" ? o->m.factor : 1.0;
        max_length = static_cast<int64_t>(static_cast<double>(em.train_length) * scale) - 500;
        if (max_length <= 0)
          fail("the model's context ({} tokens) leaves no room for prompts after 500 generated tokens; give "
               "--max-length",
               em.train_length);
      }
      // pred.py ends samsum generations at a newline token too (its prompts invite endless dialogue).
      const auto nl_ids = tok.encode("\n");
      const int32_t newline = nl_ids.empty() ? -1 : nl_ids.back();

      std::vector<lb::TaskResult> results;
      for (const auto* ds : tasks) {
        const std::string path = data_file(o->data, *ds, o->e);
        const auto samples = lb::read_samples(path, *ds, o->limit);
        std::vector<std::vector<int32_t>> prompts;
        int64_t truncated = 0;
        for (const auto& s : samples) {
          auto p = prompt_tokens(tok, *ds, s, max_length, o->bos, o->chat_format);
          truncated += p.truncated ? 1 : 0;
          prompts.push_back(std::move(p.ids));
        }
        eval::GenerateOptions g;
        g.max_new_tokens = ds->max_new_tokens;
        g.batch_size = o->batch_size;
        g.prefill_chunk = o->prefill_chunk;
        eval::StopCheck stop;
        // HF's min_length=context+1 keeps the first token from ending samsum; a leading newline is
        // therefore not a stop here (we cannot mask logits through generate_tokens).
        if (ds->name == "samsum" && newline >= 0)
          stop = [newline](size_t, const std::vector<int32_t>& t) { return t.size() > 1 && t.back() == newline; };
        auto gens = eval::generate_tokens(em.model, prompts, g, tok.eos_id(), stop);
        std::string lines;
        std::vector<lb::Prediction> preds;
        for (size_t i = 0; i < samples.size(); ++i) {
          std::string pred = tok.decode(gens[i].tokens, /*skip_special=*/true);
          lines += lb::prediction_line(samples[i], pred);
          lb::Prediction p;
          p.line = static_cast<int64_t>(i) + 1;
          p.pred = std::move(pred);
          p.answers = samples[i].answers;
          p.all_classes = samples[i].all_classes;
          p.length = samples[i].length;
          preds.push_back(std::move(p));
        }
        const std::string pred_path = (fs::path(pred_dir) / (ds->name + ".jsonl")).string();
        fs::create_directories(pred_dir);
        write_file_atomic(pred_path, lines);
        results.push_back(lb::score_task(*ds, preds, o->e));
        fmt::print("{}: {} samples ({} truncated), score {:.2f} → {}\n", ds->name,
                   samples.size(), truncated, results.back().score, pred_path);
      }
      nlohmann::json method = em.describe();
      method["max_length"] = max_length;
      method["limit"] = o->limit;
      method["bos"] = o->bos;
      method["chat_format"] = o->chat_format;
      print_and_write(prefix, results, o->e, fmt::format("{} ({})", o->e ? "LongBench-E" : "LongBench", em.label),
                      method);
      return 0;
    });
  });

  struct ScoreOpts {
    std::string pred, out;
    bool e = false;
  };
  auto s = std::make_shared<ScoreOpts>();
  auto* score = cli.add_subcommand("longbench-score", "Score LongBench prediction files like the official eval.py");
  score->add_option("--pred", s->pred, "Directory of <task>.jsonl prediction files (pred, answers, all_classes, length)")
      ->required();
  score->add_flag("--e", s->e, "LongBench-E: scores per length bucket (needs 'length')");
  score->add_option("--out", s->out, "Output prefix for .json/.csv/.md (default <pred>/result)");
  score->callback([s, &rc] {
    rc = app::run([&] {
      if (!fs::is_directory(s->pred)) fail("--pred {}: not a directory", s->pred);
      // eval.py: every file whose name ends in "jsonl"; the dataset is the name up to the first '.'.
      std::set<std::string> files;
      for (const auto& entry : fs::directory_iterator(s->pred)) {
        const std::string name = entry.path().filename().string();
        if (entry.is_regular_file() && name.size() >= 5 && name.compare(name.size() - 5, 5, "jsonl") == 0)
          files.insert(name);
      }
      if (files.empty()) fail("--pred {}: no .jsonl prediction files", s->pred);
      std::vector<lb::TaskResult> results;
      for (const auto& name : files) {
        const std::string path = (fs::path(s->pred) / name).string();
        const std::string task = name.substr(0, name.find('.'));
        const lb::Dataset* ds = nullptr;
        for (const auto& d : lb::datasets())
          if (d.name == task) ds = &d;
        if (!ds) fail("{}: '{}' is not a LongBench task (files are named <task>.jsonl)", path, task);
        try {
          results.push_back(lb::score_task(*ds, lb::read_predictions(path, s->e), s->e));
        } catch (const Error& e) {
          const std::string msg = e.what();
          if (msg.rfind(path, 0) == 0) throw;
          fail("{}: {}", path, msg);  // metric errors name the file too
        }
      }
      const std::string prefix = s->out.empty() ? (fs::path(s->pred) / "result").string() : s->out;
      print_and_write(prefix, results, s->e, s->e ? "LongBench-E" : "LongBench", nullptr);
      return 0;
    });
  });
}

}  // namespace drope::evalcli
