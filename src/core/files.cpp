#include "drope/core/files.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string_view>
#include <utility>
#include <vector>

#include "drope/core/error.h"
#include "drope/core/fd_write.h"

namespace fs = std::filesystem;

namespace drope {

namespace {

constexpr std::string_view kTempPrefix = ".drope-tmp-";

// The pid in a name made by temp_path_for, or -1 when `name` is not one of ours.
pid_t temp_owner(std::string_view name) {
  if (name.substr(0, kTempPrefix.size()) != kTempPrefix) return -1;
  name.remove_prefix(kTempPrefix.size());
  int64_t pid = 0;
  size_t i = 0;
  for (; i < name.size() && i < 10 && name[i] >= '0' && name[i] <= '9'; ++i) pid = pid * 10 + (name[i] - '0');
  if (i == 0 || i >= name.size() || name[i] != '-' || pid <= 0 || pid > INT32_MAX) return -1;
  name.remove_prefix(i + 1);
  size_t h = 0;
  while (h < name.size() && h < 16 && std::isxdigit(static_cast<unsigned char>(name[h]))) ++h;
  if (h == 0 || h >= name.size() || name[h] != '.' || h + 1 == name.size()) return -1;
  return static_cast<pid_t>(pid);
}

// True when process `pid` no longer exists.
bool process_gone(pid_t pid) { return ::kill(pid, 0) != 0 && errno == ESRCH; }

// Removes stale temporaries in `dir` the first time this process writes there.
void clean_once(const fs::path& dir) {
  static std::mutex mu;
  static std::set<std::string> done;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (!done.insert(dir.string()).second) return;
  }
  remove_stale_temporaries(dir.empty() ? "." : dir.string());
}

}  // namespace

std::string temp_path_for(const std::string& path) {
  std::random_device rd;
  const fs::path p(path);
  const std::string name = fmt::format("{}{}-{:08x}.{}", kTempPrefix, ::getpid(), rd(), p.filename().string());
  return p.has_parent_path() ? (p.parent_path() / name).string() : name;
}

int remove_stale_temporaries(const std::string& dir) {
  int removed = 0;
  std::error_code ec;
  std::vector<fs::path> stale;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const pid_t pid = temp_owner(it->path().filename().string());
    if (pid > 0 && pid != ::getpid() && process_gone(pid)) stale.push_back(it->path());
  }
  for (const auto& p : stale) {
    std::error_code rec;
    fs::remove_all(p, rec);
    if (!rec) ++removed;
  }
  return removed;
}

void ignore_file_size_signal() { std::signal(SIGXFSZ, SIG_IGN); }

namespace {

// Device and inode of `p` (symlinks followed), or nullopt when it does not exist.
std::optional<std::pair<dev_t, ino_t>> file_id(const fs::path& p) {
  struct stat st{};
  if (::stat(p.c_str(), &st) != 0) return std::nullopt;
  return std::make_pair(st.st_dev, st.st_ino);
}

// True when the file `id` is `p` or one of its ancestors; `p` is resolved first, so symlinks and spellings
// ("a/../b", "./b") do not matter.
bool is_at_or_above(const std::pair<dev_t, ino_t>& id, const fs::path& p) {
  std::error_code ec;
  fs::path q = fs::weakly_canonical(fs::absolute(p, ec), ec);
  if (ec) return false;
  for (;;) {
    if (file_id(q) == id) return true;
    if (!q.has_relative_path()) return false;
    q = q.parent_path();
  }
}

}  // namespace

void check_output_dir(const std::string& dir, const OutputDirRule& rule) {
  if (dir.empty()) fail("{}: no output directory given", rule.flag);
  std::error_code canon_ec;
  const auto out_id = file_id(fs::weakly_canonical(fs::absolute(dir), canon_ec));
  for (const auto& [name, in] : rule.inputs) {
    if (in.empty()) continue;
    const auto in_id = file_id(in);
    if (!in_id) continue;
    if (out_id == in_id) fail("{} {} is the input {} {}; choose another output directory", rule.flag, dir, name, in);
    if (is_at_or_above(*in_id, dir))
      fail("{} {} is inside the input {} {}; choose an output directory outside it", rule.flag, dir, name, in);
    if (out_id && is_at_or_above(*out_id, in))
      fail("{} {} contains the input {} {}; choose an output directory that does not hold it", rule.flag, dir, name,
           in);
  }
  std::error_code ec;
  const auto st = fs::symlink_status(dir, ec);
  if (ec || !fs::exists(st)) return;
  if (!fs::is_directory(fs::status(dir, ec)))
    fail("{} {}: exists and is not a directory; refusing to replace it", rule.flag, dir);
  if (fs::is_empty(dir, ec) && !ec) return;
  for (const auto& m : rule.markers)
    if (fs::exists(fs::path(dir) / m, ec)) return;
  if (rule.force) return;
  std::string markers;
  for (const auto& m : rule.markers) markers += (markers.empty() ? "" : " or ") + m;
  fail("{} {}: exists, is not empty and is not a {} (no {}); refusing to write into it{}", rule.flag, dir, rule.what,
       markers, rule.force_hint.empty() ? "" : " (" + rule.force_hint + ")");
}

void check_output_paths(const std::string& flag, const std::string& out, const std::vector<std::string>& paths,
                        const std::vector<std::pair<std::string, std::string>>& inputs) {
  if (out.empty()) fail("{}: no output given", flag);
  for (const auto& [name, in] : inputs) {
    if (in.empty()) continue;
    const auto in_id = file_id(in);
    if (!in_id) continue;
    for (const auto& p : paths) {
      const std::string what =
          p == out ? fmt::format("{} {}", flag, out) : fmt::format("{} {} (file {})", flag, out, p);
      std::error_code ec;
      if (file_id(fs::weakly_canonical(fs::absolute(p), ec)) == in_id)
        fail("{} is the input {} {}; choose another output", what, name, in);
      fs::path full = fs::absolute(p).lexically_normal();
      if (full.filename().empty() && full.has_relative_path()) full = full.parent_path();  // "dir/" is dir
      const fs::path parent = full.parent_path();
      if (is_at_or_above(*in_id, parent))
        fail("{} is inside the input {} {}; choose an output outside it", what, name, in);
    }
  }
}

namespace {

// "<pid> (<program>)" of a live process, or "<pid>" when /proc does not say. The program is argv[0]'s file
// name: /proc/<pid>/comm would say "exe" for our tools, which re-execute themselves through /proc/self/exe.
std::string describe_process(int64_t pid) {
  std::ifstream cmdline(fmt::format("/proc/{}/cmdline", pid));
  std::string argv0;
  if (cmdline && std::getline(cmdline, argv0, '\0') && !argv0.empty())
    return fmt::format("{} ({})", pid, fs::path(argv0).filename().string());
  return std::to_string(pid);
}

// The pid written in a lock file (0 when empty or not a pid).
int64_t read_lock_pid(int fd) {
  char buf[32] = {};
  const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  if (n <= 0) return 0;
  int64_t pid = 0;
  for (ssize_t i = 0; i < n && buf[i] >= '0' && buf[i] <= '9' && pid < INT32_MAX; ++i) pid = pid * 10 + (buf[i] - '0');
  return pid > 0 && pid <= INT32_MAX ? pid : 0;
}

// `dir` as an absolute path without a trailing separator (so that its filename is its last component).
fs::path plain_dir(const std::string& dir) {
  fs::path p = fs::absolute(dir).lexically_normal();
  if (p.filename().empty() && p.has_relative_path()) p = p.parent_path();
  return p;
}

}  // namespace

DirLock::DirLock(const std::string& dir, Where where) {
  if (dir.empty()) fail("no directory given to lock");
  if (where == Where::kBeside && written_in_place(dir)) return;  // nothing is replaced: no lock file in /dev
  const fs::path d = plain_dir(dir);
  const fs::path home = where == Where::kInside ? d : d.parent_path();
  std::error_code ec;
  for (fs::path p = home; !p.empty() && !fs::exists(fs::symlink_status(p, ec)); p = p.parent_path()) {
    created_.push_back(p.string());  // deepest first; removed again on release while empty
    if (!p.has_relative_path()) break;
  }
  fs::create_directories(home, ec);
  if (ec) fail("{}: cannot create directory {} ({})", dir, home.string(), ec.message());
  path_ = where == Where::kInside ? (d / kDirLockName).string()
                                  : (home / ("." + d.filename().string() + ".drope-lock")).string();
  remove_ = where == Where::kBeside;
  for (int attempt = 0;; ++attempt) {
    const int fd = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY, 0644);
    if (fd < 0) fail("{}: cannot open the lock file {} ({})", dir, path_, std::strerror(errno));
    struct stat mine{};
    if (::fstat(fd, &mine) != 0 || !S_ISREG(mine.st_mode)) {
      ::close(fd);
      fail("{}: the lock file {} is not a regular file", dir, path_);
    }
    int r;
    do r = ::flock(fd, LOCK_EX | LOCK_NB);
    while (r != 0 && errno == EINTR);
    if (r != 0) {
      const int err = errno;
      const int64_t holder = err == EWOULDBLOCK ? read_lock_pid(fd) : 0;
      ::close(fd);
      if (err != EWOULDBLOCK) fail("{}: cannot lock {} ({})", dir, path_, std::strerror(err));
      if (holder > 0)
        fail("{} is in use by process {}; wait for it to end or choose another directory", dir,
             describe_process(holder));
      fail("{} is in use by another process; wait for it to end or choose another directory", dir);
    }
    // A holder that removes its lock file on release may have done so after our open: hold the file that the
    // path names now, or try again.
    struct stat now{};
    if (::stat(path_.c_str(), &now) == 0 && now.st_dev == mine.st_dev && now.st_ino == mine.st_ino) {
      fd_ = fd;
      break;
    }
    ::close(fd);
    if (attempt == 100) fail("{}: cannot lock {} (the lock file keeps being replaced)", dir, path_);
  }
  // A pid left in the file by a holder that is gone: it died holding the lock (a clean release empties or
  // removes the file).
  const int64_t before = read_lock_pid(fd_);
  if (before > 0 && before != ::getpid() && process_gone(static_cast<pid_t>(before))) {
    stale_owner_ = before;
    fmt::print(stderr, "info: {}: taking over the lock of process {}, which ended without releasing it\n", dir, before);
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
    const int err = errno;
    release();
    fail("{}: cannot write the lock file {} ({})", dir, path_, std::strerror(err));
  }
}

void DirLock::release() noexcept {
  if (fd_ < 0) return;
  // Still holding the lock: a process that opened the file meanwhile sees it removed (and retries) or empty.
  // A directory this lock created holding nothing but the lock file goes too: a refused run leaves nothing.
  bool remove = remove_;
  if (!remove && !created_.empty()) {
    std::error_code ec;
    fs::directory_iterator it(fs::path(path_).parent_path(), ec);
    if (!ec && it != fs::directory_iterator() && it->path() == fs::path(path_)) {
      it.increment(ec);
      remove = !ec && it == fs::directory_iterator();
    }
  }
  if (remove) ::unlink(path_.c_str());
  else if (::ftruncate(fd_, 0) != 0) errno = 0;  // the kernel drops the lock at close all the same
  ::close(fd_);
  fd_ = -1;
  for (const auto& d : created_) ::rmdir(d.c_str());  // only the empty ones go
  created_.clear();
}

DirLock::~DirLock() { release(); }

DirLock::DirLock(DirLock&& o) noexcept
    : fd_(std::exchange(o.fd_, -1)),
      path_(std::move(o.path_)),
      remove_(o.remove_),
      stale_owner_(o.stale_owner_),
      created_(std::move(o.created_)) {}

DirLock& DirLock::operator=(DirLock&& o) noexcept {
  if (this != &o) {
    release();
    fd_ = std::exchange(o.fd_, -1);
    path_ = std::move(o.path_);
    remove_ = o.remove_;
    stale_owner_ = o.stale_owner_;
    created_ = std::move(o.created_);
  }
  return *this;
}

namespace {
// What a non-regular file is, for messages.
const char* file_kind(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISFIFO(m)) return "a FIFO (named pipe)";
  if (S_ISSOCK(m)) return "a socket";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  return "not a regular file";
}
}  // namespace

InputFile::InputFile(const std::string& path) {
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) fail("{}: file not found", path);
    fail("{}: cannot open for reading ({})", path, std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) fail("{}: expected a regular file, found {}", path, file_kind(st.st_mode));
  // Non-blocking open: if the path was swapped for a FIFO since the stat, open() still returns at once.
  fd_ = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd_ < 0) fail("{}: cannot open for reading ({})", path, std::strerror(errno));
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    const int err = errno;
    ::close(fd_);
    fd_ = -1;
    if (err) fail("{}: cannot stat ({})", path, std::strerror(err));
    fail("{}: expected a regular file, found {}", path, file_kind(st.st_mode));
  }
  const int flags = ::fcntl(fd_, F_GETFL);
  if (flags >= 0) ::fcntl(fd_, F_SETFL, flags & ~O_NONBLOCK);
  size_ = static_cast<uint64_t>(st.st_size);
}

InputFile::~InputFile() {
  if (fd_ >= 0) ::close(fd_);
}

namespace {

// The live mappings, for the SIGBUS handler: a file truncated in place (cp or rsync --inplace over it) while it is
// mapped turns the next read of a page past its new end into SIGBUS, which would kill the tool without a word.
// The handler names the file and exits; it reads this table only (async-signal-safe: fixed slots, no allocation).
struct MapSlot {
  std::atomic<uintptr_t> begin{0};
  std::atomic<uint64_t> size{0};
  char path[256] = {};
};
MapSlot g_maps[4096];  // zero pages until used
std::mutex g_maps_mutex;
struct sigaction g_previous_bus_action{};

void write_stderr(const char* s, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(STDERR_FILENO, s, n);
    if (w <= 0 && errno != EINTR) return;
    if (w > 0) s += w, n -= size_t(w);
  }
}

void on_bus_error(int sig, siginfo_t* info, void* context) {
  const auto at = reinterpret_cast<uintptr_t>(info->si_addr);
  for (const MapSlot& m : g_maps) {
    const uintptr_t b = m.begin.load(std::memory_order_acquire);
    const uint64_t size = m.size.load(std::memory_order_relaxed);
    if (b == 0 || at < b || at - b >= size) continue;
    struct stat st{};  // stat is async-signal-safe: say "shrank" only when it did
    const bool shrank = ::stat(m.path, &st) == 0 && uint64_t(st.st_size) < size;
    static const char head[] = "error: ";
    static const char shrank_tail[] =
        ": the file shrank while it was being read (truncated or rewritten in place by another process); run "
        "again once nothing writes to it\n";
    static const char io_tail[] =
        ": a read of the file's memory map failed (an I/O error of its disk or network filesystem, or the file "
        "changed underneath)\n";
    write_stderr(head, sizeof head - 1);
    write_stderr(m.path, ::strnlen(m.path, sizeof m.path));
    if (shrank) write_stderr(shrank_tail, sizeof shrank_tail - 1);
    else write_stderr(io_tail, sizeof io_tail - 1);
    ::_exit(1);
  }
  // Not one of ours: the handler that was there before (a sanitizer's, Python's faulthandler), else the default.
  const struct sigaction& prev = g_previous_bus_action;
  if ((prev.sa_flags & SA_SIGINFO) && prev.sa_sigaction) {
    prev.sa_sigaction(sig, info, context);
    return;
  }
  if (!(prev.sa_flags & SA_SIGINFO) && prev.sa_handler != SIG_DFL && prev.sa_handler != SIG_IGN && prev.sa_handler) {
    prev.sa_handler(sig);
    return;
  }
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

}  // namespace

void watch_mapping(const void* map, uint64_t size, const std::string& path) {
  static std::once_flag installed;
  std::call_once(installed, [] {
    struct sigaction sa{};
    sa.sa_sigaction = on_bus_error;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGBUS, &sa, &g_previous_bus_action);
  });
  const std::lock_guard<std::mutex> lock(g_maps_mutex);
  for (MapSlot& m : g_maps) {
    if (m.begin.load(std::memory_order_relaxed) != 0) continue;
    const size_t n = std::min(path.size(), sizeof m.path - 1);
    std::memcpy(m.path, path.data(), n);
    m.path[n] = '\0';
    m.size.store(size, std::memory_order_relaxed);
    m.begin.store(reinterpret_cast<uintptr_t>(map), std::memory_order_release);
    return;
  }  // more live mappings than slots: that file's SIGBUS takes the previous action
}

void unwatch_mapping(const void* map) {
  const std::lock_guard<std::mutex> lock(g_maps_mutex);
  for (MapSlot& m : g_maps)
    if (m.begin.load(std::memory_order_relaxed) == reinterpret_cast<uintptr_t>(map)) {
      m.begin.store(0, std::memory_order_release);
      return;
    }
}

MappedFile::MappedFile(const std::string& path) {
  const InputFile f(path);
  size_ = f.size();
  if (size_ == 0) return;
  void* m = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, f.fd(), 0);
  if (m == MAP_FAILED) fail("{}: mmap failed ({})", path, std::strerror(errno));
  map_ = static_cast<const uint8_t*>(m);
  watch_mapping(map_, size_, path);
}

MappedFile::~MappedFile() {
  if (!map_) return;
  unwatch_mapping(map_);
  ::munmap(const_cast<uint8_t*>(map_), size_);
}

namespace {
// What changes when a file is replaced (device, inode) or written (size, modification time); not the change time,
// which a chmod or a hard-link snapshot (cp -al, rsync --link-dest) moves too.
struct FileIdentity {
  dev_t dev;
  ino_t ino;
  off_t size;
  int64_t mtime_ns;
  bool operator==(const FileIdentity& o) const {
    return dev == o.dev && ino == o.ino && size == o.size && mtime_ns == o.mtime_ns;
  }
};
std::optional<FileIdentity> identity_of(const fs::path& p) {
  struct stat st{};
  if (::stat(p.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return std::nullopt;
  return FileIdentity{st.st_dev, st.st_ino, st.st_size, int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec};
}
}  // namespace

struct StableFiles::Impl {
  std::vector<std::pair<fs::path, FileIdentity>> files;
};

StableFiles::StableFiles(const std::string& dir, const std::function<bool(const std::string& name)>& read)
    : impl_(std::make_unique<Impl>()) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (read(e.path().filename().string()))
      if (auto id = identity_of(e.path())) impl_->files.emplace_back(e.path(), *id);
}

StableFiles::~StableFiles() = default;

void StableFiles::check() const {
  for (const auto& [path, id] : impl_->files) {
    const auto now = identity_of(path);
    if (!now || !(*now == id))
      fail("{}: {} while it was being read and verified; run again once nothing writes to it", path.string(),
           now ? "was replaced or written to" : "was removed");
  }
}

std::string read_file(const std::string& path, uint64_t max_bytes) {
  InputFile f(path);
  if (f.size() > max_bytes)
    fail("{}: file is {} bytes, more than the {} bytes this reader accepts", path, f.size(), max_bytes);
  std::string out;
  out.resize(static_cast<size_t>(f.size()));
  size_t got = 0;
  while (true) {
    if (got == out.size()) {  // all fstat promised: probe for the end (or a file that grew since)
      char probe;
      const ssize_t n = ::read(f.fd(), &probe, 1);
      if (n == 0) break;
      if (n < 0) {
        if (errno == EINTR) continue;
        fail("{}: read error ({})", path, std::strerror(errno));
      }
      if (out.size() >= max_bytes) fail("{}: file grew beyond the {} bytes this reader accepts", path, max_bytes);
      out.resize(static_cast<size_t>(std::min<uint64_t>(max_bytes, std::max<uint64_t>(out.size() * 2, 4096))));
      out[got++] = probe;
      continue;
    }
    const ssize_t n = ::read(f.fd(), out.data() + got, out.size() - got);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("{}: read error ({})", path, std::strerror(errno));
    }
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  out.resize(got);
  return out;
}

std::string read_file_prefix(const std::string& path, uint64_t max_bytes) {
  InputFile f(path);
  std::string out(static_cast<size_t>(std::min(max_bytes, f.size())), '\0');
  size_t got = 0;
  while (got < out.size()) {
    const ssize_t n = ::read(f.fd(), out.data() + got, out.size() - got);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("{}: read error ({})", path, std::strerror(errno));
    }
    if (n == 0) break;  // the file shrank since fstat
    got += static_cast<size_t>(n);
  }
  out.resize(got);
  return out;
}

void fsync_path(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

namespace {

// Refuses an existing `path` that no file can be written as.
void check_writable_kind(const std::string& path) {
  struct stat st{};
  if (::stat(path.c_str(), &st) == 0 && (S_ISDIR(st.st_mode) || S_ISBLK(st.st_mode) || S_ISSOCK(st.st_mode)))
    fail("{}: exists and is {}; refusing to write a file there", path, file_kind(st.st_mode));
}

// Writes `content` to the existing `path` through its own descriptor, appending (a redirected stdout keeps
// what was written before). A FIFO without a reader is an error, not a wait.
void write_in_place(const std::string& path, const std::string& content) {
  std::fflush(nullptr);  // our own buffered output to the same stream goes first
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    if (errno == ENXIO) fail("{}: no process reads this FIFO; refusing to wait for one", path);
    fail("{}: cannot open for writing ({})", path, std::strerror(errno));
  }
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  try {
    write_all(fd, content, path);
  } catch (const Error&) {
    ::close(fd);
    throw;
  }
  if (::close(fd) != 0) fail("{}: close failed ({})", path, std::strerror(errno));
}

}  // namespace

bool written_in_place(const std::string& path) {
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0) return false;  // absent, or a dangling symlink (replaced)
  if (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode)) return true;
  struct stat link{};
  if (::lstat(path.c_str(), &link) != 0 || !S_ISLNK(link.st_mode)) return false;
  std::error_code ec;
  const std::string full = fs::absolute(path, ec).lexically_normal().string();
  return full.rfind("/dev/", 0) == 0 || full.rfind("/proc/", 0) == 0;
}

void write_file_atomic(const std::string& path, const std::string& content) {
  check_writable_kind(path);
  if (written_in_place(path)) {
    write_in_place(path, content);
    return;
  }
  fs::path target(path);
  if (target.has_parent_path()) {
    std::error_code ec;
    fs::create_directories(target.parent_path(), ec);
    if (ec) fail("{}: cannot create directory {} ({})", path, target.parent_path().string(), ec.message());
  }
  clean_once(target.parent_path());
  const std::string tmp = temp_path_for(path);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) fail("{}: cannot create temp file {} ({})", path, tmp, std::strerror(errno));
  try {
    write_all(fd, content, path);
  } catch (const Error&) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  // A full disk can surface only here (delayed allocation, NFS): the descriptor is closed either way.
  const int sync_err = ::fsync(fd) == 0 ? 0 : errno;
  const int close_err = ::close(fd) == 0 ? 0 : errno;
  if (sync_err != 0 || close_err != 0) {
    ::unlink(tmp.c_str());
    fail("{}: {} failed ({})", path, sync_err != 0 ? "fsync" : "close", std::strerror(sync_err ? sync_err : close_err));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    fail("{}: rename from temp file failed ({})", path, std::strerror(err));
  }
  fsync_path(target.has_parent_path() ? target.parent_path().string() : ".");
}

void write_dir_atomic(const std::string& dir, const std::function<void(const std::string&)>& fill) {
  fs::path target = fs::absolute(dir);
  std::error_code ec;
  fs::create_directories(target.parent_path(), ec);
  if (ec) fail("{}: cannot create parent directory ({})", dir, ec.message());
  if (fs::exists(target) && !fs::is_directory(target)) fail("{}: exists and is not a directory", dir);
  clean_once(target.parent_path());
  const std::string tmp = temp_path_for(target.string());
  fs::create_directories(tmp, ec);
  if (ec) fail("{}: cannot create temp directory {} ({})", dir, tmp, ec.message());
  try {
    fill(tmp);
    for (const auto& e : fs::directory_iterator(tmp)) fsync_path(e.path().string());
    fsync_path(tmp);
  } catch (const Error& e) {
    fs::remove_all(tmp, ec);
    // Name the files as the user knows them: <dir>/x, not <temp dir>/x.
    std::string msg = e.what();
    for (size_t at = msg.find(tmp); at != std::string::npos; at = msg.find(tmp, at + target.string().size()))
      msg.replace(at, tmp.size(), target.string());
    throw Error(msg);
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
  if (fs::is_directory(target, ec) &&
      ::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, target.c_str(), RENAME_EXCHANGE) == 0) {
    // Swapped in one step (no moment without `dir`); the temp name now holds the previous directory.
    fsync_path(target.parent_path().string());
    fs::remove_all(tmp, ec);
    return;
  }
  std::string old;  // fallback where the filesystem cannot exchange: move the previous one aside first
  if (fs::exists(target)) {
    old = temp_path_for(target.string());
    fs::rename(target, old, ec);
    if (ec) {
      fs::remove_all(tmp, ec);
      fail("{}: cannot move the previous directory aside", dir);
    }
  }
  fs::rename(tmp, target, ec);
  if (ec) {
    if (!old.empty()) fs::rename(old, target, ec);
    fs::remove_all(tmp, ec);
    fail("{}: cannot rename the new directory into place", dir);
  }
  if (!old.empty()) fs::remove_all(old, ec);
  fsync_path(target.parent_path().string());
}

}  // namespace drope
