// Flags of `drope-model init`, `convert` and `drop` (io::save_model, io::load_model, drop_positional).
#include <memory>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "app_common.h"
#include "drope/config/names.h"
#include "drope/core/error.h"
#include "drope/core/log.h"
#include "drope/formats/gguf.h"
#include "drope/io/model_info.h"
#include "drope/model/drope.h"
#include "drope/text/gguf_tokenizer.h"
#include "model/commands.h"

namespace drope::modelcli {

namespace {

at::ScalarType parse_dtype(const std::string& s) {
  if (s == "float32" || s == "f32") return at::kFloat;
  if (s == "bfloat16" || s == "bf16") return at::kBFloat16;
  if (s == "float16" || s == "f16") return at::kHalf;
  fail("--dtype must be float32, bfloat16 or float16, got '{}'", s);
}

// The tokenizer files of a GGUF model, written beside the converted weights; a summary line of its tensors.
std::vector<std::pair<std::string, std::string>> gguf_extras(const std::string& path) {
  const gguf::File f(path);
  fmt::print("{}", io::gguf_read_summary(path, f.header()));
  return text::gguf_tokenizer_files(f).files();
}

// A GGUF's vocabulary must fit its embedding: a token id beyond the rows would index nothing.
void check_vocab_fits(const std::string& path, DecoderLM& m) {
  const int64_t tokens = text::load_gguf_tokenizer(path)->vocab_size(), rows = m->config().vocab_size;
  if (tokens > rows)
    fail("{}: tokenizer.ggml.tokens has {} entries but token_embd.weight only {} rows; ids from {} on would "
         "have no embedding",
         path, tokens, rows, rows);
}

io::SaveOptions save_options(const ModelFlags& f) {
  io::SaveOptions o;
  o.dtype = parse_dtype(f.dtype);
  o.replace_any = f.force;
  o.format = parse_name<ModelFormat>(f.format, "--format");
  if (!f.model_dir.empty()) o.inputs = {{"--model", f.model_dir}};
  return o;
}

void save(DecoderLM& m, const std::string& out, const io::SaveOptions& o) {
  const bool hf = io::save_model(m, out, o);
  if (o.format == ModelFormat::kDropeReference)
    logging::info("saved {} (DroPE reference config.json, model_type {}_drope + model.safetensors)", out,
                  m->config().arch);
  else
    logging::info("saved {} ({})", out,
                  hf ? "drope.yaml + HF config.json + model.safetensors"
                     : "drope.yaml + model.safetensors; HF cannot express this model");
}

enum class Write { kInit, kConvert, kDrop };

// Checks --out before loading anything, then writes the model the command makes.
int write_model(ModelFlags& f, Write what) {
  if (what == Write::kConvert && !f.from.empty()) {
    if (f.from[0] != "gguf") fail("--from: unknown format '{}' (expected: --from gguf FILE)", f.from[0]);
    if (!gguf::is_gguf_path(f.from[1])) fail("--from gguf: '{}' is not a .gguf file", f.from[1]);
    f.model_dir = f.from[1];
  }
  if (what == Write::kConvert && f.model_dir.empty()) fail("convert: give --model DIR|FILE.gguf or --from gguf FILE");
  auto so = save_options(f);
  io::check_model_output(f.out, so);  // before loading anything
  if (what != Write::kInit && gguf::is_gguf_path(f.model_dir)) so.extra_files = gguf_extras(f.model_dir);
  if (what == Write::kInit) {
    DecoderLM m(config_from(f.config, f.preset));
    m->reset_parameters(f.seed);
    fmt::print("{}", io::model_info(m));
    save(m, f.out, so);
  } else if (what == Write::kConvert) {
    auto m = io::load_model(f.model_dir, import_options(f.positional));
    if (!so.extra_files.empty()) check_vocab_fits(f.model_dir, m);
    save(m, f.out, so);
  } else {
    auto m = io::load_model(f.model_dir);
    if (!so.extra_files.empty()) check_vocab_fits(f.model_dir, m);
    auto d = drop_positional(m, {parse_name<QkNorm>(f.qk_norm, "--qk-norm"), f.per_head});
    fmt::print("{}", io::model_info(d));
    save(d, f.out, so);
  }
  return 0;
}

}  // namespace

void add_write_commands(CLI::App& cli, int& rc) {
  const char* force_help = "Replace --out even if it is a non-empty directory that is not a drope model";
  const auto add_format = [](CLI::App* c, ModelFlags& f) {
    c->add_option("--format", f.format,
                  "Output format: drope (drope.yaml + safetensors, HF config.json when HF can express "
                  "the model) | drope-reference (the DroPE authors' llama_drope / qwen2_drope config.json)")
        ->check(CLI::IsMember(names_of<ModelFormat>()));
  };
  const auto on_run = [&rc](CLI::App* c, const std::shared_ptr<ModelFlags>& f, Write what) {
    c->callback([f, what, &rc] { rc = app::run([&] { return write_model(*f, what); }); });
  };

  auto in = std::make_shared<ModelFlags>();
  auto* init = cli.add_subcommand("init", "Randomly initialise a model (N(0, init_std)) and save it");
  init->add_option("--config", in->config, "Model YAML config");
  init->add_option("--preset", in->preset, "Preset name");
  init->add_option("--seed", in->seed, "Initialisation seed");
  init->add_option("--out", in->out, "Output directory")->required();
  init->add_option("--dtype", in->dtype, "Stored dtype: float32 | bfloat16 | float16");
  add_format(init, *in);
  init->add_flag("--force", in->force, force_help);
  on_run(init, in, Write::kInit);

  auto cv = std::make_shared<ModelFlags>();
  auto* convert = cli.add_subcommand("convert", "Import a model (HF or drope directory, GGUF file) and write it back");
  auto* model_opt = convert->add_option("--model", cv->model_dir, "Input model directory or .gguf file");
  convert->add_option("--from", cv->from, "Import a file of another format: --from gguf FILE (llama / qwen2 GGUF)")
      ->expected(2)
      ->excludes(model_opt);
  convert->add_option("--out", cv->out, "Output directory")->required();
  convert->add_option("--dtype", cv->dtype, "Stored dtype: float32 | bfloat16 | float16");
  add_positional_option(convert, cv->positional);
  add_format(convert, *cv);
  convert->add_flag("--force", cv->force, force_help);
  on_run(convert, cv, Write::kConvert);

  auto dr = std::make_shared<ModelFlags>();
  auto* drop = cli.add_subcommand("drop", "DroPE: remove positional embeddings from every layer, keep weights");
  drop->add_option("--model", dr->model_dir, "Input model directory or .gguf file")->required();
  drop->add_option("--out", dr->out, "Output directory")->required();
  drop->add_option("--qk-norm", dr->qk_norm, join_names(names_of<QkNorm>()))->check(CLI::IsMember(names_of<QkNorm>()));
  drop->add_flag("--per-head", dr->per_head, "QK-norm per head instead of over the whole projection");
  drop->add_option("--dtype", dr->dtype, "Stored dtype: float32 | bfloat16 | float16");
  add_format(drop, *dr);
  drop->add_flag("--force", dr->force, force_help);
  on_run(drop, dr, Write::kDrop);
}

}  // namespace drope::modelcli
