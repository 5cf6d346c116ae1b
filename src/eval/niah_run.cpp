// drope-eval niah (RULER's NIAH tasks, string_match_all) and niah-grid (Kamradt-style length × depth grid
// with a heatmap), as library runs. Prompts come from drope_tasks (torch-free); a dump of the prompts needs
// only a tokenizer to size the contexts.
#include <algorithm>
#include <cstdio>
#include <functional>

#include <fmt/format.h>

#include "drope/core/error.h"
#include "drope/core/files.h"
#include "drope/core/log.h"
#include "drope/eval/generate.h"
#include "drope/eval/results.h"
#include "drope/eval/runners.h"
#include "drope/plot/plot.h"
#include "drope/tasks/niah.h"
#include "drope/tasks/report.h"

namespace drope::eval {

namespace {

void check_length(int64_t L) {
  if (L < 1 || L > kMaxEvalTokens) fail("--lengths: expected an integer in [1, {}], got {}", kMaxEvalTokens, L);
}

void check_common(const NiahRunCommon& c) {
  if (c.trials <= 0 || c.trials > (1 << 20))
    fail("--trials: must be a number of samples per cell in [1, 1048576], got {}", c.trials);
  if (c.batch <= 0 || c.batch > (1 << 16)) fail("--batch-size: must be in [1, 65536], got {}", c.batch);
  if (c.max_new_tokens <= 0 || c.max_new_tokens > kMaxEvalTokens)
    fail("--max-new-tokens: must be in [1, {}], got {}", kMaxEvalTokens, c.max_new_tokens);
  if (c.dump.empty() && c.method.model_dir.empty())
    fail("--model is required (only --dump-prompts runs without a model, given --tokenizer)");
  if (!c.dump.empty() && c.method.model_dir.empty() && c.method.tokenizer.empty())
    fail("--dump-prompts needs a tokenizer to size the prompts: pass --tokenizer (or --model)");
}

tasks::NiahOptions niah_options(const NiahRunCommon& c) {
  tasks::NiahOptions o;
  o.max_new_tokens = c.max_new_tokens;
  o.random_excerpt = c.haystack_start == "random";
  return o;
}

tasks::TokenCounter make_counter(const text::Tokenizer& tok, bool bos) {
  const int64_t extra = bos && tok.bos_id() >= 0 ? 1 : 0;
  return [&tok, extra](const std::string& s) { return static_cast<int64_t>(tok.encode(s).size()) + extra; };
}

std::string json_line(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

// Greedy generations for `prompts`, `batch` at a time, reporting progress per batch (unless `what` is empty).
std::vector<Generation> generate_all(DecoderLM& model, const text::Tokenizer& tok,
                                     const std::vector<std::string>& prompts, int64_t max_new_tokens, int64_t batch,
                                     bool bos, const std::string& what) {
  GenerateOptions g;
  g.max_new_tokens = max_new_tokens;
  g.batch_size = batch;
  std::vector<Generation> out;
  for (size_t b = 0; b < prompts.size(); b += static_cast<size_t>(batch)) {
    const size_t e = std::min(prompts.size(), b + static_cast<size_t>(batch));
    std::vector<std::string> chunk(prompts.begin() + static_cast<std::ptrdiff_t>(b),
                                   prompts.begin() + static_cast<std::ptrdiff_t>(e));
    for (auto& gen : generate(model, tok, chunk, g, bos)) out.push_back(std::move(gen));
    if (!what.empty()) logging::progress(fmt::format("  {}: {}/{}", what, e, prompts.size()));
  }
  return out;
}

std::vector<Generation> generate_all(EvalModel& em, const std::vector<std::string>& prompts, const NiahRunCommon& c,
                                     const std::string& what) {
  return generate_all(em.model, *em.tokenizer, prompts, c.max_new_tokens, c.batch, c.bos, what);
}

// --dump-prompts: sizes the prompts with the tokenizer alone (no model) and writes what `fill` appends,
// one jsonl line per prompt, atomically.
void dump_prompts(const NiahRunCommon& c, const std::function<void(const tasks::TokenCounter&, std::string&)>& fill) {
  auto tok = text::load_tokenizer(c.method.tokenizer.empty() ? c.method.model_dir : c.method.tokenizer);
  std::string content;
  fill(make_counter(*tok, c.bos), content);
  write_file_atomic(c.dump, content);
  logging::info("wrote {}", c.dump);
}

// The fields every result file of these commands starts with (how the run was set up).
nlohmann::json run_settings(const std::string& kind, const NiahRunCommon& c, const EvalModel& em,
                            const std::string& haystack) {
  nlohmann::json doc = new_results(kind);
  doc.update({{"method", em.describe()},
              {"trials", c.trials},
              {"seed", c.seed},
              {"haystack", haystack},
              {"haystack_start", c.haystack_start},
              {"max_new_tokens", c.max_new_tokens},
              {"bos", c.bos},
              {"metric", "string_match_all"}});
  return doc;
}

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0.0 : s / static_cast<double>(v.size());
}

std::string depth_label(double d) { return fmt::format("{:g}", d); }

// A RULER sample's fields that both its dumped prompt line and its scored line carry.
nlohmann::json niah_sample_json(const tasks::NiahSample& s) {
  return {{"task", s.task},
          {"length", s.length},
          {"trial", s.trial},
          {"seed", s.seed},
          {"prompt_tokens", s.prompt_tokens},
          {"haystack_units", s.haystack_units},
          {"depths", s.depths},
          {"positions", s.positions},
          {"queries", s.queries},
          {"expected", s.expected}};
}

// The same for a depth x length grid sample.
nlohmann::json kamradt_sample_json(const tasks::KamradtSample& s) {
  return {{"length", s.length},
          {"depth", s.depth},
          {"actual_depth", s.actual_depth},
          {"trial", s.trial},
          {"seed", s.seed},
          {"prompt_tokens", s.prompt_tokens},
          {"haystack_units", s.haystack_units},
          {"key", s.key},
          {"expected", nlohmann::json::array({s.value})}};
}

// The grid's table: one row per depth, one column per length, means last.
tasks::Table grid_table(const std::vector<double>& cell, const std::vector<double>& depths,
                        const std::vector<int64_t>& lengths, const std::string& title) {
  const auto rows = static_cast<int64_t>(depths.size()), cols = static_cast<int64_t>(lengths.size());
  tasks::Table table;
  table.title = title;
  table.columns = {"depth %"};
  for (int64_t L : lengths) table.columns.push_back(std::to_string(L));
  table.columns.push_back("mean");
  for (int64_t di = 0; di < rows; ++di) {
    std::vector<std::string> row = {depth_label(depths[di])};
    std::vector<double> r(cell.begin() + di * cols, cell.begin() + (di + 1) * cols);
    for (double v : r) row.push_back(tasks::fixed(v, 2));
    row.push_back(tasks::fixed(mean(r), 2));
    table.add_row(row);
  }
  std::vector<std::string> mean_row = {"mean"};
  for (int64_t li = 0; li < cols; ++li) {
    std::vector<double> col;
    for (int64_t di = 0; di < rows; ++di) col.push_back(cell[static_cast<size_t>(di * cols + li)]);
    mean_row.push_back(tasks::fixed(mean(col), 2));
  }
  mean_row.push_back(tasks::fixed(mean(cell), 2));
  table.add_row(mean_row);
  return table;
}

plot::Heatmap grid_heatmap(const std::vector<double>& cell, const std::vector<double>& depths,
                           const std::vector<int64_t>& lengths, const std::string& label) {
  plot::Heatmap map;
  map.title = fmt::format("Needle in a haystack — {}", label);
  map.xlabel = "context length (tokens)";
  map.ylabel = "needle depth (%)";
  map.colorbar_label = "score (%)";
  map.rows = static_cast<int64_t>(depths.size());
  map.cols = static_cast<int64_t>(lengths.size());
  map.values = cell;
  for (double d : depths) map.row_labels.push_back(depth_label(d));
  for (int64_t L : lengths) map.col_labels.push_back(std::to_string(L));
  map.v_min = 0;
  map.v_max = 100;
  return map;
}

// --dump: every prompt of the run (and its sample's fields) as JSON lines, without a model.
void dump_niah_prompts(const NiahRunCommon& c, const std::vector<tasks::NiahTask>& task_list,
                       const std::vector<int64_t>& lengths, const tasks::EssayText& essay,
                       const tasks::NiahOptions& nopt) {
  dump_prompts(c, [&](const tasks::TokenCounter& counter, std::string& content) {
    for (const auto& task : task_list)
      for (int64_t L : lengths) {
        int64_t hint = 0, max_tokens = 0;
        for (int64_t t = 0; t < c.trials; ++t) {
          const auto s = tasks::make_niah_sample(task, L, c.seed, t, essay, counter, nopt, &hint);
          max_tokens = std::max(max_tokens, s.prompt_tokens);
          auto j = niah_sample_json(s);
          j.update({{"essay_start", s.essay_start}, {"keys", s.keys}, {"needles", s.needles}, {"prompt", s.prompt}});
          content += json_line(j);
        }
        logging::info("niah_{} @ {}: {} prompts, at most {} prompt tokens (+{} generated)", task.name, L, c.trials,
                      max_tokens, c.max_new_tokens);
      }
  });
}

}  // namespace

NiahCell niah_cell(DecoderLM& model, const text::Tokenizer& tok, const tasks::NiahTask& task, int64_t length,
                   const tasks::EssayText& essay, const NiahCellOptions& o) {
  tasks::NiahOptions nopt;
  nopt.max_new_tokens = o.max_new_tokens;
  nopt.random_excerpt = o.random_excerpt;
  const auto counter = make_counter(tok, o.bos);
  NiahCell cell;
  std::vector<std::string> prompts;
  int64_t hint = 0;
  for (int64_t t = 0; t < o.trials; ++t) {
    cell.samples.push_back(tasks::make_niah_sample(task, length, o.seed, t, essay, counter, nopt, &hint));
    prompts.push_back(cell.samples.back().prompt);
  }
  cell.generations = generate_all(model, tok, prompts, o.max_new_tokens, o.batch, o.bos, o.progress);
  for (size_t i = 0; i < cell.samples.size(); ++i) {
    cell.outputs.push_back(tasks::niah_postprocess(cell.generations[i].text));
    cell.scores.push_back(tasks::string_match_all(cell.outputs.back(), cell.samples[i].expected));
  }
  cell.score = mean(cell.scores);
  return cell;
}

// ---- niah -------------------------------------------------------------------------------------------

void run_niah(const NiahRun& o) {
  const auto& c = o.c;
  // Everything cheap is validated before the model loads or any file is written.
  const auto task_list = tasks::parse_niah_tasks(o.tasks, "--tasks");
  const auto lengths = tasks::parse_int_list(c.lengths, "--lengths");
  for (int64_t L : lengths) check_length(L);
  check_common(c);
  const bool need_essay = std::any_of(task_list.begin(), task_list.end(),
                                      [](const tasks::NiahTask& t) { return t.haystack == tasks::Haystack::essay; });
  tasks::EssayText essay;  // a --haystack given explicitly is checked even when no task reads it
  if (need_essay || c.haystack != tasks::kDefaultHaystack) essay = tasks::load_essay(c.haystack, "--haystack");
  const auto nopt = niah_options(c);

  if (!c.dump.empty()) return dump_niah_prompts(c, task_list, lengths, essay, nopt);

  auto em = load_eval_model(c.method, true);
  const auto counter = make_counter(*em.tokenizer, c.bos);
  // A length too small for a task fails here, before any generation.
  for (const auto& task : task_list)
    for (int64_t L : lengths) tasks::make_niah_sample(task, L, c.seed, 0, essay, counter, nopt);

  std::string samples_jsonl;
  nlohmann::json results = nlohmann::json::array(), summary = nlohmann::json::object();
  tasks::Table table;
  table.title = fmt::format("NIAH (RULER string_match_all, %, {} trials) — {}", c.trials, em.label);
  table.columns = {"method", "task"};
  for (int64_t L : lengths) table.columns.push_back(std::to_string(L));
  table.columns.push_back("mean");
  std::vector<double> all_scores;
  std::vector<std::vector<double>> per_length(lengths.size());
  for (const auto& task : task_list) {
    std::vector<std::string> row = {em.label, task.name};
    std::vector<double> task_scores;
    for (size_t li = 0; li < lengths.size(); ++li) {
      const int64_t L = lengths[li];
      const std::string what = fmt::format("niah_{} @ {}", task.name, L);
      const NiahCell cell = niah_cell(em.model, *em.tokenizer, task, L, essay,
                                      {c.trials, c.seed, c.max_new_tokens, c.batch, c.bos, nopt.random_excerpt, what});
      double tokens = 0, units = 0;
      for (size_t i = 0; i < cell.samples.size(); ++i) {
        const auto& s = cell.samples[i];
        tokens += static_cast<double>(s.prompt_tokens);
        units += static_cast<double>(s.haystack_units);
        auto j = niah_sample_json(s);
        j.update({{"output", cell.outputs[i]}, {"finish", cell.generations[i].finish}, {"score", cell.scores[i]}});
        samples_jsonl += json_line(j);
      }
      const double score = cell.score;
      logging::info("{}  {}: {:.2f}  (mean prompt {:.0f} tokens)", em.label, what, score, tokens / c.trials);
      results.push_back({{"task", task.name},
                         {"length", L},
                         {"score", score},
                         {"trials", c.trials},
                         {"mean_prompt_tokens", tokens / c.trials},
                         {"mean_haystack_units", units / c.trials}});
      summary[fmt::format("{}@{}", task.name, L)] = score;
      row.push_back(tasks::fixed(score, 2));
      task_scores.push_back(score);
      per_length[li].push_back(score);
      all_scores.push_back(score);
    }
    row.push_back(tasks::fixed(mean(task_scores), 2));
    summary[task.name] = mean(task_scores);
    table.add_row(row);
  }
  if (task_list.size() > 1) {
    std::vector<std::string> row = {em.label, "mean"};
    for (const auto& v : per_length) row.push_back(tasks::fixed(mean(v), 2));
    row.push_back(tasks::fixed(mean(all_scores), 2));
    table.add_row(row);
  }
  summary["avg"] = mean(all_scores);
  std::vector<std::string> names;
  for (const auto& t : task_list) names.push_back(t.name);
  nlohmann::json doc = run_settings("niah", c, em, need_essay ? essay.source : "");
  doc["tasks"] = names;
  doc["lengths"] = lengths;
  doc["results"] = results;
  doc["summary"] = summary;
  write_file_atomic(c.out + ".samples.jsonl", samples_jsonl);
  for (const auto& p : write_results(c.out, doc, table)) logging::info("wrote {}", p);
  logging::info("wrote {}.samples.jsonl", c.out);
  fmt::print("{}", tasks::to_markdown(table));
}

// ---- niah-grid --------------------------------------------------------------------------------------

void run_niah_grid(const NiahGridRun& o) {
  const auto& c = o.c;
  const auto lengths = tasks::parse_int_list(c.lengths, "--lengths");
  for (int64_t L : lengths) check_length(L);
  const auto depths = tasks::parse_depth_list(o.depths, "--depths");
  check_common(c);
  const auto essay = tasks::load_essay(c.haystack, "--haystack");
  const auto nopt = niah_options(c);

  if (!c.dump.empty())
    return dump_prompts(c, [&](const tasks::TokenCounter& counter, std::string& content) {
      for (int64_t L : lengths) {
        int64_t hint = 0;
        for (double d : depths)
          for (int64_t t = 0; t < c.trials; ++t) {
            const auto s = tasks::make_kamradt_sample(L, d, c.seed, t, essay, counter, nopt, &hint);
            auto j = kamradt_sample_json(s);
            j.update({{"sentences_before", s.sentences_before},
                      {"essay_start", s.essay_start},
                      {"needle", s.needle},
                      {"prompt", s.prompt}});
            content += json_line(j);
          }
        logging::info("grid @ {}: {} prompts", L, depths.size() * static_cast<size_t>(c.trials));
      }
    });

  auto em = load_eval_model(c.method, true);
  const auto counter = make_counter(*em.tokenizer, c.bos);
  for (int64_t L : lengths) tasks::make_kamradt_sample(L, depths[0], c.seed, 0, essay, counter, nopt);

  const auto rows = static_cast<int64_t>(depths.size()), cols = static_cast<int64_t>(lengths.size());
  std::vector<double> cell(static_cast<size_t>(rows * cols), 0.0);
  std::string samples_jsonl;
  nlohmann::json results = nlohmann::json::array(), summary = nlohmann::json::object();
  for (int64_t li = 0; li < cols; ++li) {
    const int64_t L = lengths[li];
    int64_t hint = 0;
    std::vector<tasks::KamradtSample> samples;
    std::vector<std::string> prompts;
    for (double d : depths)
      for (int64_t t = 0; t < c.trials; ++t) {
        samples.push_back(tasks::make_kamradt_sample(L, d, c.seed, t, essay, counter, nopt, &hint));
        prompts.push_back(samples.back().prompt);
      }
    const auto gens = generate_all(em, prompts, c, fmt::format("grid @ {}", L));
    for (int64_t di = 0; di < rows; ++di) {
      std::vector<double> scores;
      double actual = 0;
      for (int64_t t = 0; t < c.trials; ++t) {
        const size_t i = static_cast<size_t>(di * c.trials + t);
        const auto& s = samples[i];
        const std::string output = tasks::niah_postprocess(gens[i].text);
        const double score = tasks::string_match_all(output, {s.value});
        scores.push_back(score);
        actual += s.actual_depth;
        auto j = kamradt_sample_json(s);
        j.update({{"output", output}, {"finish", gens[i].finish}, {"score", score}});
        samples_jsonl += json_line(j);
      }
      cell[static_cast<size_t>(di * cols + li)] = mean(scores);
      results.push_back({{"length", L},
                         {"depth", depths[di]},
                         {"score", mean(scores)},
                         {"trials", c.trials},
                         {"mean_actual_depth", actual / c.trials}});
    }
    std::vector<double> col;
    for (int64_t di = 0; di < rows; ++di) col.push_back(cell[static_cast<size_t>(di * cols + li)]);
    summary[fmt::format("grid@{}", L)] = mean(col);
    logging::info("{}  grid @ {}: {:.2f} (mean over {} depths)", em.label, L, mean(col), rows);
  }
  summary["avg"] = mean(cell);

  const auto table =
      grid_table(cell, depths, lengths,
                 fmt::format("Needle in a haystack, score % by depth × length ({} trials) — {}", c.trials, em.label));
  const auto map = grid_heatmap(cell, depths, lengths, em.label);

  nlohmann::json doc = run_settings("niah-grid", c, em, essay.source);
  doc["lengths"] = lengths;
  doc["depths"] = depths;
  doc["heatmap"] = {{"rows", "depth"}, {"cols", "length"}, {"values", cell}};
  doc["results"] = results;
  doc["summary"] = summary;
  // Plots first: a failed render leaves the previous tables in place as well.
  plot::save(map, c.out + ".png");
  plot::save(map, c.out + ".svg");
  write_file_atomic(c.out + ".samples.jsonl", samples_jsonl);
  for (const auto& p : write_results(c.out, doc, table)) logging::info("wrote {}", p);
  logging::info("wrote {0}.png, {0}.svg and {0}.samples.jsonl", c.out);
  fmt::print("{}", tasks::to_markdown(table));
}

}  // namespace drope::eval
