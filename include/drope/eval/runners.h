// The evaluation runs behind drope-eval's subcommands, as library calls: each takes its options, validates
// everything cheap before loading a model, prints progress, and writes its results (eval/results.h) and
// plots atomically. drope-eval only parses flags into these structs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "drope/eval/generate.h"
#include "drope/eval/method.h"
#include "drope/eval/perplexity.h"
#include "drope/tasks/niah.h"

namespace drope::eval {

// Upper bound of every token-length option (lengths, windows): 4M tokens.
inline constexpr int64_t kMaxEvalTokens = int64_t(1) << 22;

// Longest prompt text that generate and LongBench tokenise (64 MiB: kMaxEvalTokens tokens of 16 bytes each, more
// than any context holds). A prompt is tokenised whole (LongBench truncates its tokens in the middle), so a
// longer one is refused, naming its file and line, before any of it is tokenised.
inline constexpr uint64_t kMaxPromptBytes = uint64_t(64) << 20;

// Evaluation text: token-dataset splits (a directory with index.json), jsonl files (one document per line,
// field text_key) or plain text files (one document each).
struct EvalData {
  std::vector<std::string> paths;
  std::string split = "val";
  std::string text_key = "text";
};

// Lengths from --lengths, or --multipliers × the training length (rounded); both or neither given, a
// multiplier ≤ 0, a length < 2 or > kMaxEvalTokens fail naming the flag.
std::vector<int64_t> resolve_lengths(const std::vector<int64_t>& lengths, const std::vector<double>& mult,
                                     int64_t train_len);

// ---- perplexity (docs/design.md#perplexity) --------------------------------------------------------------

struct PplRun {
  MethodSpec method;
  EvalData data;
  std::vector<int64_t> lengths;      // window lengths, or
  std::vector<double> multipliers;   // multiples of the training length
  PerplexityOptions protocol;        // stride, truncate, max_tokens, max_windows
  std::string out = "results/ppl";   // prefix of .json/.csv/.md and .png/.svg
  std::vector<std::string> with;     // earlier ppl results drawn beside this method
};
void run_ppl(const PplRun& r);

struct TemperatureFitRun {
  MethodSpec method;
  EvalData data;
  std::vector<int64_t> lengths;
  std::vector<double> multipliers;   // default {2, 4} when neither is given
  PerplexityOptions protocol;
  double beta_max = 2.5;
  std::string save;                  // default <model>/temperature.json
  std::string out;                   // optional tables and plot
  // Instead of `data`: a synthetic task's held-out sequences ("offset-key": perplexity of the answers).
  std::string task;
  int64_t queries = 512;             // task: answers per length
  uint64_t seed = 42;                // task: generator seed
  int64_t batch = 16;                // task: sequences per forward
};
void run_fit_temperature(const TemperatureFitRun& r);

// ---- needle in a haystack (docs/design.md#needle-in-a-haystack) ---------------------------------------------

struct NiahRunCommon {
  MethodSpec method;
  std::string lengths;               // comma-separated target lengths (prompt + generation)
  int64_t trials = 0;
  uint64_t seed = 42;
  std::string haystack = tasks::kDefaultHaystack;  // essay file or directory
  std::string haystack_start = "random";  // random | begin
  int64_t batch = 1;
  int64_t max_new_tokens = 128;
  bool bos = false;
  std::string out;
  std::string dump;                  // write the prompts as jsonl and stop (tokenizer only)
};

// One RULER NIAH cell: `trials` samples of a task at one target length, greedy generations, string_match_all
// scores (drope-eval niah computes each of its cells with it; drope-train's eval.niah_lengths too).
struct NiahCellOptions {
  int64_t trials = 1;
  uint64_t seed = 42;
  int64_t max_new_tokens = 128;
  int64_t batch = 1;
  bool bos = false;
  bool random_excerpt = true;  // --haystack-start random (else begin)
  std::string progress;        // a progress label per batch; empty = silent
};
struct NiahCell {
  std::vector<tasks::NiahSample> samples;
  std::vector<Generation> generations;
  std::vector<std::string> outputs;  // post-processed generations
  std::vector<double> scores;        // per sample, %
  double score = 0;                  // their mean
};
NiahCell niah_cell(DecoderLM& model, const text::Tokenizer& tok, const tasks::NiahTask& task, int64_t length,
                   const tasks::EssayText& essay, const NiahCellOptions& o);

struct NiahRun {
  NiahRunCommon c;
  std::string tasks = "all";
};
void run_niah(const NiahRun& r);

struct NiahGridRun {
  NiahRunCommon c;
  std::string depths = "0,10,20,30,40,50,60,70,80,90,100";
};
void run_niah_grid(const NiahGridRun& r);

// ---- LongBench (docs/design.md#longbench) -------------------------------------------------------------------

struct LongBenchRun {
  MethodSpec method;
  std::string data, tasks = "all", out, chat_format;
  bool e = false, bos = false;
  int64_t max_length = 0, limit = 0, batch_size = 1, prefill_chunk = 2048;
};
void run_longbench(const LongBenchRun& r);

struct LongBenchScoreRun {
  std::string pred, out;
  bool e = false;
};
void run_longbench_score(const LongBenchScoreRun& r);

// ---- generation and comparison ------------------------------------------------------------------------------

struct GenerateRun {
  MethodSpec method;
  std::vector<std::string> prompts;
  std::string prompts_file;          // jsonl with {"prompt": ...} per line
  GenerateOptions options;
  bool bos = false;
  std::string out;                   // jsonl; empty = print
};
void run_generate(const GenerateRun& r);

// Several results files of one kind side by side: methods as rows, every numeric summary entry a column.
struct CompareRun {
  std::vector<std::string> files;
  std::string out = "results/compare";
  std::string title;
  // Also draw <out>.png/.svg: summary entries "<plot>@L" against L, one line per method label; files that
  // share a label are seeds of one method (their mean, with a min–max band).
  std::string plot;
};
void run_compare(const CompareRun& r);

}  // namespace drope::eval
