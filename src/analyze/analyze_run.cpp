// The drope-analyze runners rope-scaling, bias-grad, constant-seq, attention and head-scores (analyze/runners.h).
#include <algorithm>
#include <filesystem>
#include <regex>
#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "drope/analyze/head_scores.h"
#include "drope/analyze/positional_bias.h"
#include "drope/analyze/runners.h"
#include "drope/config/names.h"
#include "drope/core/cpu_budget.h"
#include "drope/core/error.h"
#include "drope/core/files.h"
#include "drope/core/log.h"
#include "drope/core/numbers.h"
#include "drope/eval/logits.h"
#include "drope/eval/results.h"
#include "drope/io/model_io.h"
#include "drope/model/rope_scaling.h"
#include "drope/plot/plot.h"
#include "drope/tasks/offset_key.h"
#include "drope/tasks/report.h"
#include "run_output.h"

namespace fs = std::filesystem;

namespace drope::analyze {

bool is_output_name(const std::string& name) {
  static const char* const kNames[] = {"rope_scaling.csv",  "bias_grad.json",        "bias_grad.csv",
                                       "constant_seq.json", "sequences.json",        "head_scores.csv",
                                       "head_scores.json",  "needle_attention.json", "needle_attention.csv"};
  static const char* const kFigures[] = {"rope_scaling", "bias_grad", "needle_attention"};
  for (const char* n : kNames)
    if (name == n) return true;
  for (const char* f : kFigures)
    if (name == fmt::format("{}.png", f) || name == fmt::format("{}.svg", f)) return true;
  static const std::regex attention(R"(attention_L[0-9]+_H[0-9]+\.(json|png|svg))");
  return std::regex_match(name, attention);
}

namespace detail {

std::string stem_of(const std::string& path) {
  auto p = fs::path(path);
  if (!p.has_filename()) p = p.parent_path();
  return p.stem().string();
}

namespace {

// <dir>/<name> for a file a command writes; every write goes through here, so is_output_name lists them all.
std::string output_path(const std::string& dir, const std::string& name) {
  if (!is_output_name(name))
    throw std::logic_error("drope-analyze writes an unlisted file " + name + " (analyze::is_output_name)");
  return (fs::path(dir) / name).string();
}

template <typename Plot>
void save_png_and_svg(const Plot& plot, const std::string& dir, const std::string& stem) {
  for (const char* ext : {"png", "svg"}) {
    const std::string path = output_path(dir, fmt::format("{}.{}", stem, ext));
    plot::save(plot, path);
    logging::info("wrote {}", path);
  }
}

}  // namespace

void write_figure(const plot::Figure& fig, const std::string& dir, const std::string& stem) {
  save_png_and_svg(fig, dir, stem);
}
void write_figure(const plot::Heatmap& map, const std::string& dir, const std::string& stem) {
  save_png_and_svg(map, dir, stem);
}

void write_text(const std::string& dir, const std::string& name, const std::string& text) {
  const std::string path = output_path(dir, name);
  write_file_atomic(path, text);
  logging::info("wrote {}", path);
}

}  // namespace detail

namespace {

using detail::stem_of;
using detail::write_figure;
using detail::write_text;

// A model to analyse: a directory (trained or imported weights) or a config initialised per seed.
struct ModelSpec {
  std::string name, source;
  std::string dir;      // non-empty: load weights from here
  ModelConfig config;   // used when dir is empty
};

DecoderLM build(const ModelSpec& s) { return s.dir.empty() ? DecoderLM(s.config) : io::load_model(s.dir); }

// Exactly one of --model / --config / --preset (preset: `fallback` when none is given).
ModelSpec single_spec(const ModelChoice& m, const std::string& fallback) {
  const std::string &dir = m.dir, &config = m.config, &positional = m.positional;
  std::string preset = m.preset;
  if (int(!dir.empty()) + int(!config.empty()) + int(!preset.empty()) > 1)
    fail("give only one of --model, --config and --preset");
  if (!positional.empty() && (!dir.empty() || !config.empty()))
    fail("--positional applies to --preset only (edit the config, or use drope-model drop for a model dir)");
  if (!dir.empty()) return {stem_of(dir), dir, dir, {}};
  if (!config.empty()) return {stem_of(config), config, "", load_model_config_file(config)};
  if (preset.empty()) preset = fallback;
  ModelSpec s{preset, "preset " + preset, "", model_preset(preset)};
  if (!positional.empty()) {
    s.config.positional.type = parse_name<PositionalType>(positional, "--positional");
    s.name += "-" + positional;
    s.source += " with positional " + positional;
  }
  return s;
}

// The chosen model, initialised with the seed unless it was loaded.
std::pair<ModelSpec, DecoderLM> chosen_model(const ModelChoice& m) {
  const ModelSpec spec = single_spec(m, "tiny");
  auto model = build(spec);
  if (spec.dir.empty()) model->reset_parameters(m.seed);
  return {spec, model};
}

// The models of a bias-grad study, with distinct display names.
std::vector<ModelSpec> bias_grad_specs(const BiasGradRun& r) {
  std::vector<ModelSpec> specs;
  for (const auto& d : r.models) specs.push_back({stem_of(d), d, d, {}});
  for (const auto& c : r.configs) specs.push_back({stem_of(c), c, "", load_model_config_file(c)});
  if (specs.empty()) {
    const std::string p = r.preset.empty() ? "tiny" : r.preset;
    for (const char* pos : {"rope", "nope"}) {
      ModelSpec sp{fmt::format("{}-{}", p, pos), fmt::format("preset {} with positional {}", p, pos), "",
                   model_preset(p)};
      sp.config.positional.type = parse_name<PositionalType>(pos, "preset");
      specs.push_back(sp);
    }
  } else if (!r.preset.empty()) {
    fail("--preset is only used without --model/--config");
  }
  for (size_t i = 0; i < specs.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (specs[j].name == specs[i].name) specs[i].name += fmt::format("-{}", i);
  return specs;
}

// Refuses an analysis over `tokens` tokens whose memory would not fit: a forward and backward that keeps
// every layer's activations and (H, T, T) attention probabilities, `elt`-byte elements (an estimate), for
// `rows` sequences at once.
void check_analysis_fits(const ModelConfig& c, int64_t tokens, double elt, const std::string& what, int64_t rows = 1) {
  const double T = double(tokens), D = double(c.resolved_head_dim());
  const double per_layer =
      T * (6.0 * double(c.hidden_size) + 2.0 * double(c.num_heads) * D + 3.0 * double(c.intermediate_size)) +
      double(c.num_heads) * T * T;
  check_memory_estimate(2.0 * elt * double(c.num_layers) * double(rows) * per_layer,
                        fmt::format("{} of {} tokens", what, tokens), "use a shorter sequence");
}

}  // namespace

void run_rope_scaling(const RopeScalingRun& r) {
  const int64_t head_dim = r.head_dim, max_position = r.train_length;
  const double theta = r.theta;
  RopeScalingConfig s = r.scaling;
  if (head_dim <= 2 || head_dim % 2 || head_dim > (1 << 16))
    fail("--head-dim must be an even number in (2, 65536], got {}", head_dim);
  check_number(theta, "--theta", Interval::above(1));
  check_number(s.beta_fast, "--beta-fast", Interval::positive());
  check_number(s.beta_slow, "--beta-slow", Interval::positive());
  if (max_position <= 0) fail("--train-length must be positive, got {}", max_position);
  if (r.seq_len < 0) fail("--seq-len must be >= 0 (0 = --train-length), got {}", r.seq_len);
  std::vector<double> factors = r.factors;
  if (factors.empty()) factors = {2.0, 3.0, 4.0};
  s.type = parse_name<RopeScalingType>(r.type, "--type");
  nlohmann::json res = nlohmann::json::array();
  const auto base = rope_base_frequencies(theta, head_dim);
  for (double f : factors) {
    check_number(f, "--factor", scaling_factor_range());
    if (std::count(factors.begin(), factors.end(), f) > 1) fail("--factor: {:g} is listed twice", f);
    auto sc = s;
    sc.factor = f;
    auto fr = rope_frequencies(theta, head_dim, sc, max_position, r.seq_len > 0 ? r.seq_len : max_position);
    std::vector<double> gamma(fr.inv_freq.size());
    for (size_t i = 0; i < gamma.size(); ++i) gamma[i] = fr.inv_freq[i] / base[i];
    res.push_back({{"type", s.type},
                   {"factor", f},
                   {"inv_freq", fr.inv_freq},
                   {"gamma", gamma},
                   {"attention_factor", fr.attention_factor}});
  }
  if (!r.out.empty()) {
    std::vector<std::string> types = {"pi", "ntk", "yarn"};
    if (s.type != RopeScalingType::kNone && std::find(types.begin(), types.end(), r.type) == types.end())
      types.push_back(r.type);
    auto curves = scaling_gammas(theta, head_dim, max_position, types, factors, s);
    write_text(r.out, "rope_scaling.csv", gamma_csv(curves));
    write_figure(gamma_figure(curves, theta, head_dim, max_position), r.out, "rope_scaling");
  }
  fmt::print("{}\n", res.dump());
}

void run_bias_grad(const BiasGradRun& r) {
  const std::vector<ModelSpec> specs = bias_grad_specs(r);
  std::vector<BiasGradReport> reports;
  for (const auto& sp : specs)
    check_analysis_fits(sp.dir.empty() ? sp.config : io::load_model_config_dir(sp.dir), r.seq_len, 4, "bias-grad");
  for (const auto& sp : specs) {
    auto model = build(sp);  // loads (and validates) before any work
    BiasGradOptions o;
    o.num_seqs = r.seqs;
    o.num_seeds = r.seeds;
    o.seq_len = r.seq_len;
    o.reinit = sp.dir.empty();
    if (!r.text.empty()) {
      o.text = byte_tokens(r.text, model->config().vocab_size);
      if (int64_t(o.text.size()) < r.seq_len)
        fail("{}: {} bytes of text, but --seq-len {} needs at least {}", r.text, o.text.size(), r.seq_len, r.seq_len);
    }
    logging::info("bias-grad: {} ({})", sp.name, sp.source);
    reports.push_back(bias_grad_study(model, sp.name, sp.source, o));
  }
  write_text(r.out, "bias_grad.json", bias_grad_json(reports));
  write_text(r.out, "bias_grad.csv", bias_grad_csv(reports));
  write_figure(bias_grad_figure(reports), r.out, "bias_grad");
  fmt::print("{}", bias_grad_table(reports));
}

void run_constant_seq(const ConstantSeqRun& r) {
  auto [spec, model] = chosen_model(r.model);
  check_analysis_fits(model->config(), r.seq_len, 8, "constant-seq");
  model->to(torch::kDouble);
  auto rep = constant_sequence_check(model, r.token, r.seq_len);
  fmt::print("{}", constant_sequence_text(rep, spec.name));
  if (!r.out.empty()) write_text(r.out, "constant_seq.json", constant_sequence_json(rep, spec.name));
}

void run_attention_map(const AttentionMapRun& r) {
  auto [spec, model] = chosen_model(r.model);
  check_layer_head(model->config(), r.layer, r.head);
  if (r.text.empty() == r.tokens.empty()) fail("give exactly one of --text FILE and --tokens JSON");
  if (r.max_tokens < 1) fail("--max-tokens must be >= 1, got {}", r.max_tokens);
  torch::Tensor ids;  // (1, T)
  std::vector<std::string> labels;
  if (!r.text.empty()) {
    const std::string bytes = byte_tokens(r.text, model->config().vocab_size, r.max_tokens);
    ids = torch::empty({1, int64_t(bytes.size())}, torch::kLong);
    for (size_t i = 0; i < bytes.size(); ++i) ids.data_ptr<int64_t>()[i] = static_cast<unsigned char>(bytes[i]);
    labels = byte_labels(ids);
  } else {
    auto batch = eval::read_token_batch(r.tokens, model->config().vocab_size);  // (B, T)
    ids = batch.slice(0, 0, 1).slice(1, 0, r.max_tokens).contiguous();
  }
  check_analysis_fits(model->config(), ids.size(1), 4, "attention");
  auto map = attention_map(model, ids, r.layer, r.head);  // (T, T)
  nlohmann::json doc = eval::new_results("attention-map");
  const int64_t T = ids.size(1);
  const int64_t* tok = ids.data_ptr<int64_t>();
  doc["model"] = spec.name;
  doc["layer"] = r.layer;
  doc["head"] = r.head;
  doc["tokens"] = std::vector<int64_t>(tok, tok + T);
  doc["previous_token"] = T >= 2 ? nlohmann::json(previous_token_score(map)) : nlohmann::json(nullptr);
  const double* m = map.data_ptr<double>();
  doc["map"] = nlohmann::json::array();
  for (int64_t i = 0; i < T; ++i) doc["map"].push_back(std::vector<double>(m + i * T, m + (i + 1) * T));
  write_text(r.out, fmt::format("attention_L{}_H{}.json", r.layer, r.head), doc.dump() + "\n");
  auto heat =
      attention_heatmap(map, labels, fmt::format("{}: layer {}, head {}", spec.name, r.layer, r.head), r.log_color);
  write_figure(heat, r.out, fmt::format("attention_L{}_H{}", r.layer, r.head));
}

void run_head_scores(const HeadScoresRun& r) {
  if (r.tokens.empty() == r.task.empty()) fail("give exactly one of --tokens JSON and --task offset-key");
  if (!r.task.empty() && r.task != "offset-key") fail("--task: expected offset-key, got '{}'", r.task);
  if (r.split != "heldout" && r.split != "test") fail("--split: expected heldout or test, got '{}'", r.split);
  if (r.sequences < 1) fail("--sequences must be >= 1, got {}", r.sequences);
  if (r.batch < 1) fail("--batch-size must be >= 1, got {}", r.batch);
  auto [spec, model] = chosen_model(r.model);
  const int64_t vocab = model->config().vocab_size;
  torch::Tensor ids;  // (B, T)
  std::vector<tasks::OffsetKeySequence> seqs;
  if (!r.tokens.empty()) {
    ids = eval::read_token_batch(r.tokens, vocab);
    if (ids.size(1) < 2) fail("{}: head scores need token lists of at least 2 tokens, got {}", r.tokens, ids.size(1));
  } else {
    tasks::check_offset_key_vocab(vocab, "model " + spec.source);
    const int64_t L = r.length > 0 ? r.length : model->config().max_position;
    tasks::check_offset_key_length(L, "--length");
    const auto split = r.split == "test" ? tasks::OffsetKeySplit::test : tasks::OffsetKeySplit::heldout;
    std::vector<int64_t> flat;
    for (int64_t i = 0; i < r.sequences; ++i) {
      seqs.push_back(tasks::make_offset_key_sequence(r.task_seed, tasks::offset_key_index(split, uint64_t(i)), L));
      flat.insert(flat.end(), seqs.back().tokens.begin(), seqs.back().tokens.end());
    }
    ids = torch::tensor(flat, torch::kLong).view({r.sequences, L});
  }
  check_analysis_fits(model->config(), ids.size(1), 4, "head-scores", std::min(r.batch, ids.size(0)));
  const HeadScores s = head_scores(model, ids, seqs, r.batch);

  nlohmann::json doc = eval::new_results("head-scores");
  doc["model"] = spec.name;
  doc["source"] = spec.source;
  doc["sequences"] = s.sequences;
  doc["length"] = s.length;
  doc["tokens"] = r.tokens.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.tokens);
  if (s.offset_key) {
    nlohmann::json layout = nlohmann::json::array();
    for (const auto& q : seqs)
      layout.push_back(
          {{"colours", q.colours}, {"answer_positions", q.answer_positions}, {"needle_positions", q.needle_positions}});
    doc["task"] = {{"name", "offset-key"}, {"split", r.split}, {"seed", r.task_seed}, {"layout", layout}};
  }
  doc["heads"] = nlohmann::json::array();
  for (size_t l = 0; l < s.heads.size(); ++l)
    for (size_t h = 0; h < s.heads[l].size(); ++h) {
      const auto& o = s.heads[l][h];
      nlohmann::json e = {
          {"layer", l}, {"head", h}, {"previous_token", o.previous_token}, {"first_token", o.first_token}};
      if (s.offset_key) {
        e["answer_to_query"] = o.answer_to_query;
        e["answer_to_earlier_queries"] = o.answer_to_earlier_queries;
        e["answer_to_needle"] = o.answer_to_needle;
        e["answer_to_other_needles"] = o.answer_to_other_needles;
        e["query_to_needle"] = o.query_to_needle;
        e["query_to_other_needles"] = o.query_to_other_needles;
      }
      doc["heads"].push_back(e);
    }
  tasks::Table table;
  table.title = fmt::format("Head scores: {} ({} sequences of {} tokens)", spec.name, s.sequences, s.length);
  table.columns = head_score_columns(s);
  for (auto& row : head_score_rows(s)) table.add_row(std::move(row));
  if (s.offset_key) {
    nlohmann::json rows = nlohmann::json::array();
    for (const auto& q : seqs) rows.push_back(q.tokens);
    write_text(r.out, "sequences.json", rows.dump() + "\n");
  }
  write_text(r.out, "head_scores.csv", tasks::to_csv(table));
  write_text(r.out, "head_scores.json", doc.dump(2) + "\n");
  fmt::print("{}", tasks::to_markdown(table));
}

}  // namespace drope::analyze
