// The drope-analyze runners rope-scaling, bias-grad, constant-seq and attention (analyze/runners.h).
#include <algorithm>
#include <filesystem>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "drope/analyze/positional_bias.h"
#include "drope/analyze/runners.h"
#include "drope/config/names.h"
#include "drope/core/cpu_budget.h"
#include "drope/core/error.h"
#include "drope/core/files.h"
#include "drope/core/log.h"
#include "drope/core/numbers.h"
#include "drope/eval/logits.h"
#include "drope/io/model_io.h"
#include "drope/model/rope_scaling.h"
#include "drope/plot/plot.h"
#include "run_output.h"

namespace fs = std::filesystem;

namespace drope::analyze {

namespace detail {

std::string stem_of(const std::string& path) {
  auto p = fs::path(path);
  if (!p.has_filename()) p = p.parent_path();
  return p.stem().string();
}

void write_figure(const plot::Figure& fig, const std::string& dir, const std::string& stem) {
  for (const char* ext : {"png", "svg"}) {
    const std::string path = (fs::path(dir) / fmt::format("{}.{}", stem, ext)).string();
    plot::save(fig, path);
    logging::info("wrote {}", path);
  }
}

void write_text(const std::string& dir, const std::string& name, const std::string& text) {
  const std::string path = (fs::path(dir) / name).string();
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
// every layer's activations and (H, T, T) attention probabilities, `elt`-byte elements (an estimate).
void check_analysis_fits(const ModelConfig& c, int64_t tokens, double elt, const std::string& what) {
  const double T = double(tokens), D = double(c.resolved_head_dim());
  const double per_layer =
      T * (6.0 * double(c.hidden_size) + 2.0 * double(c.num_heads) * D + 3.0 * double(c.intermediate_size)) +
      double(c.num_heads) * T * T;
  check_memory_estimate(2.0 * elt * double(c.num_layers) * per_layer, fmt::format("{} of {} tokens", what, tokens),
                        "use a shorter sequence");
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
  auto heat =
      attention_heatmap(map, labels, fmt::format("{}: layer {}, head {}", spec.name, r.layer, r.head), r.log_color);
  for (const char* ext : {"png", "svg"}) {
    const std::string path = (fs::path(r.out) / fmt::format("attention_L{}_H{}.{}", r.layer, r.head, ext)).string();
    plot::save(heat, path);
    logging::info("wrote {}", path);
  }
}

}  // namespace drope::analyze
