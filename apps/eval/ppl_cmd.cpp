// `drope-eval ppl` (perplexity vs length, sliding or truncate protocol) and `drope-eval fit-temperature`.
#include <cmath>
#include <filesystem>

#include <fmt/format.h>

#include "app_common.h"
#include "drope/core/error.h"
#include "drope/core/files.h"
#include "drope/core/json.h"
#include "drope/eval/perplexity.h"
#include "drope/plot/plot.h"
#include "drope/tasks/report.h"
#include "drope/text/jsonl.h"
#include "drope/text/shards.h"
#include "cli_numbers.h"
#include "eval/common.h"

namespace drope::evalcli {

namespace fs = std::filesystem;

namespace {

// Evaluation text: token-dataset splits (a directory with index.json), jsonl files (one document per
// line, field --text-key) or plain text files (one document each).
struct DataOptions {
  std::vector<std::string> paths;
  std::string split = "val";
  std::string text_key = "text";
};

void add_data_options(CLI::App* cmd, DataOptions& d) {
  cmd->add_option("--data", d.paths, "Token dataset dir (index.json), .jsonl or text files")->required();
  cmd->add_option("--split", d.split, "Split of a token dataset (default val)");
  cmd->add_option("--text-key", d.text_key, "Field holding the text in .jsonl files (default text)");
}

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
std::vector<std::vector<int32_t>> load_documents(const DataOptions& d, const EvalModel& em, int32_t& eos) {
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
    if (fs::path(p).extension() == ".jsonl")
      texts = jsonl_texts(p, d.text_key);
    else
      texts = {read_file(p)};
    for (const auto& t : texts) {
      if (text::utf8_error_offset(t) >= 0)
        fail("--data {}: invalid UTF-8 at byte {}", p, text::utf8_error_offset(t));
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

// Lengths from --lengths, or --multipliers × the training length.
std::vector<int64_t> resolve_lengths(const std::vector<int64_t>& lengths, const std::vector<double>& mult,
                                     int64_t train_len) {
  if (!lengths.empty() && !mult.empty()) fail("give either --lengths or --multipliers, not both");
  std::vector<int64_t> out = lengths;
  for (double m : mult) {
    if (!(m > 0)) fail("--multipliers: each must be > 0, got {}", m);
    out.push_back(int64_t(std::llround(m * double(train_len))));
  }
  if (out.empty()) fail("give --lengths or --multipliers");
  for (auto L : out) {
    if (L < 2) fail("--lengths: each must be >= 2, got {}", L);
    if (L > app::kMaxTokensFlag) fail("--lengths: each must be at most {} tokens, got {}", app::kMaxTokensFlag, L);
  }
  return out;
}

// Reads the curve of an earlier `ppl` result file (--with).
plot::Series read_curve(const std::string& path, int color) {
  const nlohmann::json j = parse_json(read_file(path), "--with " + path);
  if (!j.is_object() || j.value("kind", "") != "ppl" || !j.contains("results") || !j["results"].is_array())
    fail("--with {}: not a drope-eval ppl result file (expected kind \"ppl\" and a results list)", path);
  plot::Series s;
  s.label = j.contains("method") && j["method"].contains("label") ? j["method"]["label"].get<std::string>() : path;
  s.color = color;
  for (const auto& r : j["results"]) {
    if (!r.contains("length") || !r.contains("ppl") || !r["length"].is_number() || !r["ppl"].is_number())
      fail("--with {}: each result needs numbers 'length' and 'ppl'", path);
    s.x.push_back(r["length"].get<double>());
    s.y.push_back(r["ppl"].get<double>());
  }
  return s;
}

}  // namespace

void add_ppl_commands(CLI::App& cli, int& rc) {
  struct Opts {
    MethodOptions m;
    DataOptions d;
    std::vector<int64_t> lengths;
    std::vector<double> multipliers;
    eval::PerplexityOptions p;
    std::string out = "results/ppl";
    std::vector<std::string> with;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = cli.add_subcommand("ppl", "Perplexity vs context length (sliding-window or truncate protocol)");
  add_method_options(cmd, o->m);
  add_data_options(cmd, o->d);
  cmd->add_option("--lengths", o->lengths, "Window lengths (tokens)")->delimiter(',');
  cmd->add_option("--multipliers", o->multipliers, "Window lengths as multiples of the training length")->delimiter(',');
  cmd->add_option("--stride", o->p.stride, "Sliding-window stride (default 256)");
  cmd->add_flag("--truncate", o->p.truncate, "Score the first L tokens of each long-enough document instead");
  cmd->add_option("--max-tokens", o->p.max_tokens, "Score at most this many tokens of the stream (0 = all)");
  cmd->add_option("--max-windows", o->p.max_windows, "At most this many windows per length (0 = all)");
  cmd->add_option("--with", o->with, "Earlier ppl result JSON files to draw beside this method");
  cmd->add_option("--out", o->out, "Output prefix: .json/.csv/.md tables, .png/.svg plot (default results/ppl)");
  cmd->callback([o, &rc] {
    rc = app::run([&] {
      // Validate everything cheap before loading the model.
      std::vector<plot::Series> earlier;
      for (size_t i = 0; i < o->with.size(); ++i) earlier.push_back(read_curve(o->with[i], int(i) + 1));
      const bool text_input = [&] {
        for (const auto& p : o->d.paths)
          if (!fs::is_directory(p)) return true;
        return false;
      }();
      auto em = load_eval_model(o->m, text_input);
      const auto lengths = resolve_lengths(o->lengths, o->multipliers, em.train_length);
      int32_t eos = -1;
      const auto docs = load_documents(o->d, em, eos);
      const auto stream = concat(docs, eos);
      nlohmann::json results = nlohmann::json::array();
      tasks::Table table;
      table.title = fmt::format("Perplexity ({}) — {}", o->p.truncate ? "truncate" : "sliding window", em.label);
      table.columns = {"method", "length", "x train", "ppl", "windows", "tokens"};
      plot::Series cur;
      cur.label = em.label;
      cur.color = 0;
      for (auto L : lengths) {
        auto p = o->p;
        p.length = L;
        auto r = p.truncate ? eval::perplexity_truncate(em.model, docs, p) : eval::perplexity_sliding(em.model, stream, p);
        fmt::print("{}  L={}  ppl={:.4f}  ({} windows, {} tokens)\n", em.label, L, r.ppl, r.windows, r.tokens_scored);
        std::fflush(stdout);
        results.push_back({{"length", L}, {"ppl", r.ppl}, {"mean_nll", r.mean_nll}, {"windows", r.windows},
                           {"tokens", r.tokens_scored}});
        table.add_row({em.label, std::to_string(L), tasks::fixed(double(L) / double(em.train_length), 2),
                       tasks::fixed(r.ppl, 3), std::to_string(r.windows), std::to_string(r.tokens_scored)});
        cur.x.push_back(double(L));
        cur.y.push_back(r.ppl);
      }
      nlohmann::json summary = nlohmann::json::object();
      for (const auto& r : results) summary[fmt::format("ppl@{}", r["length"].get<int64_t>())] = r["ppl"];
      nlohmann::json doc = {{"kind", "ppl"},
                            {"protocol", o->p.truncate ? "truncate" : "sliding"},
                            {"stride", o->p.stride},
                            {"method", em.describe()},
                            {"data", o->d.paths},
                            {"results", results},
                            {"summary", summary}};
      plot::Figure fig;
      plot::Panel panel;
      panel.title = "Perplexity vs context length";
      panel.xlabel = "context length (tokens)";
      panel.ylabel = "perplexity";
      panel.log_y = true;
      panel.series = earlier;
      panel.series.push_back(cur);
      plot::Series train;
      train.label = "train length";
      train.dashed = true;
      train.markers = false;
      train.color = 7;
      double lo = 1e300, hi = 0;
      for (const auto& s : panel.series)
        for (double y : s.y)
          if (std::isfinite(y) && y > 0) lo = std::min(lo, y), hi = std::max(hi, y);
      if (hi > 0) {
        train.x = {double(em.train_length), double(em.train_length)};
        train.y = {lo, hi};
        panel.series.push_back(train);
      }
      fig.panels.push_back(panel);
      // Plots first: a failed render leaves the previous tables in place as well.
      plot::save(fig, o->out + ".png");
      plot::save(fig, o->out + ".svg");
      for (const auto& p : tasks::write_results(o->out, doc, table)) fmt::print("wrote {}\n", p);
      fmt::print("wrote {}.png and {}.svg\n", o->out, o->out);
      return 0;
    });
  });

  struct FitOpts {
    MethodOptions m;
    DataOptions d;
    std::vector<int64_t> lengths;
    std::vector<double> multipliers = {};
    eval::PerplexityOptions p;
    double beta_max = 2.5;
    std::string save;
    std::string out;
  };
  auto f = std::make_shared<FitOpts>();
  auto* fit = cli.add_subcommand("fit-temperature",
                                 "Fit c of the attention temperature β = 1 + c·ln(L/C) on held-out text; saved for "
                                 "--temperature auto");
  add_method_options(fit, f->m);
  add_data_options(fit, f->d);
  fit->add_option("--lengths", f->lengths, "Target lengths (> training length)")->delimiter(',');
  fit->add_option("--multipliers", f->multipliers, "Target lengths as multiples of the training length (default 2,4)")
      ->delimiter(',');
  fit->add_option("--stride", f->p.stride, "Sliding-window stride");
  fit->add_option("--max-tokens", f->p.max_tokens, "Held-out tokens to use (0 = all)");
  fit->add_option("--max-windows", f->p.max_windows, "At most this many windows per evaluation (0 = all)");
  fit->add_option("--beta-max", f->beta_max, "Largest β searched (default 2.5)");
  fit->add_option("--save", f->save, "Where to save the fit (default <model>/temperature.json)");
  fit->add_option("--out", f->out, "Also write tables and a β-vs-ppl plot with this prefix");
  fit->callback([f, &rc] {
    rc = app::run([&] {
      if (!(f->beta_max > 1.0)) fail("--beta-max must be > 1, got {}", f->beta_max);
      if (!f->m.temperature.empty()) fail("fit-temperature: --temperature cannot be combined (it is what is fitted)");
      const bool text_input = [&] {
        for (const auto& p : f->d.paths)
          if (!fs::is_directory(p)) return true;
        return false;
      }();
      auto em = load_eval_model(f->m, text_input);
      auto mult = f->multipliers;
      if (f->lengths.empty() && mult.empty()) mult = {2, 4};
      const auto lengths = resolve_lengths(f->lengths, mult, em.train_length);
      int32_t eos = -1;
      const auto stream = concat(load_documents(f->d, em, eos), eos);
      auto r = eval::fit_temperature(em.model, stream, lengths, f->p, f->beta_max);
      nlohmann::json per = nlohmann::json::array();
      tasks::Table table;
      table.title = fmt::format("Attention temperature fit — {} (c = {:.4f})", em.label, r.c);
      table.columns = {"length", "s", "best beta", "ppl at best", "ppl at beta=1"};
      for (size_t i = 0; i < r.lengths.size(); ++i) {
        const double s = double(r.lengths[i]) / double(em.train_length);
        fmt::print("L={} (s={:.2f}): best β={:.4f} ppl {:.4f} (β=1: {:.4f})\n", r.lengths[i], s, r.best_beta[i],
                   r.best_ppl[i], r.base_ppl[i]);
        per.push_back({{"length", r.lengths[i]}, {"s", s}, {"best_beta", r.best_beta[i]}, {"best_ppl", r.best_ppl[i]},
                       {"base_ppl", r.base_ppl[i]}, {"grid_beta", r.grid_beta[i]}, {"grid_ppl", r.grid_ppl[i]}});
        table.add_row({std::to_string(r.lengths[i]), tasks::fixed(s, 2), tasks::fixed(r.best_beta[i], 4),
                       tasks::fixed(r.best_ppl[i], 3), tasks::fixed(r.base_ppl[i], 3)});
      }
      nlohmann::json doc = {{"kind", "temperature"}, {"c", r.c}, {"train_length", em.train_length},
                            {"method", em.describe()}, {"fits", per}};
      const std::string save = f->save.empty() ? temperature_file(f->m.model_dir) : f->save;
      write_file_atomic(save, doc.dump(2) + "\n");
      fmt::print("fitted c = {:.4f} (β = 1 + c·ln s); saved to {}\n", r.c, save);
      if (!f->out.empty()) {
        plot::Figure fig;
        plot::Panel panel;
        panel.title = fmt::format("Held-out perplexity vs attention scale β (c = {:.3f})", r.c);
        panel.xlabel = "β";
        panel.ylabel = "perplexity";
        panel.log_y = true;
        for (size_t i = 0; i < r.lengths.size(); ++i) {
          plot::Series s;
          s.label = fmt::format("L = {}", r.lengths[i]);
          s.x = r.grid_beta[i];
          s.y = r.grid_ppl[i];
          panel.series.push_back(s);
        }
        fig.panels.push_back(panel);
        plot::save(fig, f->out + ".png");
        plot::save(fig, f->out + ".svg");
        for (const auto& p : tasks::write_results(f->out, doc, table)) fmt::print("wrote {}\n", p);
      }
      return 0;
    });
  });
}

}  // namespace drope::evalcli
