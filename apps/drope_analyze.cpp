// drope-analyze: positional analyses (paper §3–4). `bias-grad` measures the gradients of the attention
// positional bias A^c at initialisation (Figure 3), `constant-seq` checks Proposition 3.1, `rope-scaling`
// prints/plots the scaled RoPE frequencies γ_m (Figure 6) and `attention` draws one head's attention map.
#include <algorithm>
#include <filesystem>
#include <random>
#include <tuple>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "app_common.h"
#include "cli_numbers.h"
#include "log_flags.h"
#include "drope/analyze/positional_bias.h"
#include "drope/core/error.h"
#include "drope/core/files.h"
#include "drope/core/log.h"
#include "drope/core/numbers.h"
#include "drope/eval/logits.h"
#include "drope/io/model_io.h"
#include "drope/model/drope.h"
#include "drope/model/rope_scaling.h"
#include "drope/model/variant.h"
#include "drope/text/tokenizer.h"
#include "drope/plot/plot.h"
#include "drope/tasks/niah.h"

namespace {

namespace fs = std::filesystem;
namespace an = drope::analyze;

// A model to analyse: a directory (trained or imported weights) or a config initialised per seed.
struct ModelSpec {
  std::string name, source;
  std::string dir;            // non-empty: load weights from here
  drope::ModelConfig config;  // used when dir is empty
};

std::string stem_of(const std::string& path) {
  auto p = fs::path(path);
  if (!p.has_filename()) p = p.parent_path();
  return p.stem().string();
}

drope::DecoderLM build(const ModelSpec& s) {
  return s.dir.empty() ? drope::DecoderLM(s.config) : drope::io::load_model(s.dir);
}

// Exactly one of --model / --config / --preset (preset: `fallback` when none is given).
ModelSpec single_spec(const std::string& dir, const std::string& config, std::string preset,
                      const std::string& positional, const std::string& fallback) {
  if (int(!dir.empty()) + int(!config.empty()) + int(!preset.empty()) > 1)
    drope::fail("give only one of --model, --config and --preset");
  if (!positional.empty() && (!dir.empty() || !config.empty()))
    drope::fail("--positional applies to --preset only (edit the config, or use drope-model drop for a model dir)");
  if (!dir.empty()) return {stem_of(dir), dir, dir, {}};
  if (!config.empty()) return {stem_of(config), config, "", drope::load_model_config_file(config)};
  if (preset.empty()) preset = fallback;
  ModelSpec s{preset, "preset " + preset, "", drope::model_preset(preset)};
  if (!positional.empty()) {
    s.config.positional.type = drope::parse_name<drope::PositionalType>(positional, "--positional");
    s.name += "-" + positional;
    s.source += " with positional " + positional;
  }
  return s;
}

void write_figure(const drope::plot::Figure& fig, const std::string& dir, const std::string& stem) {
  for (const char* ext : {"png", "svg"}) {
    const std::string path = (fs::path(dir) / fmt::format("{}.{}", stem, ext)).string();
    drope::plot::save(fig, path);
    drope::logging::info("wrote {}", path);
  }
}

void write_text(const std::string& dir, const std::string& name, const std::string& text) {
  const std::string path = (fs::path(dir) / name).string();
  drope::write_file_atomic(path, text);
  drope::logging::info("wrote {}", path);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App cli{"drope-analyze: positional-bias and RoPE-scaling analyses"};
  cli.require_subcommand(1);
  const std::vector<std::string> kPositional = drope::names_of<drope::PositionalType>();

  // rope-scaling
  drope::RopeScalingConfig s;
  std::string scaling_type = "none";
  double theta = 10000.0;
  int64_t head_dim = 64, max_position = 2048, seq_len = 0;
  std::vector<double> factors;
  std::string out;
  auto* rs = cli.add_subcommand("rope-scaling", "Scaled RoPE frequencies as JSON; with --out also the paper's Figure 6");
  rs->add_option("--type", scaling_type, drope::join_names(drope::names_of<drope::RopeScalingType>()))
      ->check(CLI::IsMember(drope::names_of<drope::RopeScalingType>()));
  rs->add_option("--factor", factors, "Extension factor(s) s (default 2,3,4)")->delimiter(',');
  rs->add_option("--theta", theta, "RoPE base θ");
  rs->add_option("--head-dim", head_dim, "Head dimension d");
  rs->add_option("--train-length", max_position, "Original context length L0");
  rs->add_option("--seq-len", seq_len, "Current sequence length (dynamic methods; default L0)");
  rs->add_option("--beta-fast", s.beta_fast, "YaRN β_fast");
  rs->add_option("--beta-slow", s.beta_slow, "YaRN β_slow");
  rs->add_option("--out", out, "Directory for rope_scaling.{png,svg,csv}: γ_m of PI, NTK and YaRN per factor");

  // bias-grad
  std::vector<std::string> bg_models, bg_configs;
  std::string preset, text;
  int64_t seqs = 8, seeds = 3, bg_len = 128;
  auto* bg = cli.add_subcommand("bias-grad", "Gradients of the attention positional bias A^c (paper Figure 3)");
  bg->add_option("--model", bg_models, "Model directory (repeatable); seeds vary only the inputs");
  bg->add_option("--config", bg_configs, "Model YAML (repeatable), initialised once per seed");
  bg->add_option("--preset", preset, "With no --model/--config: this preset with RoPE and with NoPE (default tiny)");
  bg->add_option("--seqs", seqs, "Input sequences N per seed");
  bg->add_option("--seeds", seeds, "Seeds M (initialisation and inputs)");
  bg->add_option("--seq-len", bg_len, "Sequence length T");
  bg->add_option("--text", text, "Text file: byte-level token windows instead of random tokens");
  bg->add_option("--out", out, "Output directory for bias_grad.{json,csv,png,svg}")->required();

  // constant-seq and attention share the model selection
  std::string model_dir, config, positional, tokens;
  uint64_t seed = 0;
  int64_t token = 5, cs_len = 32, layer = -1, head = -1, max_tokens = 64;
  bool log_color = false;
  auto* cs = cli.add_subcommand("constant-seq", "Proposition 3.1 on a sequence of one repeated token (float64)");
  auto* att = cli.add_subcommand("attention", "Heatmap of one head's attention map for a prompt");
  for (auto* sub : {cs, att}) {
    sub->add_option("--model", model_dir, "Model directory");
    sub->add_option("--config", config, "Model YAML config (initialised with --seed)");
    sub->add_option("--preset", preset, "Preset name (default tiny), initialised with --seed");
    sub->add_option("--positional", positional, "Positional type for --preset")->check(CLI::IsMember(kPositional));
    sub->add_option("--seed", seed, "Initialisation seed for --config/--preset");
  }
  cs->add_option("--token", token, "The repeated token id");
  cs->add_option("--seq-len", cs_len, "Sequence length T");
  cs->add_option("--out", out, "Directory for constant_seq.json");
  att->add_option("--text", text, "Prompt as a text file (byte-level tokens)");
  att->add_option("--tokens", tokens, "Prompt as a JSON list of token-id lists (the first is used)");
  att->add_option("--max-tokens", max_tokens, "Use at most this many prompt tokens");
  att->add_option("--layer", layer, "Layer index (0-based)")->required();
  att->add_option("--head", head, "Query head index (0-based)")->required();
  att->add_flag("--log-color", log_color, "Colour by log10(α)");
  att->add_option("--out", out, "Output directory for attention_L<layer>_H<head>.{png,svg}")->required();

  // needle-attention (Figures 7–8)
  struct NeedleOpts {
    std::vector<std::string> models, methods{"none"};
    std::string tokenizer, haystack = "/usr/share/common-licenses/GPL-3", out;
    int64_t length = 0, window = 32;
    double depth = 50;
    uint64_t seed = 0;
  } nd;
  auto* na = cli.add_subcommand("needle-attention",
                                "Where the last query attends around a needle, per method (paper Figures 7–8)");
  na->add_option("--model", nd.models, "Model directory (repeatable)")->required();
  na->add_option("--method", nd.methods,
                 "none | pi:S | ntk:S | yarn:S | ... | temperature:C | temperature:auto | drope+qk (repeatable; default "
                 "none; docs/evaluation.md)");
  na->add_option("--tokenizer", nd.tokenizer, "Tokenizer (default: the model directory's; byte tokens if none)");
  na->add_option("--length", nd.length, "Prompt tokens (default 2 × the model's training length)");
  na->add_option("--depth", nd.depth, "Needle depth in % of the haystack (default 50)");
  na->add_option("--window", nd.window, "Keys shown on each side of the needle (default 32)");
  na->add_option("--haystack", nd.haystack, "Haystack text file (default GPL-3 from /usr/share/common-licenses)");
  na->add_option("--seed", nd.seed, "Seed of the needle's key and value");
  na->add_option("--out", nd.out, "Output directory for needle_attention.{png,svg,json,csv}")->required();
  drope::app::add_log_flags(cli, "drope-analyze", stderr);  // stdout carries JSON and tables
  drope::app::check_numeric_flags(cli);
  CLI11_PARSE(cli, argc, argv);

  if (na->parsed())
    return drope::app::run([&] {
      if (nd.depth < 0 || nd.depth > 100) drope::fail("--depth must be in [0, 100], got {}", nd.depth);
      if (nd.window < 0) drope::fail("--window must be >= 0, got {}", nd.window);
      if (nd.length < 0) drope::fail("--length must be a positive number of tokens (or 0 for the default), got {}", nd.length);
      const std::string hay = drope::read_file(nd.haystack);
      if (hay.empty()) drope::fail("--haystack {}: the file is empty", nd.haystack);
      if (drope::text::utf8_error_offset(hay) >= 0)
        drope::fail("--haystack {}: invalid UTF-8 at byte {}", nd.haystack, drope::text::utf8_error_offset(hay));
      // The needle and question as the NIAH tasks write them (tasks/niah.h); key and value from the seed.
      std::mt19937_64 rng(nd.seed);
      const std::string key = drope::tasks::draw_needle_item(rng, drope::tasks::NeedleKind::words);
      const std::string value = drope::tasks::draw_needle_item(rng, drope::tasks::NeedleKind::numbers);
      const std::string needle = " " + drope::tasks::niah_needle(drope::tasks::NeedleKind::numbers, key, value) + " ";
      const std::string question = drope::tasks::niah_question(drope::tasks::NeedleKind::numbers, {key}, 1);
      // Methods first, so that a typo fails before any model is loaded.
      std::vector<std::pair<std::string, drope::Variant>> methods;
      for (const auto& m : nd.methods) methods.emplace_back(m, drope::parse_variant(m, "--method"));
      std::vector<drope::analyze::NeedleAttention> runs;
      for (const auto& dir : nd.models) {
        auto base = drope::io::load_model(dir);
        base->eval();
        const auto& cfg = base->config();
        // Tokens: the model's tokenizer, else bytes (models trained on text bytes have vocab >= 256).
        std::unique_ptr<drope::text::Tokenizer> tok;
        std::string tpath = nd.tokenizer;
        if (tpath.empty() && (fs::exists(fs::path(dir) / "tokenizer.json") || fs::exists(fs::path(dir) / "tokenizer.model")))
          tpath = dir;
        if (!tpath.empty()) tok = drope::text::load_tokenizer(tpath);
        else if (cfg.vocab_size < 256)
          drope::fail("--model {}: no tokenizer and a vocabulary below 256 (no byte tokens); pass --tokenizer", dir);
        auto encode = [&](const std::string& t) {
          std::vector<int64_t> ids;
          if (tok)
            for (auto i : tok->encode(t)) ids.push_back(i);
          else
            for (unsigned char c : t) ids.push_back(c);
          return ids;
        };
        const int64_t L = nd.length > 0 ? nd.length : 2 * cfg.max_position;
        const auto q = encode(question), n = encode(needle);
        const int64_t room = L - int64_t(q.size() + n.size());
        if (room < 1) drope::fail("--length {} is too short for the needle and question ({} tokens)", L, q.size() + n.size());
        if (L > 16384) drope::fail("--length {}: the analysis keeps full attention maps; use at most 16384", L);
        std::vector<int64_t> h;
        const auto hay_ids = encode(hay);
        while (int64_t(h.size()) < room) h.insert(h.end(), hay_ids.begin(), hay_ids.end());
        h.resize(size_t(room));
        const int64_t at = int64_t(std::llround(nd.depth / 100.0 * double(room)));
        std::vector<int64_t> ids(h.begin(), h.begin() + at);
        ids.insert(ids.end(), n.begin(), n.end());
        ids.insert(ids.end(), h.begin() + at, h.end());
        ids.insert(ids.end(), q.begin(), q.end());
        for (auto id : ids)
          if (id >= cfg.vocab_size) drope::fail("--model {}: token id {} exceeds the vocabulary {}", dir, id, cfg.vocab_size);
        const auto t = torch::tensor(ids, torch::kLong).view({1, -1});
        for (const auto& [m, variant] : methods) {
          drope::DecoderLM model = drope::apply_variant(base, variant, dir);
          model->eval();
          const std::string label = variant.is_identity() ? stem_of(dir) : fmt::format("{} {}", stem_of(dir), m);
          runs.push_back(drope::analyze::needle_attention(model, t, at, at + int64_t(n.size()), nd.window, label));
          const auto& r = runs.back();
          fmt::print("{:<32} needle mass {:.4f} (uniform {:.4f}) over {} layers; prompt {} tokens, needle at {}\n",
                     label, r.mean_needle_mass, r.uniform_mass, r.needle_mass.size(), r.prompt_tokens, at);
        }
      }
      fs::create_directories(nd.out);
      write_text(nd.out, "needle_attention.json", drope::analyze::needle_attention_json(runs));
      write_text(nd.out, "needle_attention.csv", drope::analyze::needle_attention_csv(runs));
      write_figure(drope::analyze::needle_attention_figure(runs), nd.out, "needle_attention");
      return 0;
    });

  return drope::app::run([&] {
    if (rs->parsed()) {
      if (head_dim <= 2 || head_dim % 2) drope::fail("--head-dim must be an even number > 2, got {}", head_dim);
      drope::check_number(theta, "--theta", drope::Interval::above(1));
      drope::check_number(s.beta_fast, "--beta-fast", drope::Interval::positive());
      drope::check_number(s.beta_slow, "--beta-slow", drope::Interval::positive());
      if (max_position <= 0) drope::fail("--train-length must be positive, got {}", max_position);
      if (seq_len < 0) drope::fail("--seq-len must be >= 0 (0 = --train-length), got {}", seq_len);
      if (factors.empty()) factors = {2.0, 3.0, 4.0};
      s.type = drope::parse_name<drope::RopeScalingType>(scaling_type, "--type");
      nlohmann::json res = nlohmann::json::array();
      const auto base = drope::rope_base_frequencies(theta, head_dim);
      for (double f : factors) {
        drope::check_number(f, "--factor", drope::scaling_factor_range());
        auto sc = s;
        sc.factor = f;
        auto r = drope::rope_frequencies(theta, head_dim, sc, max_position, seq_len > 0 ? seq_len : max_position);
        std::vector<double> gamma(r.inv_freq.size());
        for (size_t i = 0; i < gamma.size(); ++i) gamma[i] = r.inv_freq[i] / base[i];
        res.push_back({{"type", s.type}, {"factor", f}, {"inv_freq", r.inv_freq}, {"gamma", gamma},
                       {"attention_factor", r.attention_factor}});
      }
      if (!out.empty()) {
        std::vector<std::string> types = {"pi", "ntk", "yarn"};
        if (s.type != drope::RopeScalingType::kNone && std::find(types.begin(), types.end(), scaling_type) == types.end())
          types.push_back(scaling_type);
        auto curves = an::scaling_gammas(theta, head_dim, max_position, types, factors, s);
        write_text(out, "rope_scaling.csv", an::gamma_csv(curves));
        write_figure(an::gamma_figure(curves, theta, head_dim, max_position), out, "rope_scaling");
      }
      fmt::print("{}\n", res.dump());
      return 0;
    }

    if (bg->parsed()) {
      drope::app::check_size_flag("--seqs", seqs, 1, 1 << 16);
      drope::app::check_size_flag("--seeds", seeds, 1, 1 << 16);
      drope::app::check_size_flag("--seq-len", bg_len, 2, drope::app::kMaxTokensFlag);
      std::vector<ModelSpec> specs;
      for (const auto& d : bg_models) specs.push_back({stem_of(d), d, d, {}});
      for (const auto& c : bg_configs) specs.push_back({stem_of(c), c, "", drope::load_model_config_file(c)});
      if (specs.empty()) {
        const std::string p = preset.empty() ? "tiny" : preset;
        for (const char* pos : {"rope", "nope"}) {
          ModelSpec sp{fmt::format("{}-{}", p, pos), fmt::format("preset {} with positional {}", p, pos), "",
                       drope::model_preset(p)};
          sp.config.positional.type = drope::parse_name<drope::PositionalType>(pos, "preset");
          specs.push_back(sp);
        }
      } else if (!preset.empty()) {
        drope::fail("--preset is only used without --model/--config");
      }
      // Distinct display names.
      for (size_t i = 0; i < specs.size(); ++i)
        for (size_t j = 0; j < i; ++j)
          if (specs[j].name == specs[i].name) specs[i].name += fmt::format("-{}", i);
      std::vector<an::BiasGradReport> reports;
      for (const auto& sp : specs) {
        auto model = build(sp);  // loads (and validates) before any work
        an::BiasGradOptions o;
        o.num_seqs = seqs;
        o.num_seeds = seeds;
        o.seq_len = bg_len;
        o.reinit = sp.dir.empty();
        if (!text.empty()) {
          o.text = an::byte_tokens(text, model->config().vocab_size);
          if (int64_t(o.text.size()) < bg_len)
            drope::fail("{}: {} bytes of text, but --seq-len {} needs at least {}", text, o.text.size(), bg_len, bg_len);
        }
        drope::logging::info("bias-grad: {} ({})", sp.name, sp.source);
        reports.push_back(an::bias_grad_study(model, sp.name, sp.source, o));
      }
      write_text(out, "bias_grad.json", an::bias_grad_json(reports));
      write_text(out, "bias_grad.csv", an::bias_grad_csv(reports));
      write_figure(an::bias_grad_figure(reports), out, "bias_grad");
      fmt::print("{}", an::bias_grad_table(reports));
      return 0;
    }

    const ModelSpec spec = single_spec(model_dir, config, preset, positional, "tiny");
    auto model = build(spec);
    if (spec.dir.empty()) model->reset_parameters(seed);

    if (cs->parsed()) {
      model->to(torch::kDouble);
      auto r = an::constant_sequence_check(model, token, cs_len);
      fmt::print("{}", an::constant_sequence_text(r, spec.name));
      if (!out.empty()) write_text(out, "constant_seq.json", an::constant_sequence_json(r, spec.name));
      return 0;
    }

    // attention
    an::check_layer_head(model->config(), layer, head);
    if (text.empty() == tokens.empty()) drope::fail("give exactly one of --text FILE and --tokens JSON");
    if (max_tokens < 1) drope::fail("--max-tokens must be >= 1, got {}", max_tokens);
    torch::Tensor ids;  // (1, T)
    std::vector<std::string> labels;
    if (!text.empty()) {
      auto bytes = an::byte_tokens(text, model->config().vocab_size);
      bytes.resize(std::min<size_t>(bytes.size(), size_t(max_tokens)));
      ids = torch::tensor(bytes, torch::kLong).view({1, -1});
      labels = an::byte_labels(ids);
    } else {
      auto batch = drope::eval::read_token_batch(tokens, model->config().vocab_size);  // (B, T)
      ids = batch.slice(0, 0, 1).slice(1, 0, max_tokens).contiguous();
    }
    auto map = an::attention_map(model, ids, layer, head);  // (T, T)
    auto heat = an::attention_heatmap(map, labels, fmt::format("{}: layer {}, head {}", spec.name, layer, head), log_color);
    for (const char* ext : {"png", "svg"}) {
      const std::string path = (fs::path(out) / fmt::format("attention_L{}_H{}.{}", layer, head, ext)).string();
      drope::plot::save(heat, path);
      drope::logging::info("wrote {}", path);
    }
    return 0;
  });
}
