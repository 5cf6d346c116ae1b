// drope-bench's flag parsing: one registration function per benchmark, each filling the run struct of
// drope/bench/runners.h and calling its runner.
#pragma once

#include <CLI/CLI.hpp>

namespace drope::benchcli {

// Each callback stores its exit status in `rc`.
void add_attention_command(CLI::App& cli, int& rc);  // attention: fused attention vs SDPA vs reference
void add_generate_command(CLI::App& cli, int& rc);   // generate: KV-cache generation throughput
void add_layers_command(CLI::App& cli, int& rc);     // layers: fused RMSNorm / rotary / SwiGLU, stacked GEMMs
void add_step_parts_command(CLI::App& cli, int& rc); // step-parts: the fused loss and fused AdamW, on and off
void add_peak_command(CLI::App& cli, int& rc);       // peak: the GEMM roof per dtype, for MFU

}  // namespace drope::benchcli
