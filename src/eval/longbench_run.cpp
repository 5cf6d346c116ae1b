// drope-eval longbench: LongBench v1 / LongBench-E predictions as pred.py makes them (prompt per dataset,
// middle truncation, chat-template exceptions, greedy decoding) and scores as eval.py; longbench-score: eval.py
// on a directory of prediction files. Library runs.
#include <filesystem>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "drope/core/error.h"
#include "drope/core/files.h"
#include "drope/core/log.h"
#include "drope/eval/generate.h"
#include "drope/eval/results.h"
#include "drope/eval/runners.h"
#include "drope/tasks/longbench.h"

namespace drope::eval {

namespace fs = std::filesystem;
namespace lb = tasks::longbench;

namespace {

std::string data_file(const std::string& dir, const lb::Dataset& ds, bool e) {
  return (fs::path(dir) / (ds.name + (e ? "_e" : "") + ".jsonl")).string();
}

// The results document: LongBench's own fields (tasks, average, official = eval.py's result.json) with the
// schema keys, per-task results and a summary of scores (per bucket for LongBench-E) for compare.
void print_and_write(const std::string& prefix, const std::vector<lb::TaskResult>& results, bool e,
                     const std::string& title, const nlohmann::json& method) {
  auto table = lb::results_table(results, e, title);
  nlohmann::json doc = new_results(e ? "longbench_e" : "longbench");
  doc.update(lb::results_json(results, e, method));
  nlohmann::json rows = nlohmann::json::array(), summary = nlohmann::json::object();
  for (const auto& [task, t] : doc["tasks"].items()) {
    nlohmann::json row = t;
    row["task"] = task;
    rows.push_back(row);
    if (t["score"].is_number()) summary[task] = t["score"];
  }
  if (doc["average"]["score"].is_number()) summary["avg"] = doc["average"]["score"];
  doc["results"] = rows;
  doc["summary"] = summary;
  auto paths = write_results(prefix, doc, table);
  fmt::print("{}\n", tasks::to_markdown(table));
  logging::info("wrote {}", fmt::join(paths, ", "));
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

void run_longbench(const LongBenchRun& r) {
  if (r.limit < 0) fail("--limit must be >= 0, got {}", r.limit);
  // The middle truncation keeps max_length / 2 tokens of each end: 1 would keep nothing.
  if (r.max_length < 0 || r.max_length == 1)
    fail("--max-length must be 0 (the model's context less 500 generated tokens) or at least 2 (the middle "
         "truncation keeps half of it from each end of a prompt), got {}",
         r.max_length);
  const auto tasks = lb::parse_tasks(r.tasks, r.e);
  if (!r.chat_format.empty()) {  // validated before any work: a template without {prompt} drops every prompt
    std::string probe;
    try {
      probe = lb::format_prompt(r.chat_format, {{"prompt", "\x01"}});
    } catch (const Error& e) {
      fail("--chat-format: {} (the one field is {{prompt}})", e.what());
    }
    if (probe.find('\x01') == std::string::npos)
      fail("--chat-format '{}': has no {{prompt}} field, so every prompt would be the template alone", r.chat_format);
  }
  // Validate every data file before loading the model, so a bad file costs no generation time. A prompt is
  // tokenised whole before the middle truncation: one above kMaxPromptBytes is refused here.
  for (const auto* ds : tasks) {
    const std::string path = data_file(r.data, *ds, r.e);
    for (const auto& s : lb::read_samples(path, *ds, r.limit))
      if (const size_t n = lb::build_prompt(*ds, s).size(); n > kMaxPromptBytes)
        fail("{}:{}: the prompt is {} bytes, more than the {} MiB a prompt may have (it is tokenised whole for "
             "the middle truncation)",
             path, s.line, n, kMaxPromptBytes >> 20);
  }
  const std::string prefix = r.out.empty() ? (r.e ? "longbench_e" : "longbench") : r.out;
  const std::string pred_dir = prefix + "-pred";

  auto em = load_eval_model(r.method, /*need_tokenizer=*/true);
  const auto& tok = *em.tokenizer;
  if (r.bos && tok.bos_id() < 0) fail("--bos: the tokenizer {} has no BOS token", tok.path());
  int64_t max_length = r.max_length;
  if (max_length == 0) {
    const double scale = r.method.variant.scaling != RopeScalingType::kNone ? r.method.variant.factor : 1.0;
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
    const std::string path = data_file(r.data, *ds, r.e);
    const auto samples = lb::read_samples(path, *ds, r.limit);
    std::vector<std::vector<int32_t>> prompts;
    int64_t truncated = 0;
    for (const auto& s : samples) {
      auto p = prompt_tokens(tok, *ds, s, max_length, r.bos, r.chat_format);
      if (p.ids.size() <= (r.bos ? 1u : 0u))
        fail("--max-length {}: the prompt of {}:{} is empty after the middle truncation to {} tokens; give a "
             "larger --max-length",
             r.max_length, path, s.line, max_length);
      truncated += p.truncated ? 1 : 0;
      prompts.push_back(std::move(p.ids));
    }
    GenerateOptions g;
    g.max_new_tokens = ds->max_new_tokens;
    g.batch_size = r.batch_size;
    g.prefill_chunk = r.prefill_chunk;
    StopCheck stop;
    // HF's min_length=context+1 keeps the first token from ending samsum; a leading newline is
    // therefore not a stop here (we cannot mask logits through generate_tokens).
    if (ds->name == "samsum" && newline >= 0)
      stop = [newline](size_t, const std::vector<int32_t>& t) { return t.size() > 1 && t.back() == newline; };
    auto gens = generate_tokens(em.model, prompts, g, tok.eos_id(), stop);
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
    results.push_back(lb::score_task(*ds, preds, r.e));
    logging::info("{}: {} samples ({} truncated), score {:.2f} → {}", ds->name, samples.size(), truncated,
                  results.back().score, pred_path);
  }
  nlohmann::json method = em.describe();
  method["max_length"] = max_length;
  method["limit"] = r.limit;
  method["bos"] = r.bos;
  method["chat_format"] = r.chat_format;
  print_and_write(prefix, results, r.e, fmt::format("{} ({})", r.e ? "LongBench-E" : "LongBench", em.label), method);
}

void run_longbench_score(const LongBenchScoreRun& r) {
  if (!fs::is_directory(r.pred)) fail("--pred {}: not a directory", r.pred);
  // eval.py: every file whose name ends in "jsonl"; the dataset is the name up to the first '.'.
  std::set<std::string> files;
  for (const auto& entry : fs::directory_iterator(r.pred)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_regular_file() && name.size() >= 5 && name.compare(name.size() - 5, 5, "jsonl") == 0)
      files.insert(name);
  }
  if (files.empty()) fail("--pred {}: no .jsonl prediction files", r.pred);
  std::vector<lb::TaskResult> results;
  for (const auto& name : files) {
    const std::string path = (fs::path(r.pred) / name).string();
    const std::string task = name.substr(0, name.find('.'));
    const lb::Dataset* ds = nullptr;
    for (const auto& d : lb::datasets())
      if (d.name == task) ds = &d;
    if (!ds) fail("{}: '{}' is not a LongBench task (files are named <task>.jsonl)", path, task);
    try {
      results.push_back(lb::score_task(*ds, lb::read_predictions(path, r.e), r.e));
    } catch (const Error& e) {
      const std::string msg = e.what();
      if (msg.rfind(path, 0) == 0) throw;
      fail("{}: {}", path, msg);  // metric errors name the file too
    }
  }
  const std::string prefix = r.out.empty() ? (fs::path(r.pred) / "result").string() : r.out;
  print_and_write(prefix, results, r.e, r.e ? "LongBench-E" : "LongBench", nullptr);
}

}  // namespace drope::eval
