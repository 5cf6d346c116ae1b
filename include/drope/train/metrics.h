// What a training run reports: the JSON-lines log (log.jsonl) and its TensorBoard mirror, written by rank 0,
// and the console's step lines (loss, learning rate, throughput, MFU, ETA) and progress bar. The Trainer owns
// one RunMetrics and hands it each step's numbers; the arithmetic is exposed for tests.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "drope/core/fd_write.h"
#include "drope/core/tfevents.h"

namespace drope::train {

struct MetricsOptions {
  std::string out_dir;       // log.jsonl and the TensorBoard events file go here
  int64_t steps = 0;         // train.steps
  int64_t log_every = 1;     // train.log_every
  double peak_tflops = 0;    // train.peak_tflops (<= 0: no MFU)
  bool tensorboard = false;  // train.tensorboard
  bool main_rank = false;    // rank 0 writes the files
  bool console = false;      // console lines (the logger picks the ranks that print)
};

// One optimizer step's numbers as the logs report them.
struct StepNumbers {
  double loss = 0, lr = 0, grad_norm = 0;
};

class RunMetrics {
 public:
  // Opens the logs (rank 0): log.jsonl cut after `step` when the run resumes from that step, else emptied,
  // and with train.tensorboard a new events file whose first step is step + 1.
  void open(const MetricsOptions& o, int64_t step, bool resumed);
  // Model FLOPs per token (forward + backward), for MFU.
  void set_flops_per_token(double f) { flops_per_token_ = f; }
  // The clock starts: `step` steps are done before this start's first one.
  void start(int64_t step);
  // Tokens of a step that updated the weights (throughput counts these).
  void add_tokens(int64_t n) { tokens_since_ += n; }
  // After step `step` (1-based): its log line every train.log_every steps, at the first and the last one, its
  // console line then and at the first step after a resume, else the progress bar on a terminal. `tokens`: the
  // run's total so far; `fields` adds the engine's fields to a line that is written.
  void step(int64_t step, int64_t tokens, const StepNumbers& r, bool finite,
            const std::function<void(nlohmann::json&)>& fields);
  // A validation at `step`: its log line and console line.
  void validation(int64_t step, double val_loss);
  // One line of log.jsonl (and its numbers to TensorBoard); rank 0 only, a no-op elsewhere.
  void line(const nlohmann::json& j);

  // Tokens per second over `seconds` (0 when no time passed).
  static double tokens_per_s(int64_t tokens, double seconds);
  // Model FLOPs utilisation: achieved FLOP/s over the peak; -1 without a peak (peak_tflops <= 0).
  static double mfu(double flops_per_token, double tokens_per_s, double peak_tflops);
  // Seconds left: the mean time of the steps run so far times the steps left.
  static double eta_s(double elapsed_s, int64_t steps_run, int64_t steps_left);
  // "step     10/100 | loss 2.5000 | lr 3.00e-04 | grad-norm 1.250 | 12.3k tok/s | MFU 45.0% | ETA 1m10s"
  static std::string step_line(int64_t step, int64_t steps, const StepNumbers& r, double tokens_per_s, double mfu,
                               double eta_s);
  // "[#####.....] step 5/10", 30 characters wide.
  static std::string progress_bar(int64_t step, int64_t steps);

 private:
  MetricsOptions o_;
  std::string log_path_;
  AppendFile log_file_;  // log.jsonl
  std::unique_ptr<EventFileWriter> events_;
  bool tty_ = false;  // the console is a terminal: progress bars between the step lines
  double flops_per_token_ = 0;
  std::chrono::steady_clock::time_point t_start_, t_last_;
  int64_t tokens_since_ = 0, first_step_ = 0;
};

// The machine's GEMM roof as `drope-bench peak --save` measured it: GFLOP/s per dtype ("float32", "bfloat16") of
// LibTorch's mm at a thread count, on one CPU model at one instruction-set setting. MFU divides by the roof of the
// dtype a run trains in.
struct GemmRoof {
  std::string cpu;                        // CPU model name (/proc/cpuinfo)
  std::string levels;                     // kernels::describe_cpu_levels() then (the ISA caps in force)
  int threads = 0;                        // intra-op threads
  std::map<std::string, double> gflops;   // per dtype
};
// $DROPE_PEAK_FILE, else $XDG_CACHE_HOME/drope/peak.json, else ~/.cache/drope/peak.json.
std::string roof_file_path();
nlohmann::json roof_json(const GemmRoof& roof);
void write_roof(const std::string& path, const GemmRoof& roof);
// The roof saved at `path`; nullopt when there is none. A malformed file fails naming it.
std::optional<GemmRoof> read_roof(const std::string& path);
// This CPU's model name, "unknown CPU" when /proc/cpuinfo has none.
std::string cpu_model_name();
// The peak MFU divides by, in TFLOP/s: `peak_override` (train.peak_tflops) when > 0; else the roof of `dtype` when
// `roof` was measured on this CPU model (`cpu`), at these levels and this thread count; else 0 (no MFU). `why`, if
// given, gets a line saying which.
double mfu_peak_tflops(double peak_override, const std::string& dtype, const std::optional<GemmRoof>& roof,
                       const std::string& cpu, const std::string& levels, int threads, std::string* why = nullptr);
// The peak a training run divides by: train.peak_tflops when > 0, else (on the CPU) the saved roof of the dtype
// it trains in (read_roof(roof_file_path()), matched to this CPU, levels and intra-op threads); logs which.
double training_peak_tflops(double peak_override, const std::string& dtype, bool cpu, bool say);

}  // namespace drope::train
