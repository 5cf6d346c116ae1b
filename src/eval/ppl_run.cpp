// drope-eval ppl (perplexity vs length, sliding or truncate protocol) and fit-temperature, as library runs.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include <fmt/format.h>

#include "drope/core/error.h"
#include "drope/core/files.h"
#include "drope/core/json.h"
#include "drope/core/log.h"
#include "drope/core/utf8.h"
#include "drope/eval/offset_key.h"
#include "drope/eval/results.h"
#include "drope/eval/runners.h"
#include "drope/plot/plot.h"
#include "drope/tasks/offset_key.h"
#include "drope/tasks/report.h"
#include "drope/text/jsonl.h"
#include "drope/text/shards.h"

namespace drope::eval {

namespace fs = std::filesystem;

namespace {

// Evaluation text: token-dataset splits (a directory with index.json), jsonl files (one document per
// line, field --text-key) or plain text files (one document each).
std::vector<std::string> jsonl_texts(const std::string& path, const std::string& key) {
  std::vector<std::string> docs;
  text::for_each_jsonl_object(path, [&](int64_t line, const nlohmann::json& j) {
    docs.push_back(text::jsonl_string(j, key, path, line));
    return true;
  });
  if (docs.empty()) fail("{}: no documents", path);
  return docs;
}

// Documents as token lists. A token dataset's split is cut at its EOS tokens.
std::vector<std::vector<int32_t>> load_documents(const EvalData& d, const EvalModel& em, int32_t& eos) {
  std::vector<std::vector<int32_t>> docs;
  eos = em.tokenizer ? em.tokenizer->eos_id() : -1;
  for (const auto& p : d.paths) {
    if (!fs::exists(p)) fail("--data {}: no such file or directory", p);
    if (fs::is_directory(p)) {
      auto index = text::read_index((fs::path(p) / "index.json").string());
      if (!index.splits.count(d.split)) fail("--data {}: the dataset has no split '{}'", p, d.split);
      auto stream = text::TokenStream::open(p, d.split);
      std::vector<int64_t> buf(size_t(stream->size()));
      stream->read(0, stream->size(), buf.data());
      const int32_t e = index.tokenizer.eos_id;
      const int64_t V = em.model->config().vocab_size;
      std::vector<int32_t> cur;
      for (auto t : buf) {
        if (t >= V) fail("--data {}: token id {} is outside the model's vocabulary ({})", p, t, V);
        cur.push_back(int32_t(t));
        if (int32_t(t) == e) docs.push_back(std::move(cur)), cur.clear();
      }
      if (!cur.empty()) docs.push_back(std::move(cur));
      eos = -1;  // the dataset's documents already end in EOS
      continue;
    }
    if (!em.tokenizer) fail("--data {}: text input needs a tokenizer (pass --tokenizer)", p);
    std::vector<std::string> texts;
    if (fs::path(p).extension() == ".jsonl") texts = jsonl_texts(p, d.text_key);
    else texts = {read_file(p)};
    for (const auto& t : texts) {
      if (utf8_error_offset(t) >= 0) fail("--data {}: invalid UTF-8 at byte {}", p, utf8_error_offset(t));
      docs.push_back(em.tokenizer->encode(t));
    }
  }
  return docs;
}

std::vector<int32_t> concat(const std::vector<std::vector<int32_t>>& docs, int32_t eos) {
  std::vector<int32_t> s;
  for (const auto& d : docs) {
    s.insert(s.end(), d.begin(), d.end());
    if (eos >= 0) s.push_back(eos);
  }
  return s;
}

}  // namespace

std::vector<int64_t> resolve_lengths(const std::vector<int64_t>& lengths, const std::vector<double>& mult,
                                     int64_t train_len) {
  if (!lengths.empty() && !mult.empty()) fail("give either --lengths or --multipliers, not both");
  std::vector<int64_t> out = lengths;
  for (double m : mult) {
    if (!(m > 0)) fail("--multipliers: each must be > 0, got {}", m);
    const double L = m * double(train_len);  // checked before the conversion, which cannot hold 1e300
    if (!(L <= double(kMaxEvalTokens)))
      fail("--multipliers: {} x the training length {} is {:.4g} tokens, more than the {} allowed", m, train_len, L,
           kMaxEvalTokens);
    const int64_t rounded = int64_t(std::llround(L));
    if (rounded < 2)
      fail("--multipliers: {} x the training length {} is {} tokens; a window needs at least 2", m, train_len, rounded);
    out.push_back(rounded);
  }
  if (out.empty()) fail("give --lengths or --multipliers");
  for (auto L : out) {
    if (L < 2) fail("--lengths: each must be >= 2, got {}", L);
    if (L > kMaxEvalTokens) fail("--lengths: each must be at most {} tokens, got {}", kMaxEvalTokens, L);
  }
  // A length listed twice would be evaluated twice and written as two identical rows.
  for (size_t i = 0; i < out.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (out[i] == out[j]) {
        if (mult.empty()) fail("--lengths: {} is listed twice", out[i]);
        fail("--multipliers: {} and {} both give {} tokens (x the training length {})", mult[j], mult[i], out[i],
             train_len);
      }
  return out;
}

namespace {

// Reads the curve of an earlier `ppl` result file (--with).
plot::Series read_curve(const std::string& path, int color) {
  const nlohmann::json j = read_results(path, "--with", "ppl");
  if (!j.contains("results")) fail("--with {}: a ppl results file without 'results'", path);
  plot::Series s;
  s.label = results_label(j, path);
  s.color = color;
  for (const auto& r : j["results"]) {
    if (!r.contains("length") || !r.contains("ppl") || !r["length"].is_number() || !r["ppl"].is_number())
      fail("--with {}: each result needs numbers 'length' and 'ppl'", path);
    s.x.push_back(r["length"].get<double>());
    s.y.push_back(r["ppl"].get<double>());
  }
  return s;
}

bool has_text_input(const EvalData& d) {
  for (const auto& p : d.paths)
    if (!fs::is_directory(p)) return true;
  return false;
}

}  // namespace

void run_ppl(const PplRun& r) {
  // Validate everything cheap before loading the model.
  std::vector<plot::Series> earlier;
  for (size_t i = 0; i < r.with.size(); ++i) earlier.push_back(read_curve(r.with[i], int(i) + 1));
  const bool text_input = has_text_input(r.data);
  auto em = load_eval_model(r.method, false);
  const auto lengths = resolve_lengths(r.lengths, r.multipliers, em.train_length);  // before the tokenizer is needed
  if (text_input) load_eval_tokenizer(em, r.method);
  int32_t eos = -1;
  const auto docs = load_documents(r.data, em, eos);
  const auto stream = concat(docs, eos);
  nlohmann::json results = nlohmann::json::array();
  tasks::Table table;
  table.title = fmt::format("Perplexity ({}) — {}", r.protocol.truncate ? "truncate" : "sliding window", em.label);
  table.columns = {"method", "length", "x train", "ppl", "windows", "tokens"};
  plot::Series cur;
  cur.label = em.label;
  cur.color = 0;
  for (auto L : lengths) {
    auto p = r.protocol;
    p.length = L;
    const auto res = p.truncate ? perplexity_truncate(em.model, docs, p) : perplexity_sliding(em.model, stream, p);
    logging::info("{}  L={}  ppl={:.4f}  ({} windows, {} tokens)", em.label, L, res.ppl, res.windows,
                  res.tokens_scored);
    results.push_back({{"length", L},
                       {"ppl", res.ppl},
                       {"mean_nll", res.mean_nll},
                       {"windows", res.windows},
                       {"tokens", res.tokens_scored}});
    table.add_row({em.label, std::to_string(L), tasks::fixed(double(L) / double(em.train_length), 2),
                   tasks::fixed(res.ppl, 3), std::to_string(res.windows), std::to_string(res.tokens_scored)});
    cur.x.push_back(double(L));
    cur.y.push_back(res.ppl);
  }
  nlohmann::json summary = nlohmann::json::object();
  for (const auto& x : results) summary[fmt::format("ppl@{}", x["length"].get<int64_t>())] = x["ppl"];
  nlohmann::json doc = new_results("ppl");
  doc.update({{"protocol", r.protocol.truncate ? "truncate" : "sliding"},
              {"stride", r.protocol.stride},
              {"method", em.describe()},
              {"data", r.data.paths},
              {"results", results},
              {"summary", summary}});
  plot::Figure fig;
  plot::Panel panel;
  panel.title = "Perplexity vs context length";
  panel.xlabel = "context length (tokens)";
  panel.ylabel = "perplexity";
  panel.log_y = true;
  panel.series = earlier;
  panel.series.push_back(cur);
  double lo = 1e300, hi = 0;  // the training-length line spans the curves' range
  for (const auto& c : panel.series)
    for (double y : c.y)
      if (std::isfinite(y) && y > 0) lo = std::min(lo, y), hi = std::max(hi, y);
  const double C = double(em.train_length);
  if (hi > 0) panel.series.push_back(plot::guide_line("train length", {C, C}, {lo, hi}));
  fig.panels.push_back(panel);
  // Plots first: a failed render leaves the previous tables in place as well.
  plot::save(fig, r.out + ".png");
  plot::save(fig, r.out + ".svg");
  for (const auto& p : write_results(r.out, doc, table)) logging::info("wrote {}", p);
  logging::info("wrote {}.png and {}.svg", r.out, r.out);
}

void run_fit_temperature(const TemperatureFitRun& r) {
  if (!(r.beta_max > 1.0)) fail("--beta-max must be > 1, got {}", r.beta_max);
  if (r.method.variant.set_temperature)
    fail("fit-temperature: --temperature cannot be combined (it is what is fitted)");
  const bool on_task = !r.task.empty();
  if (on_task == !r.data.paths.empty()) fail("fit-temperature: give exactly one of --data or --task");
  if (on_task && r.task != "offset-key") fail("--task: unknown task '{}' (expected offset-key)", r.task);
  if (on_task && (r.queries <= 0 || r.queries > kMaxQueries || r.batch <= 0 || r.batch > kMaxQueries))
    fail("fit-temperature: --queries and --batch-size must be in [1, {}], got {} and {}", kMaxQueries, r.queries,
         r.batch);
  const bool text_input = !on_task && has_text_input(r.data);
  auto em = load_eval_model(r.method, false);
  auto mult = r.multipliers;
  if (r.lengths.empty() && mult.empty()) mult = {2, 4};
  const auto lengths = resolve_lengths(r.lengths, mult, em.train_length);  // before the tokenizer is needed
  if (text_input) load_eval_tokenizer(em, r.method);
  TemperatureFit fit;
  if (on_task) {
    tasks::check_offset_key_vocab(em.model->config().vocab_size, "--model " + r.method.model_dir);
    for (auto L : lengths) tasks::check_offset_key_length(L, r.lengths.empty() ? "--multipliers" : "--lengths");
    const int64_t per_seq = tasks::OffsetKeyVocab::kColours, sequences = (r.queries + per_seq - 1) / per_seq;
    for (auto L : lengths)
      check_fits_in_memory(em.model->config(), L, L, std::min(r.batch, sequences),
                           fmt::format("fit-temperature at length {}", L));
    fit = fit_temperature_with(em.model, lengths, r.beta_max, [&](int64_t L) {
      return std::exp(offset_key_answer_nll(em.model, r.seed, L, sequences, r.batch));
    });
  } else {
    int32_t eos = -1;
    const auto stream = concat(load_documents(r.data, em, eos), eos);
    fit = fit_temperature(em.model, stream, lengths, r.protocol, r.beta_max);
  }
  nlohmann::json per = nlohmann::json::array();
  tasks::Table table;
  table.title = fmt::format("Attention temperature fit — {} (c = {:.4f})", em.label, fit.c);
  table.columns = {"length", "s", "best beta", "ppl at best", "ppl at beta=1"};
  for (size_t i = 0; i < fit.lengths.size(); ++i) {
    const double s = double(fit.lengths[i]) / double(em.train_length);
    logging::info("L={} (s={:.2f}): best β={:.4f} ppl {:.4f} (β=1: {:.4f})", fit.lengths[i], s, fit.best_beta[i],
                  fit.best_ppl[i], fit.base_ppl[i]);
    per.push_back({{"length", fit.lengths[i]},
                   {"s", s},
                   {"best_beta", fit.best_beta[i]},
                   {"best_ppl", fit.best_ppl[i]},
                   {"base_ppl", fit.base_ppl[i]},
                   {"grid_beta", fit.grid_beta[i]},
                   {"grid_ppl", fit.grid_ppl[i]}});
    table.add_row({std::to_string(fit.lengths[i]), tasks::fixed(s, 2), tasks::fixed(fit.best_beta[i], 4),
                   tasks::fixed(fit.best_ppl[i], 3), tasks::fixed(fit.base_ppl[i], 3)});
  }
  nlohmann::json doc = new_results("temperature");
  doc.update({{"c", fit.c},
              {"train_length", em.train_length},
              {"data", on_task ? r.task : "text"},
              {"method", em.describe()},
              {"fits", per},
              {"summary", {{"c", fit.c}}}});
  const std::string save = r.save.empty() ? temperature_file(r.method.model_dir) : r.save;
  write_file_atomic(save, doc.dump(2) + "\n");
  logging::info("fitted c = {:.4f} (β = 1 + c·ln s); saved to {}", fit.c, save);
  if (!r.out.empty()) {
    plot::Figure fig;
    plot::Panel panel;
    panel.title = fmt::format("Held-out perplexity vs attention scale β (c = {:.3f})", fit.c);
    panel.xlabel = "β";
    panel.ylabel = "perplexity";
    panel.log_y = true;
    for (size_t i = 0; i < fit.lengths.size(); ++i) {
      plot::Series s;
      s.label = fmt::format("L = {}", fit.lengths[i]);
      s.x = fit.grid_beta[i];
      s.y = fit.grid_ppl[i];
      panel.series.push_back(s);
    }
    fig.panels.push_back(panel);
    plot::save(fig, r.out + ".png");
    plot::save(fig, r.out + ".svg");
    for (const auto& p : write_results(r.out, doc, table)) logging::info("wrote {}", p);
  }
}

}  // namespace drope::eval
