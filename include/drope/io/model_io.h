// Model directories: HF Llama/Qwen2/SmolLM3 and the DroPE authors' llama_drope/qwen2_drope (`config.json` +
// `model.safetensors` or a sharded index) and our own (`drope.yaml` + the same HF-named safetensors). Import,
// export and strict weight loading.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include "drope/config/model_config.h"
#include "drope/formats/hf_config.h"
#include "drope/model/transformer.h"

namespace drope::io {

// What the user says about a directory that its files do not (`--positional` on import, `run.init_positional`).
struct ImportOptions {
  // rope or nope: the positional encoding of every layer, whatever the config says (a RoPE-less checkpoint
  // saved as plain Llama: nope). Weights, windows and QK-norm are kept; RoPE scaling goes with nope.
  std::optional<PositionalType> positional;
  // A training checkpoint (a model directory with state.json) is verified against the digests and run identity
  // its state.json records; a mismatch is an error naming the file and tensor, or with this set (weights
  // grafted on purpose: drope-train --allow-foreign-checkpoint) a warning.
  bool allow_foreign_checkpoint = false;
  bool verify_checkpoint = true;  // false: the caller verifies the checkpoint itself (train::load_checkpoint)
};

// The positional types an import may be overridden with (rope, nope: names from the positional-type table).
std::vector<std::string> import_positional_names();
// Checks an ImportOptions::positional choice, naming `where` (the flag or YAML key).
void check_import_positional(PositionalType t, const std::string& where);

// A model directory's config and what loading its weights must know.
struct ModelSource {
  ModelConfig config;
  std::string config_file;           // drope.yaml or config.json
  std::vector<UnusedTensor> unused;  // stored per-layer tensors the model does not use (skipped with a warning)
  std::string unused_reason;
};

// Reads the config of a model directory: drope.yaml when present (then a config.json beside it must describe
// the same model: a key that disagrees is an error naming both files and the key), else config.json; then
// applies `opt`.
// A `*.gguf` file stands for a directory here and in load_model / load_weights (drope/io/gguf_import.h).
ModelSource read_model_source(const std::string& dir, const ImportOptions& opt = {});
// read_model_source(dir, opt).config.
ModelConfig load_model_config_dir(const std::string& dir, const ImportOptions& opt = {});

// Loads weights by HF name into `model` (converted to the model's dtype). Every parameter must be
// present with the right shape and a floating-point dtype (F32, F16, BF16, F64); unknown tensors are errors (rotary
// inv_freq buffers are ignored, and so are the unused norms the DroPE authors' q-only / k-only checkpoints store, with
// a warning).
void load_weights(DecoderLM& model, const std::string& dir);

// Config + weights, float32 on CPU; a training checkpoint's files are verified as ImportOptions says.
DecoderLM load_model(const std::string& dir, const ImportOptions& opt = {});

struct SaveOptions {
  at::ScalarType dtype = at::kFloat;        // stored dtype of the weights
  bool replace_any = false;  // replace an existing non-empty directory even if it is not a model of ours
  ModelFormat format = ModelFormat::kDrope;  // drope-reference: the DroPE authors' config.json, no drope.yaml
  // More files written into the directory with the model (name inside the directory → content), e.g. the
  // tokenizer files of an imported GGUF.
  std::vector<std::pair<std::string, std::string>> extra_files;
  std::vector<std::pair<std::string, std::string>> inputs;  // (flag, path) the output must not be, be in or hold
  std::map<std::string, std::string> metadata;  // more model.safetensors metadata (a checkpoint's run and step)
};
// Fails (naming --out) unless `dir` may receive a model under check_output_dir's rule: not an input, and
// absent, empty or a drope model directory unless opt.replace_any.
void check_model_output(const std::string& dir, const SaveOptions& opt);
// Writes drope.yaml, model.safetensors and (when HF can express the model) config.json, atomically
// as a directory; with format drope-reference, the authors' config.json and model.safetensors (with the
// unused norm of q-only / k-only models, weight 1) instead. An existing non-empty `dir` without drope.yaml is
// refused unless opt.replace_any, and so is an output that is, is inside or holds one of opt.inputs. The
// directory is locked (DirLock) while it is written. Returns whether config.json was written.
bool save_model(DecoderLM& model, const std::string& dir, const SaveOptions& opt = {});
// The same files written into an existing directory (for callers that build a directory atomically).
bool write_model_files(DecoderLM& model, const std::string& dir, const SaveOptions& opt = {});

}  // namespace drope::io
