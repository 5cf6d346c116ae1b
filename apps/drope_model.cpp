// drope-model: create, inspect, convert and DroPE-transform model directories.
#include <map>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "app_common.h"
#include "cli_numbers.h"
#include "drope/core/error.h"
#include "drope/core/files.h"
#include "drope/core/gguf.h"
#include "drope/core/log.h"
#include "drope/io/model_io.h"
#include "drope/io/safetensors.h"
#include "drope/model/drope.h"
#include "drope/text/gguf_tokenizer.h"
#include "log_flags.h"

namespace {

const char* kind_name(drope::PositionalKind k) {
  switch (k) {
    case drope::PositionalKind::kRope: return "rope";
    case drope::PositionalKind::kNope: return "nope";
    case drope::PositionalKind::kAlibi: return "alibi";
  }
  return "?";
}

drope::ModelConfig config_from(const std::string& config, const std::string& preset) {
  if (!config.empty() && !preset.empty()) drope::fail("give either --config or --preset, not both");
  if (!config.empty()) return drope::load_model_config_file(config);
  if (!preset.empty()) return drope::model_preset(preset);
  drope::fail("give --config FILE or --preset NAME");
}

at::ScalarType parse_dtype(const std::string& s) {
  if (s == "float32" || s == "f32") return at::kFloat;
  if (s == "bfloat16" || s == "bf16") return at::kBFloat16;
  if (s == "float16" || s == "f16") return at::kHalf;
  drope::fail("--dtype must be float32, bfloat16 or float16, got '{}'", s);
}

void print_info(drope::DecoderLM& m) {
  const auto& c = m->config();
  fmt::print("arch {}  vocab {}  hidden {}  mlp {}  layers {}  heads {}/{} (kv)  head_dim {}  tied {}\n", c.arch,
             c.vocab_size, c.hidden_size, c.intermediate_size, c.num_layers, c.num_heads, c.num_kv_heads,
             c.resolved_head_dim(), c.tie_embeddings);
  fmt::print("positional {}  theta {}  scaling {} (x{})  qk_norm {}  temperature c={}  context {}{}\n",
             c.positional.type, c.positional.rope_theta, c.positional.scaling.type, c.positional.scaling.factor,
             c.qk_norm, c.softmax_temperature, c.max_position,
             c.softmax_scale > 0 ? fmt::format("  softmax_scale {}", c.softmax_scale) : "");
  std::string plan;
  for (const auto& l : c.layer_plan())
    plan += fmt::format("{}{} ", kind_name(l.kind), l.window ? fmt::format("/w{}", l.window) : "");
  fmt::print("layers: {}\n", plan);
  fmt::print("parameters: {} ({:.2f}M)\n", m->num_parameters(), m->num_parameters() / 1e6);
}

// The tokenizer files of a GGUF model, written beside the converted weights; a summary line of its tensors.
std::vector<std::pair<std::string, std::string>> gguf_extras(const std::string& path) {
  const drope::gguf::File f(path);
  std::map<std::string, int> types;
  for (const auto& t : f.header().tensors) ++types[drope::gguf::type_traits(t.type)->name];
  std::string counts;
  for (const auto& [name, n] : types) counts += fmt::format(" {}x{}", name, n);
  fmt::print("read {}: GGUF v{}, {} tensors ({}), dequantised to float32\n", path, f.header().version,
             f.header().tensors.size(), counts.empty() ? "none" : counts.substr(1));
  return drope::text::gguf_tokenizer_files(f).files();
}

// A GGUF's vocabulary must fit its embedding: a token id beyond the rows would index nothing.
void check_vocab_fits(const std::string& path, drope::DecoderLM& m) {
  const int64_t tokens = drope::text::load_gguf_tokenizer(path)->vocab_size(), rows = m->config().vocab_size;
  if (tokens > rows)
    drope::fail("{}: tokenizer.ggml.tokens has {} entries but token_embd.weight only {} rows; ids from {} on would "
                "have no embedding",
                path, tokens, rows, rows);
}

// `drope-model gguf`: a GGUF file's metadata and tensor table; with `out`, every tensor dequantised to float32
// (GGUF names, row-major shapes) in one safetensors file.
void gguf_info(const std::string& path, const std::string& out) {
  if (!out.empty()) drope::check_output_paths("--dequantize", out, {out}, {{"--file", path}});
  const drope::gguf::File f(path);
  const auto& h = f.header();
  fmt::print("GGUF v{}  {} metadata keys  {} tensors  alignment {}\n", h.version, h.meta.size(), h.tensors.size(),
             h.alignment);
  for (const auto& [key, v] : h.meta) {
    std::string shown = v.type == drope::gguf::ValueType::kArray
                            ? fmt::format("[{} x {}]", v.value.size(), drope::gguf::value_type_name(v.elem_type))
                            : v.value.dump();
    if (shown.size() > 100) shown = shown.substr(0, 97) + "...";
    fmt::print("  {} = {}\n", key, shown);
  }
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  for (const auto& t : h.tensors) {
    fmt::print("  {:<40} {:<10} {}\n", t.name, drope::gguf::type_traits(t.type)->name,
               c10::str(at::IntArrayRef(t.shape())));
    if (out.empty()) continue;
    at::Tensor x = at::empty(t.shape(), at::kFloat);
    f.read_float(t, x.data_ptr<float>());
    tensors.emplace_back(t.name, x);
  }
  if (!out.empty()) {
    drope::io::save_safetensors(out, tensors);
    fmt::print("wrote {} tensors as float32 to {}\n", tensors.size(), out);
  }
}

drope::io::SaveOptions save_options(const std::string& input, const std::string& dtype, const std::string& format,
                                    bool force) {
  drope::io::SaveOptions o;
  o.dtype = parse_dtype(dtype);
  o.replace_any = force;
  o.format = drope::parse_name<drope::ModelFormat>(format, "--format");
  if (!input.empty()) o.inputs = {{"--model", input}};
  return o;
}

void save(drope::DecoderLM& m, const std::string& out, const drope::io::SaveOptions& o) {
  const bool hf = drope::io::save_model(m, out, o);
  if (o.format == drope::ModelFormat::kDropeReference)
    drope::logging::info("saved {} (DroPE reference config.json, model_type {}_drope + model.safetensors)", out,
                         m->config().arch);
  else
    drope::logging::info("saved {} ({})", out,
                         hf ? "drope.yaml + HF config.json + model.safetensors"
                            : "drope.yaml + model.safetensors; HF cannot express this model");
}

// The import options of --positional ("" = none).
drope::io::ImportOptions import_options(const std::string& positional) {
  drope::io::ImportOptions o;
  if (positional.empty()) return o;
  o.positional = drope::parse_name<drope::PositionalType>(positional, "--positional");
  drope::io::check_import_positional(*o.positional, "--positional");
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App cli{"drope-model: create, inspect, convert and DroPE-transform models"};
  cli.require_subcommand(1);
  std::string model_dir, config, preset, out, dtype = "float32", qk_norm = "none", format = "drope", positional;
  uint64_t seed = 0;
  bool per_head = false, force = false;
  const char* force_help = "Replace --out even if it is a non-empty directory that is not a drope model";
  const std::string format_help =
      "Output format: drope (drope.yaml + safetensors, HF config.json when HF can express "
      "the model) | drope-reference (the DroPE authors' llama_drope / qwen2_drope config.json)";
  const std::string positional_help =
      "Override the imported model's positional encoding in every layer: rope | nope (a RoPE-less checkpoint saved "
      "as plain Llama: nope)";
  const auto add_format = [&](CLI::App* c) {
    c->add_option("--format", format, format_help)->check(CLI::IsMember(drope::names_of<drope::ModelFormat>()));
  };
  const auto add_positional = [&](CLI::App* c) {
    c->add_option("--positional", positional, positional_help)
        ->check(CLI::IsMember(drope::io::import_positional_names()));
  };

  auto* info = cli.add_subcommand("info", "Print a model's shape, layer plan and parameter count");
  info->add_option("--model", model_dir, "Model directory or .gguf file");
  info->add_option("--config", config, "Model YAML config");
  info->add_option("--preset", preset, "Preset name");
  add_positional(info);

  auto* init = cli.add_subcommand("init", "Randomly initialise a model (N(0, init_std)) and save it");
  init->add_option("--config", config, "Model YAML config");
  init->add_option("--preset", preset, "Preset name");
  init->add_option("--seed", seed, "Initialisation seed");
  init->add_option("--out", out, "Output directory")->required();
  init->add_option("--dtype", dtype, "Stored dtype: float32 | bfloat16 | float16");
  add_format(init);
  init->add_flag("--force", force, force_help);

  std::vector<std::string> from;
  auto* convert = cli.add_subcommand("convert", "Import a model (HF or drope directory, GGUF file) and write it back");
  auto* model_opt = convert->add_option("--model", model_dir, "Input model directory or .gguf file");
  convert->add_option("--from", from, "Import a file of another format: --from gguf FILE (llama / qwen2 GGUF)")
      ->expected(2)
      ->excludes(model_opt);
  convert->add_option("--out", out, "Output directory")->required();
  convert->add_option("--dtype", dtype, "Stored dtype: float32 | bfloat16 | float16");
  add_positional(convert);
  add_format(convert);
  convert->add_flag("--force", force, force_help);

  auto* drop = cli.add_subcommand("drop", "DroPE: remove positional embeddings from every layer, keep weights");
  drop->add_option("--model", model_dir, "Input model directory or .gguf file")->required();
  drop->add_option("--out", out, "Output directory")->required();
  drop->add_option("--qk-norm", qk_norm, drope::join_names(drope::names_of<drope::QkNorm>()))
      ->check(CLI::IsMember(drope::names_of<drope::QkNorm>()));
  drop->add_flag("--per-head", per_head, "QK-norm per head instead of over the whole projection");
  drop->add_option("--dtype", dtype, "Stored dtype: float32 | bfloat16 | float16");
  add_format(drop);
  drop->add_flag("--force", force, force_help);

  std::string gguf_file, dequantize_out;
  auto* gg = cli.add_subcommand("gguf", "Print a GGUF file's metadata and tensors; optionally dequantise them all");
  gg->add_option("--file", gguf_file, "GGUF file")->required();
  gg->add_option("--dequantize", dequantize_out, "Write every tensor as float32 (GGUF names) to this .safetensors");

  drope::app::add_log_flags(cli, "drope-model");
  drope::app::check_numeric_flags(cli);

  CLI11_PARSE(cli, argc, argv);
  return drope::app::run([&] {
    if (*gg) {
      gguf_info(gguf_file, dequantize_out);
      return 0;
    }
    if (*info) {
      if (!model_dir.empty()) {
        auto m = drope::io::load_model(model_dir, import_options(positional));
        print_info(m);
      } else {
        if (!positional.empty()) drope::fail("--positional applies to --model (an imported directory)");
        drope::DecoderLM m(config_from(config, preset));
        print_info(m);
      }
      return 0;
    }
    if (*convert && !from.empty()) {
      if (from[0] != "gguf") drope::fail("--from: unknown format '{}' (expected: --from gguf FILE)", from[0]);
      if (!drope::gguf::is_gguf_path(from[1])) drope::fail("--from gguf: '{}' is not a .gguf file", from[1]);
      model_dir = from[1];
    }
    if (*convert && model_dir.empty()) drope::fail("convert: give --model DIR|FILE.gguf or --from gguf FILE");
    auto so = save_options(model_dir, dtype, format, force);
    drope::io::check_model_output(out, so);  // before loading anything
    if ((*convert || *drop) && drope::gguf::is_gguf_path(model_dir)) so.extra_files = gguf_extras(model_dir);
    if (*init) {
      drope::DecoderLM m(config_from(config, preset));
      m->reset_parameters(seed);
      print_info(m);
      save(m, out, so);
    } else if (*convert) {
      auto m = drope::io::load_model(model_dir, import_options(positional));
      if (!so.extra_files.empty()) check_vocab_fits(model_dir, m);
      save(m, out, so);
    } else if (*drop) {
      auto m = drope::io::load_model(model_dir);
      if (!so.extra_files.empty()) check_vocab_fits(model_dir, m);
      auto d = drope::drop_positional(m, {drope::parse_name<drope::QkNorm>(qk_norm, "--qk-norm"), per_head});
      print_info(d);
      save(d, out, so);
    }
    return 0;
  });
}
