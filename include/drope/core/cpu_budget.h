// How many CPUs this process may really use, and OpenMP settings that stay fast when it must share them.
// Containers cap CPU time with a cgroup quota (cpu.max) or an affinity mask smaller than the machine; the
// OpenMP runtime sizes its team from the affinity mask only and spin-waits for ~300k iterations between
// parallel regions, so on an oversubscribed or shared machine threads burn the time slices of the threads
// they wait for, and a training run beside two busy processes slows down several times
// (docs/benchmarks.md#shared-cpu).
#pragma once

#include <cstdint>
#include <string>

namespace drope {

struct CpuBudget {
  int affinity = 1;      // CPUs in this process's affinity mask
  double quota = 0;      // CPUs granted by the cgroup CPU quota (v2 cpu.max or v1 cfs), 0 when unlimited
  int threads = 1;       // threads to use: min(affinity, floor(quota)), at least 1
};

// Reads the affinity mask and the cgroup quota of this process (/proc/self/cgroup, /sys/fs/cgroup).
// Allocation-free and stream-free: safe before C++ static initialisation.
CpuBudget cpu_budget();

// CPUs of a cgroup v2 cpu.max text ("max 100000" → 0 = unlimited, "150000 100000" → 1.5); 0 when malformed.
double parse_cpu_max(const char* text);

// Threads for an affinity count and a quota (0 = unlimited).
int threads_for(int affinity, double quota);

// Sets OMP_NUM_THREADS to cpu_budget().threads and OMP_WAIT_POLICY=PASSIVE (idle workers sleep instead of
// spinning: a little slower idle, much faster beside busy processes, where a lower spin count does not help;
// bench/busy.py, docs/benchmarks.md#shared-cpu), each only when the user has not set it (nor GOMP_SPINCOUNT,
// for the wait policy), and not at all with DROPE_OMP_DEFAULTS=0. Returns whether it changed the environment. libgomp
// reads these once, when it is loaded, so the tools call this before that and re-execute themselves when it returns
// true (apps/app_common.cpp).
bool configure_openmp_env();

// Bytes this process can still allocate without swapping or being killed: MemAvailable of /proc/meminfo,
// capped by the cgroup v2 memory.max (or v1 limit) minus current usage; 0 when unknown.
uint64_t available_memory_bytes();

// Fails when `bytes` (the memory that sizes from flags or files imply, computed in double so that no product
// wraps) is more than 90 % of available_memory_bytes(); no check when that is unknown. The message:
// "<what> needs about X GiB; only Y GiB of memory is available (<advice>)".
void check_memory_estimate(double bytes, const std::string& what, const std::string& advice);

// One line describing the thread budget and OpenMP settings in force, for logs.
std::string describe_cpu_budget();

}  // namespace drope
