// drope-analyze's flag parsing: one registration function per command family, each filling the run struct of
// drope/analyze/runners.h and calling its runner while it holds --out.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

#include "drope/analyze/runners.h"
#include "drope/core/files.h"

namespace drope::analyzecli {

// What a run reads, as (flag, path) pairs for the output rule (check_output_paths).
using Inputs = std::vector<std::pair<std::string, std::string>>;

// Refuses --out when it is an input or inside one (check_output_paths), then locks it for the run: a second
// drope-analyze writing the same directory is refused. An empty `out` (print only) is neither.
DirLock claim_out(const std::string& out, const Inputs& inputs);

// Command families; each callback stores its exit status in `rc`.
void add_rope_scaling_command(CLI::App& cli, int& rc);      // rope-scaling: γ_m of PI, NTK, YaRN (Figure 6)
void add_bias_grad_command(CLI::App& cli, int& rc);         // bias-grad: gradients of A^c (Figure 3)
void add_model_commands(CLI::App& cli, int& rc);            // constant-seq, attention, head-scores
void add_needle_attention_command(CLI::App& cli, int& rc);  // needle-attention (Figures 7–8)

}  // namespace drope::analyzecli
