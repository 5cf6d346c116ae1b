// drope-model's flag parsing: one registration function per command family, each filling its own flags and
// calling the library (drope/io/model_io.h, model_info.h, drope/model/drope.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "drope/config/model_config.h"
#include "drope/io/model_io.h"

namespace drope::modelcli {

// The flags of every command that reads or writes a model (each command fills its own copy).
struct ModelFlags {
  std::string model_dir, config, preset, out, dtype = "float32", qk_norm = "none", format = "drope", positional;
  std::vector<std::string> from;  // convert --from gguf FILE
  uint64_t seed = 0;
  bool per_head = false, force = false;
};

// --positional (rope | nope) on `cmd`.
void add_positional_option(CLI::App* cmd, std::string& positional);
// The model of --config FILE or --preset NAME (exactly one).
ModelConfig config_from(const std::string& config, const std::string& preset);
// The import options of --positional ("" = none).
io::ImportOptions import_options(const std::string& positional);

// Command families; each callback stores its exit status in `rc`.
void add_info_command(CLI::App& cli, int& rc);    // info: a model's shape, layer plan and parameter count
void add_write_commands(CLI::App& cli, int& rc);  // init, convert, drop: write a model directory
void add_gguf_command(CLI::App& cli, int& rc);    // gguf: a GGUF file's metadata and tensors

}  // namespace drope::modelcli
