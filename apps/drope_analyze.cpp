// drope-analyze: positional analyses (paper §3–4). `bias-grad` measures the gradients of the attention
// positional bias A^c at initialisation (Figure 3), `constant-seq` checks Proposition 3.1, `rope-scaling`
// prints/plots the scaled RoPE frequencies γ_m (Figure 6) and `attention` draws one head's attention map.
#include <algorithm>
#include <filesystem>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "app_common.h"
#include "drope/analyze/positional_bias.h"
#include "drope/core/error.h"
#include "drope/core/files.h"
#include "drope/eval/logits.h"
#include "drope/io/model_io.h"
#include "drope/model/rope_scaling.h"
#include "drope/plot/plot.h"

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
    s.config.positional.type = positional;
    s.name += "-" + positional;
    s.source += " with positional " + positional;
  }
  return s;
}

void write_figure(const drope::plot::Figure& fig, const std::string& dir, const std::string& stem) {
  for (const char* ext : {"png", "svg"}) {
    const std::string path = (fs::path(dir) / fmt::format("{}.{}", stem, ext)).string();
    drope::plot::save(fig, path);
    fmt::print(stderr, "wrote {}\n", path);
  }
}

void write_text(const std::string& dir, const std::string& name, const std::string& text) {
  const std::string path = (fs::path(dir) / name).string();
  drope::write_file_atomic(path, text);
  fmt::print(stderr, "wrote {}\n", path);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App cli{"drope-analyze: positional-bias and RoPE-scaling analyses"};
  cli.require_subcommand(1);
  const std::vector<std::string> kPositional = {"rope", "nope", "alibi", "rnope-swa"};

  // rope-scaling
  drope::RopeScalingConfig s;
  double theta = 10000.0;
  int64_t head_dim = 64, max_position = 2048, seq_len = 0;
  std::vector<double> factors;
  std::string out;
  auto* rs = cli.add_subcommand("rope-scaling", "Scaled RoPE frequencies as JSON; with --out also the paper's Figure 6");
  rs->add_option("--type", s.type, "none | pi | ntk | dynamic-ntk | yarn | dynamic-yarn | llama3")
      ->check(CLI::IsMember({"none", "pi", "ntk", "dynamic-ntk", "yarn", "dynamic-yarn", "llama3"}));
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
  CLI11_PARSE(cli, argc, argv);

  return drope::app::run([&] {
    if (rs->parsed()) {
      if (head_dim <= 2 || head_dim % 2) drope::fail("--head-dim must be an even number > 2, got {}", head_dim);
      if (!(theta > 1)) drope::fail("--theta must be > 1, got {}", theta);
      if (max_position <= 0) drope::fail("--train-length must be positive, got {}", max_position);
      if (factors.empty()) factors = {2.0, 3.0, 4.0};
      nlohmann::json res = nlohmann::json::array();
      const auto base = drope::rope_base_frequencies(theta, head_dim);
      for (double f : factors) {
        if (!(f >= 1.0)) drope::fail("--factor must be >= 1, got {}", f);
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
        if (s.type != "none" && std::find(types.begin(), types.end(), s.type) == types.end()) types.push_back(s.type);
        auto curves = an::scaling_gammas(theta, head_dim, max_position, types, factors, s);
        write_text(out, "rope_scaling.csv", an::gamma_csv(curves));
        write_figure(an::gamma_figure(curves, theta, head_dim, max_position), out, "rope_scaling");
      }
      fmt::print("{}\n", res.dump());
      return 0;
    }

    if (bg->parsed()) {
      if (seqs < 1) drope::fail("--seqs must be >= 1, got {}", seqs);
      if (seeds < 1) drope::fail("--seeds must be >= 1, got {}", seeds);
      if (bg_len < 2) drope::fail("--seq-len must be >= 2, got {}", bg_len);
      std::vector<ModelSpec> specs;
      for (const auto& d : bg_models) specs.push_back({stem_of(d), d, d, {}});
      for (const auto& c : bg_configs) specs.push_back({stem_of(c), c, "", drope::load_model_config_file(c)});
      if (specs.empty()) {
        const std::string p = preset.empty() ? "tiny" : preset;
        for (const char* pos : {"rope", "nope"}) {
          ModelSpec sp{fmt::format("{}-{}", p, pos), fmt::format("preset {} with positional {}", p, pos), "",
                       drope::model_preset(p)};
          sp.config.positional.type = pos;
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
        fmt::print(stderr, "bias-grad: {} ({})\n", sp.name, sp.source);
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
      fmt::print("wrote {}\n", path);
    }
    return 0;
  });
}
