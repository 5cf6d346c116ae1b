#include "backend.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>

#include <spdlog/logger.h>
#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>

namespace drope::logging::backend {

namespace {

constexpr const char kClearLine[] = "\r\033[K";  // to column 0, erase to the end of the line

bool is_terminal(std::FILE* f) { return ::isatty(::fileno(f)) == 1; }

// The console: levels below warn to `out`, warn and above to `err` after "warning: " / "error: ", no
// timestamps. A progress line drawn on a terminal stays open until the next line replaces or clears it.
class ConsoleSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  ConsoleSink(std::string prefix, std::FILE* out, std::FILE* err) : prefix_(std::move(prefix)), out_(out), err_(err) {}

  void progress(std::string_view line, std::FILE* stream, bool last) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!should_log(spdlog::level::info)) return;
    if (stream == nullptr) stream = out_;
    const bool tty = is_terminal(stream);
    if (!tty) close_progress();
    std::string s = tty ? kClearLine : "";
    s += prefix_;
    s += line;
    if (!tty || last) s += '\n';
    put(stream, s);
    open_ = tty && !last ? stream : nullptr;
  }

 protected:
  void sink_it_(const spdlog::details::log_msg& m) override {
    close_progress();
    std::string s = prefix_;
    s += label(m.level);
    s.append(m.payload.data(), m.payload.size());
    s += '\n';
    put(m.level >= spdlog::level::warn ? err_ : out_, s);
  }

  void flush_() override {
    std::fflush(out_);
    std::fflush(err_);
  }

 private:
  static const char* label(spdlog::level::level_enum l) {
    switch (l) {
      case spdlog::level::trace: return "trace: ";
      case spdlog::level::debug: return "debug: ";
      case spdlog::level::warn: return "warning: ";
      case spdlog::level::err:
      case spdlog::level::critical: return "error: ";
      default: return "";
    }
  }

  static void put(std::FILE* f, const std::string& s) {
    std::fwrite(s.data(), 1, s.size(), f);
    std::fflush(f);
  }

  void close_progress() {
    if (open_ == nullptr) return;
    put(open_, kClearLine);
    open_ = nullptr;
  }

  std::string prefix_;
  std::FILE* out_;
  std::FILE* err_;
  std::FILE* open_ = nullptr;  // the terminal stream with a progress line on it
};

// The run's log file, on a descriptor opened by the caller (drope::AppendFile: no symlink followed, a regular
// file). Lines are written whole with write(2), so the file is complete up to the last line even after a crash.
// A failed write (full disk, file-size limit) is reported once on `err` and ends the file; the console goes on.
class RunFileSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  RunFileSink(int fd, std::string path, std::FILE* err) : fd_(fd), path_(std::move(path)), err_(err) {}
  ~RunFileSink() override {
    if (fd_ >= 0) ::close(fd_);
  }

 protected:
  void sink_it_(const spdlog::details::log_msg& m) override {
    if (fd_ < 0) return;
    spdlog::memory_buf_t line;
    formatter_->format(m, line);
    const char* p = line.data();
    size_t left = line.size();
    while (left > 0) {
      const ssize_t n = ::write(fd_, p, left);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        const std::string msg =
            "warning: " + path_ + ": write failed (" + std::strerror(errno) + "); the log file ends here\n";
        std::fwrite(msg.data(), 1, msg.size(), err_);
        std::fflush(err_);
        ::close(fd_);
        fd_ = -1;
        return;
      }
      p += n;
      left -= static_cast<size_t>(n);
    }
  }
  void flush_() override {}

 private:
  int fd_;
  std::string path_;
  std::FILE* err_;
};

std::shared_ptr<spdlog::logger> g_logger;
std::shared_ptr<ConsoleSink> g_console;
spdlog::sink_ptr g_file;  // the run file, at most one
std::string g_prefix;
std::FILE* g_err = stderr;

spdlog::level::level_enum to_spdlog(int level) { return static_cast<spdlog::level::level_enum>(level); }

}  // namespace

void configure(const ConsoleConfig& c) {
  if (g_logger) g_logger->flush();
  g_prefix = c.prefix;
  g_err = c.err;
  g_console = std::make_shared<ConsoleSink>(c.prefix, c.out, c.err);
  g_console->set_level(to_spdlog(c.level));
  g_file.reset();
  g_logger = std::make_shared<spdlog::logger>(c.tool, g_console);
  g_logger->set_level(to_spdlog(c.level));
  g_logger->flush_on(spdlog::level::trace);  // a run's file is complete up to the last line, even after a crash
  spdlog::set_default_logger(g_logger);
}

void add_file(int fd, const std::string& path, int level) {
  auto sink = std::make_shared<RunFileSink>(fd, path, g_err);
  // The prefix is plain text ("[rank N] "): no '%' to escape.
  sink->set_formatter(std::make_unique<spdlog::pattern_formatter>("[%Y-%m-%d %H:%M:%S.%e] [%l] " + g_prefix + "%v"));
  sink->set_level(to_spdlog(level));
  auto& sinks = g_logger->sinks();
  if (g_file) sinks.erase(std::remove(sinks.begin(), sinks.end(), g_file), sinks.end());  // a new run, a new file
  g_file = sink;
  sinks.push_back(sink);
  g_logger->set_level(std::min(g_console->level(), sink->level()));
}

bool enabled(int level) { return g_logger->should_log(to_spdlog(level)); }

void write(int level, std::string_view message) {
  g_logger->log(to_spdlog(level), spdlog::string_view_t(message.data(), message.size()));
}

void progress(std::string_view line, std::FILE* stream, bool last) { g_console->progress(line, stream, last); }

void flush() {
  if (g_logger) g_logger->flush();
}

}  // namespace drope::logging::backend
