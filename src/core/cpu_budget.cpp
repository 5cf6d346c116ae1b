#include "drope/core/cpu_budget.h"
#include "drope/core/environment.h"

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "drope/core/error.h"
#include "drope/core/numbers.h"

namespace drope {

namespace {

// Reads up to cap − 1 bytes of a small file into buf (NUL-terminated); false when it cannot. Non-blocking
// open: a FIFO planted at a cgroup path must not hang start-up.
bool read_small(const char* path, char* buf, size_t cap) {
  const int fd = ::open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return false;
  size_t n = 0;
  while (n + 1 < cap) {
    const ssize_t r = ::read(fd, buf + n, cap - 1 - n);
    if (r <= 0) break;
    n += size_t(r);
  }
  ::close(fd);
  buf[n] = '\0';
  return n > 0;
}

// This process's cgroup v2 directory (/sys/fs/cgroup/<path of the "0::" line of /proc/self/cgroup>) into
// dir; false without a unified hierarchy.
bool cgroup_v2_dir(char* dir, size_t cap) {
  char self[4096];
  if (!read_small("/proc/self/cgroup", self, sizeof self)) return false;
  const char* line = std::strstr(self, "0::");
  if (!line) return false;
  std::snprintf(dir, cap, "/sys/fs/cgroup%s", line + 3);
  if (char* nl = std::strchr(dir, '\n')) *nl = '\0';
  return true;
}

// Smallest cgroup v2 quota on the path from this process's cgroup up to the root, 0 when none.
double cgroup_v2_quota() {
  char dir[4096];
  if (!cgroup_v2_dir(dir, sizeof dir)) return 0;
  double best = 0;
  for (;;) {
    char path[4200], text[128];
    std::snprintf(path, sizeof path, "%s/cpu.max", dir);
    if (read_small(path, text, sizeof text)) {
      const double q = parse_cpu_max(text);
      if (q > 0 && (best == 0 || q < best)) best = q;
    }
    char* slash = std::strrchr(dir, '/');
    if (!slash || slash == dir || std::strcmp(dir, "/sys/fs/cgroup") == 0) break;
    *slash = '\0';
  }
  return best;
}

// cgroup v1 CFS quota (cpu.cfs_quota_us / cpu.cfs_period_us of the cpu controller's mount), 0 when none.
double cgroup_v1_quota() {
  for (const char* base : {"/sys/fs/cgroup/cpu,cpuacct", "/sys/fs/cgroup/cpu"}) {
    char path[256], q[64], p[64];
    std::snprintf(path, sizeof path, "%s/cpu.cfs_quota_us", base);
    if (!read_small(path, q, sizeof q)) continue;
    std::snprintf(path, sizeof path, "%s/cpu.cfs_period_us", base);
    if (!read_small(path, p, sizeof p)) continue;
    const double quota = std::strtod(q, nullptr), period = std::strtod(p, nullptr);
    if (quota > 0 && period > 0 && std::isfinite(quota / period)) return quota / period;
  }
  return 0;
}

// First number after `key` in a /proc/meminfo-style text, 0 when absent.
uint64_t field_kb(const char* text, const char* key) {
  const char* at = std::strstr(text, key);
  return at ? std::strtoull(at + std::strlen(key), nullptr, 10) : 0;
}

// limit − usage of this process's cgroup (v2, else v1), UINT64_MAX when unlimited or unknown.
uint64_t cgroup_memory_left() {
  char dir[4096], path[4200], text[64], usage[64];
  if (cgroup_v2_dir(dir, sizeof dir)) {
    std::snprintf(path, sizeof path, "%s/memory.max", dir);
    if (read_small(path, text, sizeof text) && std::strncmp(text, "max", 3) != 0) {
      std::snprintf(path, sizeof path, "%s/memory.current", dir);
      const uint64_t limit = std::strtoull(text, nullptr, 10);
      const uint64_t used = read_small(path, usage, sizeof usage) ? std::strtoull(usage, nullptr, 10) : 0;
      return limit > used ? limit - used : 0;
    }
  }
  if (read_small("/sys/fs/cgroup/memory/memory.limit_in_bytes", text, sizeof text)) {
    const uint64_t limit = std::strtoull(text, nullptr, 10);
    const uint64_t used = read_small("/sys/fs/cgroup/memory/memory.usage_in_bytes", usage, sizeof usage)
                              ? std::strtoull(usage, nullptr, 10)
                              : 0;
    if (limit < (uint64_t(1) << 60)) return limit > used ? limit - used : 0;
  }
  return UINT64_MAX;
}

}  // namespace

double parse_cpu_max(const char* text) {
  if (!text) return 0;
  char* end = nullptr;
  if (std::strncmp(text, "max", 3) == 0) return 0;
  const double quota = std::strtod(text, &end);
  if (end == text) return 0;
  const double period = std::strtod(end, nullptr);
  if (!(quota > 0) || !(period > 0) || !std::isfinite(quota / period)) return 0;
  return quota / period;
}

int threads_for(int affinity, double quota) {
  int n = affinity > 0 ? affinity : 1;
  if (quota > 0 && quota < n) n = quota < 1 ? 1 : int(std::floor(quota));
  return n;
}

CpuBudget cpu_budget() {
  CpuBudget b;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) b.affinity = CPU_COUNT(&set);
  if (b.affinity < 1) b.affinity = 1;
  b.quota = cgroup_v2_quota();
  if (b.quota == 0) b.quota = cgroup_v1_quota();
  b.threads = threads_for(b.affinity, b.quota);
  return b;
}

bool configure_openmp_env() {
  // Runs before main: an invalid value changes nothing here and is refused by the tool's main.
  const SwitchValue v = switch_value(env::get("DROPE_OMP_DEFAULTS"));
  if (v == SwitchValue::kOff || v == SwitchValue::kInvalid) return false;
  bool changed = false;
  if (!env::is_set("OMP_NUM_THREADS")) {
    char n[32];
    std::snprintf(n, sizeof n, "%d", cpu_budget().threads);
    changed |= setenv("OMP_NUM_THREADS", n, 1) == 0;
  }
  if (!env::is_set("GOMP_SPINCOUNT") && !env::is_set("OMP_WAIT_POLICY"))
    changed |= setenv("OMP_WAIT_POLICY", "PASSIVE", 1) == 0;
  return changed;
}

void check_memory_estimate(double bytes, const std::string& what, const std::string& advice) {
  const double have = double(available_memory_bytes());
  if (!(bytes <= 0.9 * have) && have > 0)
    fail("{} needs about {:.1f} GiB; only {:.1f} GiB of memory is available ({})", what, bytes / double(1 << 30),
         have / double(1 << 30), advice);
}

uint64_t available_memory_bytes() {
  char info[8192];
  if (!read_small("/proc/meminfo", info, sizeof info)) return 0;
  const uint64_t avail = field_kb(info, "MemAvailable:") * 1024;
  if (avail == 0) return 0;
  return std::min(avail, cgroup_memory_left());
}

std::string describe_cpu_budget() {
  const CpuBudget b = cpu_budget();
  char line[256];
  const char* omp = env::get("OMP_NUM_THREADS");
  const char* spin = env::get("GOMP_SPINCOUNT");
  const char* wait = env::get("OMP_WAIT_POLICY");
  char quota[32] = "none";
  if (b.quota > 0) std::snprintf(quota, sizeof quota, "%.2f", b.quota);
  std::snprintf(
      line, sizeof line,
      "cpus: affinity %d, cgroup quota %s -> %d threads; OMP_NUM_THREADS=%s GOMP_SPINCOUNT=%s OMP_WAIT_POLICY=%s",
      b.affinity, quota, b.threads, omp ? omp : "-", spin ? spin : "-", wait ? wait : "-");
  return line;
}

}  // namespace drope
