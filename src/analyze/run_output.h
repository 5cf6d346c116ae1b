// Internal to the drope-analyze runners (src/analyze/*_run.cpp): model selection and output files.
#pragma once

#include <string>

#include "drope/plot/plot.h"

namespace drope::analyze::detail {

// The display name of a model directory or config file: its last path component without extension.
std::string stem_of(const std::string& path);

// Writes `fig` as <dir>/<stem>.png and .svg; "wrote PATH" on stderr for each.
void write_figure(const plot::Figure& fig, const std::string& dir, const std::string& stem);
void write_figure(const plot::Heatmap& map, const std::string& dir, const std::string& stem);

// Writes `text` to <dir>/<name> atomically; "wrote PATH" on stderr.
void write_text(const std::string& dir, const std::string& name, const std::string& text);

}  // namespace drope::analyze::detail
