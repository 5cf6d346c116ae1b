#pragma once
// Live and peak bytes of CPU tensors, for checking the memory plan against what a run really holds.
//
// Opt-in (DROPE_TRACK_TENSOR_MEMORY=1 in drope-train): LibTorch's CPU allocator is replaced by a wrapper that
// keeps a size header in front of each block and two counters. Only tensors allocated after installation are
// counted; buffers outside LibTorch's allocator (oneDNN scratch, our kernels' std::vector) are not.
#include <cstdint>
#include <optional>

namespace drope::train {

struct TensorMemory {
  int64_t live = 0;  // bytes of CPU tensors alive now
  int64_t peak = 0;  // most bytes alive at once since installation or the last reset_peak()
};

// Installs the counting allocator once (thread-safe, idempotent). Returns false on a second call's no-op.
bool install_tensor_memory_tracker();
// Installs the tracker when the environment variable DROPE_TRACK_TENSOR_MEMORY is "1"; any other value than
// unset, "0" or "1" is an error naming the variable.
void install_tensor_memory_tracker_from_env();
// The counters, or nothing when the tracker is not installed.
std::optional<TensorMemory> tensor_memory();
void reset_tensor_memory_peak();

}  // namespace drope::train
