#include "drope/train/metrics.h"
#include "drope/core/environment.h"

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include <ATen/Parallel.h>
#include <fmt/format.h>

#include "drope/core/duration.h"
#include "drope/core/error.h"
#include "drope/core/files.h"
#include "drope/core/json.h"
#include "drope/core/log.h"
#include "drope/kernels/cpu_isa.h"

namespace fs = std::filesystem;

namespace drope::train {

namespace {

// Keeps the JSON-lines log consistent with a resumed run: lines after `step` are dropped. A symlink in the
// log's place is refused (AppendFile's rule), so a user's file is neither read nor appended to.
void truncate_log(const std::string& path, int64_t step) {
  std::error_code ec;
  const auto st = fs::symlink_status(path, ec);
  if (!fs::exists(st)) return;
  if (fs::is_symlink(st)) fail("{}: is a symbolic link; a log file is never followed through one", path);
  std::istringstream in(read_file(path));  // refuses a FIFO or device instead of blocking on it
  std::string line, kept;
  int64_t number = 0;
  while (std::getline(in, line)) {
    ++number;
    try {
      auto j = parse_json(line, path);
      if (j.value("step", int64_t(0)) <= step) kept += line + "\n";
    } catch (const std::exception&) {
      // Only the last line may be torn (a killed run); a damaged line before it is someone's edit or a disk's
      // error, and dropping it would lose a logged step.
      if (in.peek() != std::char_traits<char>::eof())
        fail("{}: line {} is not a JSON object, so this run's log is damaged; move it aside to resume (the "
             "resumed run then starts a new log)",
             path, number);
    }
  }
  write_file_atomic(path, kept);
}

// The scalars of a log line for TensorBoard: every finite number but the step, tagged by its key.
std::vector<TfScalar> log_scalars(const nlohmann::json& line) {
  std::vector<TfScalar> out;
  for (const auto& [key, v] : line.items())
    if (key != "step" && v.is_number() && std::isfinite(v.get<double>())) out.emplace_back(key, v.get<double>());
  return out;
}

}  // namespace

void RunMetrics::open(const MetricsOptions& o, int64_t step, bool resumed) {
  o_ = o;
  log_path_ = (fs::path(o_.out_dir) / "log.jsonl").string();
  if (o_.main_rank) {
    if (resumed) truncate_log(log_path_, step);
    else write_file_atomic(log_path_, "");
    log_file_ = AppendFile(log_path_);
  }
  // train.tensorboard: a new events file per start; its SessionLog START at the first step this start logs
  // makes TensorBoard drop what an earlier start logged from there on, as truncate_log does for log.jsonl.
  if (o_.main_rank && o_.tensorboard) events_ = std::make_unique<EventFileWriter>(o_.out_dir, step + 1);
  tty_ = o_.console && ::isatty(STDOUT_FILENO);
}

void RunMetrics::start(int64_t step) {
  t_start_ = std::chrono::steady_clock::now();
  t_last_ = t_start_;
  first_step_ = step;
}

void RunMetrics::step(int64_t step, int64_t tokens, const StepNumbers& r, bool finite,
                      const std::function<void(nlohmann::json&)>& fields) {
  const int64_t steps = o_.steps;
  const bool last = step == steps;
  // The log file gets the same lines whether or not the run was interrupted; the console also shows
  // the first step after a resume.
  const bool log_now = step % o_.log_every == 0 || last || step == 1;
  if (o_.main_rank && finite && (log_now || step == first_step_ + 1)) {
    auto now = std::chrono::steady_clock::now();
    const double dt = std::chrono::duration<double>(now - t_last_).count();
    const double elapsed = std::chrono::duration<double>(now - t_start_).count();
    const double tps = tokens_per_s(tokens_since_, dt);
    const double u = mfu(flops_per_token_, tps, o_.peak_tflops);
    const double eta = eta_s(elapsed, step - first_step_, steps - step);
    nlohmann::json j{{"step", step},     {"loss", r.loss},      {"lr", r.lr},          {"grad_norm", r.grad_norm},
                     {"tokens", tokens}, {"tokens_per_s", tps}, {"elapsed_s", elapsed}};
    if (u >= 0) j["mfu"] = u;
    if (fields) fields(j);
    if (log_now) line(j);
    if (o_.console) logging::info("{}", step_line(step, steps, r, tps, u, eta));
    t_last_ = now;
    tokens_since_ = 0;
  } else if (tty_) {
    logging::progress(progress_bar(step, steps));
  }
}

void RunMetrics::validation(int64_t step, double vl) {
  line({{"step", step}, {"val_loss", vl}, {"val_ppl", std::exp(vl)}});
  if (o_.console) logging::info("step {:>6} | validation loss {:.4f} | ppl {:.3f}", step, vl, std::exp(vl));
}

void RunMetrics::line(const nlohmann::json& j) {
  if (!o_.main_rank) return;
  log_file_.append(j.dump() + "\n");
  if (events_) {
    const auto scalars = log_scalars(j);
    if (!scalars.empty()) events_->write_scalars(j.at("step").get<int64_t>(), scalars);
  }
}

double RunMetrics::tokens_per_s(int64_t tokens, double seconds) { return seconds > 0 ? tokens / seconds : 0; }

double RunMetrics::mfu(double flops_per_token, double tokens_per_s, double peak_tflops) {
  return peak_tflops > 0 ? flops_per_token * tokens_per_s / (peak_tflops * 1e12) : -1;
}

double RunMetrics::eta_s(double elapsed_s, int64_t steps_run, int64_t steps_left) {
  return (elapsed_s / double(steps_run)) * double(steps_left);
}

std::string RunMetrics::step_line(int64_t step, int64_t steps, const StepNumbers& r, double tokens_per_s, double mfu,
                                  double eta_s) {
  return fmt::format("step {:>6}/{} | loss {:.4f} | lr {:.2e} | grad-norm {:.3f} | {:.1f}k tok/s | MFU {} | ETA {}",
                     step, steps, r.loss, r.lr, r.grad_norm, tokens_per_s / 1e3,
                     mfu >= 0 ? fmt::format("{:.1f}%", 100 * mfu) : std::string("-"), format_duration(eta_s));
}

std::string RunMetrics::progress_bar(int64_t step, int64_t steps) {
  const int width = 30, done = int(width * step / steps);
  return fmt::format("[{}{}] step {}/{}", std::string(done, '#'), std::string(width - done, '.'), step, steps);
}

std::string roof_file_path() {
  if (const char* p = env::get("DROPE_PEAK_FILE")) return p;
  if (const char* x = env::get("XDG_CACHE_HOME")) return (fs::path(x) / "drope" / "peak.json").string();
  const char* home = env::get("HOME");
  return (fs::path(home ? home : ".") / ".cache" / "drope" / "peak.json").string();
}

nlohmann::json roof_json(const GemmRoof& roof) {
  return {{"cpu", roof.cpu}, {"levels", roof.levels}, {"threads", roof.threads}, {"roof_gflops", roof.gflops}};
}

void write_roof(const std::string& path, const GemmRoof& roof) {
  if (const auto dir = fs::path(path).parent_path(); !dir.empty()) fs::create_directories(dir);
  write_file_atomic(path, roof_json(roof).dump(2) + "\n");
}

std::optional<GemmRoof> read_roof(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return std::nullopt;
  const auto j = read_json_file(path, 1 << 20);
  GemmRoof r;
  try {
    r.cpu = j.at("cpu").get<std::string>();
    r.levels = j.at("levels").get<std::string>();
    r.threads = j.at("threads").get<int>();
    for (const auto& [k, v] : j.at("roof_gflops").items()) r.gflops[k] = v.get<double>();
  } catch (const nlohmann::json::exception&) {
    fail("{}: not a GEMM roof file (expected cpu, levels, threads and roof_gflops, as drope-bench peak --save "
         "writes them)",
         path);
  }
  return r;
}

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0)
      if (const auto pos = line.find(':'); pos != std::string::npos && pos + 2 <= line.size())
        return line.substr(pos + 2);
  return "unknown CPU";
}

double mfu_peak_tflops(double peak_override, const std::string& dtype, const std::optional<GemmRoof>& roof,
                       const std::string& cpu, const std::string& levels, int threads, std::string* why) {
  const auto say = [&](std::string s) {
    if (why) *why = std::move(s);
  };
  if (peak_override > 0) {
    say(fmt::format("MFU against train.peak_tflops = {}", peak_override));
    return peak_override;
  }
  if (!roof) {
    say("no MFU: no measured GEMM roof (drope-bench peak --save) and no train.peak_tflops");
    return 0;
  }
  if (roof->cpu != cpu || roof->levels != levels || roof->threads != threads) {
    say(fmt::format("no MFU: the saved GEMM roof is of another setting ({}, {}, {} threads; this run: {}, {}, {} "
                    "threads)",
                    roof->cpu, roof->levels, roof->threads, cpu, levels, threads));
    return 0;
  }
  const auto it = roof->gflops.find(dtype);
  if (it == roof->gflops.end() || !(it->second > 0)) {
    say(fmt::format("no MFU: the saved GEMM roof has no {} entry", dtype));
    return 0;
  }
  say(fmt::format("MFU against the measured {} GEMM roof, {:.0f} GFLOP/s ({} threads)", dtype, it->second, threads));
  return it->second / 1e3;
}

double training_peak_tflops(double peak_override, const std::string& dtype, bool cpu, bool say) {
  std::string why;
  if (peak_override > 0 || !cpu) return mfu_peak_tflops(peak_override, dtype, std::nullopt, "", "", 0, &why);
  // Said only when a roof file exists: runs on a machine nobody measured print no extra line.
  const auto path = roof_file_path();
  const auto roof = read_roof(path);
  const double peak =
      mfu_peak_tflops(0, dtype, roof, cpu_model_name(), kernels::describe_cpu_levels(), at::get_num_threads(), &why);
  if (say && roof) logging::info("{} ({})", why, path);
  return peak;
}

}  // namespace drope::train
