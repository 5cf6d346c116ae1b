#include "drope/train/tensor_memory.h"

#include <atomic>

#include <c10/core/Allocator.h>
#include <c10/core/impl/alloc_cpu.h>

#include "drope/core/numbers.h"

namespace drope::train {
namespace {

// 64 bytes keep the data as aligned as c10's own CPU allocations (gAlignment = 64).
constexpr size_t kHeader = 64;

std::atomic<int64_t> g_live{0}, g_peak{0};
std::atomic<bool> g_installed{false};

void release(void* data) {
  if (data == nullptr) return;
  char* block = static_cast<char*>(data) - kHeader;
  int64_t n = 0;
  std::memcpy(&n, block, sizeof n);
  g_live.fetch_sub(n, std::memory_order_relaxed);
  c10::free_cpu(block);
}

struct CountingCpuAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t n) override {
    char* block = static_cast<char*>(c10::alloc_cpu(n + kHeader));
    const int64_t bytes = int64_t(n);
    std::memcpy(block, &bytes, sizeof bytes);
    const int64_t now = g_live.fetch_add(bytes, std::memory_order_relaxed) + bytes;
    int64_t peak = g_peak.load(std::memory_order_relaxed);
    while (now > peak && !g_peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
    }
    void* data = block + kHeader;
    return {data, data, &release, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
  void copy_data(void* dest, const void* src, std::size_t count) const override { default_copy_data(dest, src, count); }
};

CountingCpuAllocator g_allocator;

}  // namespace

bool install_tensor_memory_tracker() {
  bool expected = false;
  if (!g_installed.compare_exchange_strong(expected, true)) return false;
  // The highest priority, so that nothing registered later replaces it.
  c10::SetAllocator(c10::DeviceType::CPU, &g_allocator, UINT8_MAX);
  return true;
}

void install_tensor_memory_tracker_from_env() {
  if (env_switch("DROPE_TRACK_TENSOR_MEMORY").value_or(false)) install_tensor_memory_tracker();
}

std::optional<TensorMemory> tensor_memory() {
  if (!g_installed.load()) return std::nullopt;
  return TensorMemory{g_live.load(std::memory_order_relaxed), g_peak.load(std::memory_order_relaxed)};
}

void reset_tensor_memory_peak() { g_peak.store(g_live.load(std::memory_order_relaxed), std::memory_order_relaxed); }

}  // namespace drope::train
