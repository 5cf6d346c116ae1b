// Flags of `drope-model info` and `drope-model gguf` (io::model_info, io::print_gguf_info).
#include <memory>

#include <fmt/format.h>

#include "app_common.h"
#include "drope/config/names.h"
#include "drope/core/error.h"
#include "drope/io/model_info.h"
#include "model/commands.h"

namespace drope::modelcli {

void add_positional_option(CLI::App* cmd, std::string& positional) {
  cmd->add_option("--positional", positional,
                  "Override the imported model's positional encoding in every layer: rope | nope (a RoPE-less "
                  "checkpoint saved as plain Llama: nope)")
      ->check(CLI::IsMember(io::import_positional_names()));
}

ModelConfig config_from(const std::string& config, const std::string& preset) {
  if (!config.empty() && !preset.empty()) fail("give either --config or --preset, not both");
  if (!config.empty()) return load_model_config_file(config);
  if (!preset.empty()) return model_preset(preset);
  fail("give --config FILE or --preset NAME");
}

io::ImportOptions import_options(const std::string& positional) {
  io::ImportOptions o;
  if (positional.empty()) return o;
  o.positional = parse_name<PositionalType>(positional, "--positional");
  io::check_import_positional(*o.positional, "--positional");
  return o;
}

void add_info_command(CLI::App& cli, int& rc) {
  auto f = std::make_shared<ModelFlags>();
  auto* info = cli.add_subcommand("info", "Print a model's shape, layer plan and parameter count");
  info->add_option("--model", f->model_dir, "Model directory or .gguf file");
  info->add_option("--config", f->config, "Model YAML config");
  info->add_option("--preset", f->preset, "Preset name");
  add_positional_option(info, f->positional);
  info->callback([f, &rc] {
    rc = app::run([&] {
      if (!f->model_dir.empty()) {
        auto m = io::load_model(f->model_dir, import_options(f->positional));
        fmt::print("{}", io::model_info(m));
      } else {
        if (!f->positional.empty()) fail("--positional applies to --model (an imported directory)");
        DecoderLM m(config_from(f->config, f->preset));
        fmt::print("{}", io::model_info(m));
      }
      return 0;
    });
  });
}

void add_gguf_command(CLI::App& cli, int& rc) {
  auto file = std::make_shared<std::string>(), out = std::make_shared<std::string>();
  auto* gg = cli.add_subcommand("gguf", "Print a GGUF file's metadata and tensors; optionally dequantise them all");
  gg->add_option("--file", *file, "GGUF file")->required();
  gg->add_option("--dequantize", *out, "Write every tensor as float32 (GGUF names) to this .safetensors");
  gg->callback([file, out, &rc] {
    rc = app::run([&] {
      io::print_gguf_info(*file, *out);
      return 0;
    });
  });
}

}  // namespace drope::modelcli
