// The run config's settings, each declared once: one row per key (name, type, allowed values, a doc line and
// what `--resume` may do with it) that drives the YAML reading and its range checks, the resolved config
// (--print-config, config.yaml, a checkpoint's run.yaml), the resume comparison (resume_settings.h),
// drope-train's --help and the tables of docs/training.md (`drope-train settings --doc docs/training.md`
// rewrites them). The values and their defaults are RunConfig's fields (run_config.h); the `model:` section is
// ModelConfig's own (docs/formats.md).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "drope/core/numbers.h"
#include "drope/core/yaml.h"
#include "drope/train/run_config.h"

namespace drope::train {

// What `--resume` may do with a changed setting: the checkpoint's steps must be those the new value would
// have taken (docs/training.md, "What --resume may change").
enum class OnResume {
  kReports,    // how long the run goes on and what it reports: free
  kSameStep,   // how a step is computed, the same step up to float rounding: free
  kSameLr,     // free while the learning rate of every step already taken stays the same
  kDropAhead,  // free while the drop of the positional embeddings lies ahead of the checkpoint under both values
  kSameFile,   // only another spelling of the same file or directory
  kFixed,      // refused
};

struct Setting {
  std::string key;      // "train.steps": the section, a dot, the name in that section
  std::string type;     // "integer", "number", "bool", "string", "path", "name", "integers", ...
  std::string choices;  // the allowed names, "a | b | c" (names only)
  std::optional<Interval> range;  // numbers: the allowed interval (of each element, for a list)
  std::string doc;                // one line
  OnResume resume = OnResume::kFixed;
  std::string default_note;  // shown instead of the default value when it is not a constant ("= train.steps")

  // Reads the key from its section when present (false when absent); type errors name file:line:key.
  std::function<bool(YamlMap&, const std::string& name, RunConfig&)> read;
  // Writes the value (after its key) to a YAML mapping being emitted.
  std::function<void(YAML::Emitter&, const RunConfig&)> emit;
  // True when the key is left out of the resolved config (an optional setting that is unset).
  std::function<bool(const RunConfig&)> omitted;
  // Fails with "<source>: <key> must be ..., got ..." when the value is outside `range` (or a row's own rule).
  std::function<void(const RunConfig&, const std::string& source)> check;

  std::string section() const { return key.substr(0, key.find('.')); }
  std::string name() const { return key.substr(key.find('.') + 1); }
};

// Every setting, in the order of the resolved config; sections in setting_sections() order.
const std::vector<Setting>& run_settings();
// The sections of a run config in order, `model` (ModelConfig's, not in run_settings()) included.
const std::vector<std::string>& setting_sections();
// The row of "section.name", or nullptr (model.* keys and unknown keys).
const Setting* find_setting(const std::string& key);
// What --resume may do with `key`: its row's rule; keys without a row (the model: section) are fixed.
OnResume resume_rule(const std::string& key);
// The value of `c`'s setting as the resolved config writes it ("1000", "[0.9, 0.95]", "cosine").
std::string setting_value(const Setting& s, const RunConfig& c);

// An interval as the docs write it: ">= 1", "> 0", "[0, 1)", "(0, 1048576]".
std::string range_text(const Interval& r);

// For drope-train --help: the keys of every section, wrapped to `width` columns.
std::string settings_help(size_t width = 100);
// `drope-train settings`: one block per setting (key, type, default, allowed values, resume rule, doc line).
std::string settings_text();
// The generated sections of docs/training.md, each between `<!-- NAME:begin -->` and `<!-- NAME:end -->`:
// train-settings (every key) and resume-settings (what --resume may change).
std::string settings_markdown();
// `doc_text` (the contents of `file`) with its generated sections replaced by settings_markdown()'s; fails naming
// `file` when a section's markers are missing, repeated or out of order.
std::string with_settings_sections(const std::string& doc_text, const std::string& file);

}  // namespace drope::train
