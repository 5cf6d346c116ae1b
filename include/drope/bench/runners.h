// The benchmarks behind drope-bench's subcommands, as library calls: each takes its options, validates them,
// prints its table or JSON line on stdout and writes its JSON file atomically. drope-bench only parses flags
// into these structs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "drope/bench/attention_bench.h"

namespace drope::bench {

// attention: fused attention vs SDPA (plain, dense mask) vs the plain-ATen reference (attention_bench.h).
struct AttentionRun {
  AttentionBenchOptions options;     // dtype, backward, impls and log are set from the fields below
  std::string dtype = "float32";     // float32 | bfloat16 | float64
  bool forward_only = false;         // skip forward+backward
  bool default_impls = true;         // options.impls not given: default_attention_impls(options.device)
  std::string json;                  // also write every number as JSON here
};
void run_attention(const AttentionRun& r);

// layers: forward and forward+backward time of each fused layer kernel (RMSNorm, rotary, SwiGLU, stacked
// q/k/v projections) against the same math in separate ATen ops, timed alternately; a Markdown table.
struct LayersRun {
  int64_t batch = 8, seq = 512, hidden = 256, heads = 8, kv_heads = 2, head_dim = 32, ffn = 768;
  int repeats = 20;                  // timed runs of each path (median reported)
  int threads = 0;                   // intra-op threads; 0 = LibTorch's default
  std::string dtype = "float32";     // float32 | float64
  std::string json;                  // also write the numbers as JSON here
};
void run_layers(const LayersRun& r);

// step-parts: the LM head's loss (forward+backward; fused chunks, the chunks in separate passes, and the whole
// logits as eager PyTorch runs it) and the AdamW update over a preset model's parameters (LibTorch's fused kernel
// vs separate ops), each timed alternately; a Markdown table.
struct StepPartsRun {
  std::string preset = "small-50m";  // model preset: vocabulary, hidden size and parameters
  int64_t rows = 2048;               // tokens in the loss (batch x sequence)
  int repeats = 10;                  // timed runs of each path (median reported)
  int threads = 0;                   // intra-op threads; 0 = LibTorch's default
  std::string json;                  // also write the numbers as JSON here
};
void run_step_parts(const StepPartsRun& r);

// generate: prefill and decode throughput of greedy generation with the KV cache for one context length
// (peak RSS is per process); one JSON line on stdout.
struct GenerateRun {
  std::string model;                 // model directory
  std::string device = "cpu";        // cpu | cuda
  int64_t context = 2048;            // prompt tokens
  int64_t new_tokens = 64;           // tokens generated per run (the first ends the prefill)
  int64_t chunk = 2048;              // prompt tokens per prefill forward
  int threads = 0;                   // intra-op threads; 0 = LibTorch's default
  uint64_t seed = 0;                 // of the random prompt
  int repeats = 3;                   // timed runs after a warm-up; the fastest is reported
  std::string json;                  // also write the numbers as JSON here
};
void run_generate(const GenerateRun& r);

// peak: the machine's GEMM roof per dtype, LibTorch's mm on square and training-shaped products at the training's
// thread count, every (dtype, shape) once per round, medians over rounds; the roof of a dtype is its fastest
// shape's median. A Markdown table; with save, the roof file drope-train's MFU reads (train/metrics.h).
struct PeakRun {
  int threads = 0;                   // intra-op threads; 0 = LibTorch's default (what drope-train uses)
  int rounds = 7;                    // interleaved rounds (median reported)
  std::vector<std::string> dtypes{"float32", "bfloat16"};
  std::string json;                  // also write the numbers as JSON here ("-": one line on stdout)
  bool save = false;                 // write the roof to train::roof_file_path()
};
void run_peak(const PeakRun& r);

}  // namespace drope::bench
